/**
 * Cluster mode: nodes that share a `ClusterRegistry` (PostgreSQL) find each other's endpoints by
 * name, hold every name once across the cluster, pool workers across nodes, and re-create the
 * relocatable endpoints of a node whose lease expired on a surviving node.
 *
 *   const node = ReliableSystem.layerCluster({
 *     lease: "3 seconds",
 *     relocatable: [Cluster.relocatable("dispatcher", (name) => startDispatcher(name))]
 *   }).pipe(
 *     Layer.provideMerge(Transport.layerSocket({ host, port })),
 *     Layer.provide(Cluster.layerPg()),
 *     Layer.provide(PgClient.layer({ url }))
 *   )
 *   yield* Cluster.spawn("dispatcher", "job-dispatcher")                  // on this node
 *   yield* Cluster.spawn("dispatcher", "job-dispatcher", { node: other })  // on another member
 */
import { Duration, Effect } from "effect"
import type { Option } from "effect"
import type { ClusterPlacementError, ClusterRegistryError } from "./Cluster/ClusterErrors.js"
import type { ClusterNode, ClusterRecordStatus } from "./Cluster/ClusterRegistry.js"
import * as Config from "./Protocol/Config.js"
import { ReliableClusterRequired } from "./Protocol/Errors.js"
import type { ReliableConfigError } from "./Protocol/Errors.js"
import { ReliableSystem } from "./ReliableSystem.js"

export { ClusterPlacementError, ClusterRegistryError, ReliableOwnershipLost } from "./Cluster/ClusterErrors.js"
export type { PlacementRefusal } from "./Cluster/ClusterErrors.js"
export type { EndpointKind } from "./Protocol/WireMessage.js"
export { ClusterRegistry } from "./Cluster/ClusterRegistry.js"
export type {
  ClaimRequest,
  ClaimResult,
  ClusterNode,
  ClusterRecord,
  ClusterRecordStatus,
  ClusterRegistryService,
  PlaceResult
} from "./Cluster/ClusterRegistry.js"
export type { ClusterOptions } from "./Cluster/ClusterOptions.js"
export { layerMemory, makeMemory } from "./Cluster/MemoryClusterRegistry.js"
export { layerPg, makePg } from "./Cluster/PgClusterRegistry.js"
export type { PgClusterRegistryOptions } from "./Cluster/PgClusterRegistry.js"
export { relocatable } from "./Cluster/Relocatable.js"
export type { Relocatable, RelocatableFactory } from "./Cluster/Relocatable.js"
export { DefaultLease } from "./Protocol/Config.js"
export { ReliableClusterRequired } from "./Protocol/Errors.js"

export interface SpawnOptions {
  /** The member to create the endpoint on (`host:port`); default this node. */
  readonly node?: string
  /** How long to wait for that node to start it; default two leases. */
  readonly timeout?: Duration.DurationInput
}

const spawnKeys = Config.optionKeys<SpawnOptions>({ node: true, timeout: true })

const clusterOf = (operation: string) =>
  Effect.flatMap(ReliableSystem, (system) =>
    system.internal.cluster === undefined
      ? Effect.fail(new ReliableClusterRequired({
        operation,
        message: `${operation} needs a cluster member (ReliableSystem.layerCluster); this system is not clustered`
      }))
      : Effect.succeed(system.internal.cluster))

/**
 * Creates the relocatable endpoint `name` with the factory registered under `key`, on this node
 * or on the live member `options.node`, and waits until it runs there. The endpoint is then
 * relocatable: when its node's lease expires (or the node leaves), exactly one surviving node
 * with the same factory re-creates it; it lives until `Cluster.stop(name)`, across restarts of
 * the whole cluster. When it already runs (same name, same factory), `spawn` only waits for it
 * to be started, wherever it is. Fails with `ReliableClusterRequired` on a system that is not
 * clustered, and with `ClusterPlacementError` when the node is not a live member, lacks the
 * factory, another endpoint holds the name, or the node did not start it in time; with
 * `ReliableConfigError` on a bad option.
 */
export const spawn = (
  key: string,
  name: string,
  options: SpawnOptions = {}
): Effect.Effect<
  void,
  ReliableClusterRequired | ClusterPlacementError | ClusterRegistryError | ReliableConfigError,
  ReliableSystem
> =>
  Effect.gen(function*() {
    yield* Config.checkKeys("Cluster.spawn", options, spawnKeys)
    const member = yield* clusterOf("Cluster.spawn")
    const node = options.node === undefined ? member.node : yield* Config.checkName("node", options.node)
    const timeout = yield* Config.checkInterval("timeout", options.timeout, Duration.millis(2 * member.leaseMs))
    return yield* member.spawn(key, name, node, timeout)
  })

/**
 * Retires the relocatable endpoint `name` for good: no node re-creates it any more, and the node
 * running it closes it (within one lease renewal interval). Succeeds when there is no such
 * endpoint; fails with `ClusterPlacementError` ("NotRelocatable") for an endpoint pinned to its
 * node, which ends when the scope that made it closes.
 */
export const stop = (
  name: string
): Effect.Effect<void, ReliableClusterRequired | ClusterPlacementError | ClusterRegistryError, ReliableSystem> =>
  Effect.flatMap(clusterOf("Cluster.stop"), (member) => member.stop(name))

/** The live members of the cluster of the system in context. */
export const members: Effect.Effect<
  ReadonlyArray<ClusterNode>,
  ReliableClusterRequired | ClusterRegistryError,
  ReliableSystem
> = Effect.flatMap(clusterOf("Cluster.members"), (member) => member.registry.members)

/** Every endpoint record of the cluster of the system in context, live or not. */
export const endpoints: Effect.Effect<
  ReadonlyArray<ClusterRecordStatus>,
  ReliableClusterRequired | ClusterRegistryError,
  ReliableSystem
> = Effect.flatMap(clusterOf("Cluster.endpoints"), (member) => member.registry.endpoints)

/** Where the endpoint `name` lives, as the registry of the system in context records it. */
export const whereIs = (
  name: string
): Effect.Effect<Option.Option<ClusterRecordStatus>, ReliableClusterRequired | ClusterRegistryError, ReliableSystem> =>
  Effect.flatMap(clusterOf("Cluster.whereIs"), (member) => member.registry.get(name))
