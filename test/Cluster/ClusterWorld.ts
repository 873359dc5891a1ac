/**
 * Test support: several cluster members in one process on a shared memory hub and one shared
 * registry. A node can be *cut off* (its registry calls fail and its envelopes, both ways, are
 * dropped: a paused or partitioned node) and restored, or *crashed* (cut off, then closed without
 * being able to leave, so its lease simply runs out).
 */
import { Context, Duration, Effect, Exit, Layer, Schedule, Scope } from "effect"
import { ClusterRegistryError } from "../../src/Cluster/ClusterErrors.js"
import { ClusterRegistry } from "../../src/Cluster/ClusterRegistry.js"
import type { ClusterRegistryService } from "../../src/Cluster/ClusterRegistry.js"
import type { Relocatable } from "../../src/Cluster/Relocatable.js"
import type { Envelope } from "../../src/Protocol/WireMessage.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as MemoryTransport from "../../src/Transport/MemoryTransport.js"
import { Transport } from "../../src/Transport/Transport.js"

export interface World {
  readonly hub: MemoryTransport.MemoryHubService
  readonly registry: ClusterRegistryService
  readonly cut: Set<string>
}

export interface Member {
  readonly node: string
  readonly system: ReliableSystem.ReliableSystemService
  readonly context: Context.Context<ReliableSystem.ReliableSystem | Transport>
  readonly run: <A, E>(effect: Effect.Effect<A, E, ReliableSystem.ReliableSystem | Transport | Scope.Scope>) => Effect.Effect<A, E>
  /** Cuts the node off from the registry and the other nodes (a pause or a partition). */
  readonly cutOff: Effect.Effect<void>
  readonly restore: Effect.Effect<void>
  /** Cuts the node off and closes it: it cannot leave, so its lease runs out. */
  readonly crash: Effect.Effect<void>
  /** Closes the node gracefully (it leaves the cluster). */
  readonly stop: Effect.Effect<void>
}

export const makeWorld = (registry: ClusterRegistryService): World => ({ hub: MemoryTransport.makeHub(), registry, cut: new Set() })

/** The registry as one node sees it: every call fails while the node is cut off. */
const registryFor = (world: World, node: string): ClusterRegistryService => {
  const guard = <A>(operation: string, effect: Effect.Effect<A, ClusterRegistryError>) =>
    Effect.suspend(() =>
      world.cut.has(node) ? Effect.fail(new ClusterRegistryError({ operation, cause: new Error(`${node} is cut off`) })) : effect
    )
  const r = world.registry
  return {
    join: (member, leaseMs) => guard("join", r.join(member, leaseMs)),
    renew: (n, incarnation, leaseMs) => guard("renew", r.renew(n, incarnation, leaseMs)),
    leave: (n, incarnation) => guard("leave", r.leave(n, incarnation)),
    members: guard("members", r.members),
    claim: (request) => guard("claim", r.claim(request)),
    adopt: (request) => guard("adopt", r.adopt(request)),
    reclaim: (name, generation, n, incarnation) => guard("reclaim", r.reclaim(name, generation, n, incarnation)),
    abandon: (name, generation) => guard("abandon", r.abandon(name, generation)),
    release: (name, generation) => guard("release", r.release(name, generation)),
    resolve: (name) => guard("resolve", r.resolve(name)),
    get: (name) => guard("get", r.get(name)),
    orphans: (factories) => guard("orphans", r.orphans(factories)),
    takeOver: (name, generation, n, incarnation) => guard("takeOver", r.takeOver(name, generation, n, incarnation)),
    place: (name, factory, n) => guard("place", r.place(name, factory, n)),
    owned: (n, incarnation) => guard("owned", r.owned(n, incarnation)),
    endpoints: guard("endpoints", r.endpoints)
  }
}

/** The node's transport on the world's hub: nothing leaves or reaches a node that is cut off. */
const transportFor = (world: World, node: string) => {
  const inner = MemoryTransport.makeNode(world.hub, node)
  return {
    ...inner,
    post: (envelopes: ReadonlyArray<Envelope>) => {
      if (world.cut.has(node)) return
      inner.post(envelopes.filter((envelope) => !world.cut.has(envelope.to.node)))
    }
  }
}

export const startMember = <R = never>(
  world: World,
  node: string,
  options: ReliableSystem.ClusterSystemOptions<R> = {},
  services: Context.Context<R> = Context.empty() as Context.Context<R>
): Effect.Effect<Member, unknown, Scope.Scope> =>
  Effect.gen(function*() {
    const scope = yield* Effect.acquireRelease(Scope.make(), (scope) => Scope.close(scope, Exit.void))
    const base = Layer.succeedContext(
      Context.make(Transport, transportFor(world, node)).pipe(Context.add(ClusterRegistry, registryFor(world, node)))
    )
    const layer = ReliableSystem.layerCluster(options as ReliableSystem.ClusterSystemOptions<never>).pipe(
      Layer.provideMerge(base),
      Layer.provide(Layer.succeedContext(services))
    )
    const context = yield* Layer.buildWithScope(layer, scope)
    const cutOff = Effect.sync(() => void world.cut.add(node))
    return {
      node,
      system: Context.get(context, ReliableSystem.ReliableSystem),
      context: context as Context.Context<ReliableSystem.ReliableSystem | Transport>,
      run: (effect) => effect.pipe(Effect.provide(context), Effect.provideService(Scope.Scope, scope)),
      cutOff,
      restore: Effect.sync(() => void world.cut.delete(node)),
      crash: Effect.zipRight(cutOff, Scope.close(scope, Exit.void)),
      stop: Scope.close(scope, Exit.void)
    }
  })

export type { Relocatable }

/** Re-runs `check` every `every` (default 10ms) until it holds; fails after `timeout`. */
export const eventually = <E, R>(
  what: string,
  check: Effect.Effect<boolean, E, R>,
  timeout: Duration.DurationInput = Duration.seconds(10),
  every: Duration.DurationInput = Duration.millis(10)
) =>
  check.pipe(
    Effect.repeat({ until: (holds) => holds, schedule: Schedule.spaced(every) }),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`timed out waiting for ${what}`) }),
    Effect.asVoid
  )
