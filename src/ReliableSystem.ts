/**
 * The reliable system: one per process or node. It holds the endpoint names, the transport, the
 * resolver that finds a peer's live controller, and the stream of failure events, and it can
 * respawn an endpoint's controller. `layerCluster` makes the node a member of a cluster: peers
 * are resolved through the shared `ClusterRegistry`, names are unique across the cluster, and
 * relocatable endpoints of a dead node are re-created on a survivor.
 */
import { Clock, Config, Context, Duration, Effect, Layer, PubSub, Scope, Stream } from "effect"
import type { ConfigError, Queue } from "effect"
import type { ClusterRegistryError } from "./Cluster/ClusterErrors.js"
import type { ClusterOptions } from "./Cluster/ClusterOptions.js"
import { ClusterRegistry } from "./Cluster/ClusterRegistry.js"
import * as ClusterMember from "./Cluster/internal/ClusterMember.js"
import type { ConsumerStats } from "./Controller/ConsumerController.js"
import type { ProducerStats } from "./Controller/ProducerController.js"
import type { WorkPullingStats } from "./Controller/WorkPullingStats.js"
import type { ReliableConfigError } from "./Protocol/Errors.js"
import { EndpointRegistry } from "./internal/EndpointRegistry.js"
import * as NodeLookup from "./internal/NodeLookup.js"
import { ReliableSystem } from "./internal/ReliableSystemTag.js"
import type { ReliableSystemService } from "./internal/ReliableSystemTag.js"
import type { SystemInternals } from "./internal/SystemInternals.js"
import * as OptionChecks from "./Protocol/Config.js"
import { EndpointNotFound } from "./Protocol/Errors.js"
import type { ReliableDeliveryFailed } from "./Protocol/Failure.js"
import type { ReliableHealthEvent } from "./Protocol/Health.js"
import type { DeliveryDeadLettered } from "./Protocol/DeadLetter.js"
import { Transport } from "./Transport/Transport.js"

export { ReliableSystem } from "./internal/ReliableSystemTag.js"
export type { ReliableSystemService } from "./internal/ReliableSystemTag.js"
export type { SystemInternals } from "./internal/SystemInternals.js"

export interface ReliableSystemOptions {
  /** How long a peer lookup may take; default 500ms. */
  readonly lookupTimeout?: Duration.DurationInput
}

const makeIdSource = (): (() => string) => {
  const prefix = Math.floor(Math.random() * 36 ** 8).toString(36).padStart(8, "0")
  let counter = 0
  return () => `${prefix}${(++counter).toString(36)}`
}

const systemKeys = OptionChecks.optionKeys<ReliableSystemOptions>({ lookupTimeout: true })

export const make = (
  options: ReliableSystemOptions = {}
): Effect.Effect<ReliableSystemService, ReliableConfigError, Transport | Scope.Scope> =>
  Effect.zipRight(OptionChecks.checkKeys("ReliableSystem.layer", options, systemKeys), build<never>(options, undefined))

/** Options of a cluster member: the system's options plus leases and relocatable factories. */
export interface ClusterSystemOptions<R = never> extends ReliableSystemOptions, ClusterOptions<R> {}

const clusterSystemKeys = OptionChecks.optionKeys<ClusterSystemOptions<unknown>>({
  lookupTimeout: true,
  lease: true,
  renewInterval: true,
  relocatable: true
})

/**
 * A system that is a member of the cluster whose registry is in context (use it with
 * `Transport.layerSocket`). Relocatable factories run with the services `R` of the context the
 * layer was built in.
 */
export const makeCluster = <R = never>(
  options: ClusterSystemOptions<R> = {}
): Effect.Effect<
  ReliableSystemService,
  ClusterRegistryError | ReliableConfigError,
  Transport | ClusterRegistry | Scope.Scope | Exclude<R, ReliableSystem | Scope.Scope>
> =>
  Effect.gen(function*() {
    yield* OptionChecks.checkKeys("ReliableSystem.layerCluster", options, clusterSystemKeys)
    const registry = yield* ClusterRegistry
    // The user's services for the factories; never the build's own scope (a factory runs in the
    // scope of its endpoint's stay on this node).
    const context = Context.omit(Scope.Scope)(yield* Effect.context<Exclude<R, ReliableSystem | Scope.Scope>>())
    return yield* build<ClusterRegistryError | ReliableConfigError>(options, {
      join: (parts) => ClusterMember.make(options, { ...parts, registry }),
      provide: (service) => (effect) =>
        effect.pipe(Effect.provideService(ReliableSystem, service), Effect.provide(context)) as Effect.Effect<unknown, unknown, Scope.Scope>
    })
  })

interface ClusterJoin<E> {
  readonly join: (parts: Omit<ClusterMember.MemberParts, "registry">) => Effect.Effect<ClusterMember.ClusterMember, E, Scope.Scope>
  readonly provide: (
    service: ReliableSystemService
  ) => (effect: Effect.Effect<unknown, unknown, any>) => Effect.Effect<unknown, unknown, Scope.Scope>
}

const build = <E>(
  options: ReliableSystemOptions,
  cluster: ClusterJoin<E> | undefined
): Effect.Effect<ReliableSystemService, E | ReliableConfigError, Transport | Scope.Scope> =>
  Effect.gen(function*() {
    const lookupTimeout = yield* OptionChecks.checkInterval("lookupTimeout", options.lookupTimeout, OptionChecks.DefaultLookupTimeout)
    const transport = yield* Transport
    const registry = new EndpointRegistry()
    const failures = yield* Effect.acquireRelease(PubSub.sliding<ReliableDeliveryFailed>(1024), PubSub.shutdown)
    const health = yield* Effect.acquireRelease(PubSub.sliding<ReliableHealthEvent>(1024), PubSub.shutdown)
    const deadLetters = yield* Effect.acquireRelease(PubSub.sliding<DeliveryDeadLettered>(4096), PubSub.shutdown)
    const newId = makeIdSource()
    const nodes = yield* NodeLookup.make({ transport, registry, timeout: lookupTimeout, newId })
    const member = cluster === undefined ? undefined : yield* cluster.join({ transport, endpoints: registry, nodes, newId })
    const internal: SystemInternals = {
      transport,
      registry,
      lookup: member !== undefined ? member.lookup : (name, node) =>
        node === undefined || node === transport.node
          ? Effect.sync(() => registry.get(name)?.record)
          : nodes.ask(node, name),
      lookupStats: nodes.stats,
      clustered: member !== undefined,
      cluster: member,
      publishFailure: (failure) => void failures.unsafeOffer(failure),
      publishHealth: (event) => void health.unsafeOffer(event),
      publishDeadLetter: (event) => void deadLetters.unsafeOffer(event),
      newId
    }
    const service: ReliableSystemService = {
      node: transport.node,
      failures: Stream.fromPubSub(failures),
      subscribeFailures: PubSub.subscribe(failures),
      health: Stream.fromPubSub(health),
      subscribeHealth: PubSub.subscribe(health),
      deadLetters: Stream.fromPubSub(deadLetters),
      subscribeDeadLetters: PubSub.subscribe(deadLetters),
      respawn: (name) =>
        Effect.suspend(() => {
          const entry = registry.get(name)
          return entry === undefined ? Effect.fail(new EndpointNotFound({ name })) : entry.respawn
        }),
      endpointNames: Effect.sync(() => registry.names()),
      internal
    }
    if (member !== undefined) yield* member.start(cluster!.provide(service))
    return service
  })

/** One reliable system on the provided transport. */
export const layer = (options: ReliableSystemOptions = {}): Layer.Layer<ReliableSystem, ReliableConfigError, Transport> =>
  Layer.scoped(ReliableSystem, make(options))

/**
 * `layer` with its options read from Effect `Config` (e.g. the environment), as
 * `PgClient.layerConfig` reads its own:
 * `layerConfig({ lookupTimeout: Config.duration("RELIABLE_LOOKUP_TIMEOUT") })`.
 * A value `Config` cannot read is a `ConfigError`; one it reads but the system refuses is a
 * `ReliableConfigError`.
 */
export const layerConfig = (
  config: Config.Config.Wrap<ReliableSystemOptions>
): Layer.Layer<ReliableSystem, ConfigError.ConfigError | ReliableConfigError, Transport> =>
  Layer.unwrapEffect(Effect.map(Config.unwrap(config), layer))

/** A cluster member on the registry and transport provided (see `makeCluster`). */
export const layerCluster = <R = never>(
  options: ClusterSystemOptions<R> = {}
): Layer.Layer<
  ReliableSystem,
  ClusterRegistryError | ReliableConfigError,
  Transport | ClusterRegistry | Exclude<R, ReliableSystem | Scope.Scope>
> => Layer.scoped(ReliableSystem, makeCluster(options))

/** Failure events of the system in context. */
export const failures: Stream.Stream<ReliableDeliveryFailed, never, ReliableSystem> = Stream.unwrap(
  Effect.map(ReliableSystem, (system) => system.failures)
)

/** Subscribes to failure events of the system in context for the life of the scope. */
export const subscribeFailures: Effect.Effect<Queue.Dequeue<ReliableDeliveryFailed>, never, ReliableSystem | Scope.Scope> =
  Effect.flatMap(ReliableSystem, (system) => system.subscribeFailures)

/** Health events (degraded, recovered) of the system in context. */
export const health: Stream.Stream<ReliableHealthEvent, never, ReliableSystem> = Stream.unwrap(
  Effect.map(ReliableSystem, (system) => system.health)
)

/** Subscribes to health events of the system in context for the life of the scope. */
export const subscribeHealth: Effect.Effect<Queue.Dequeue<ReliableHealthEvent>, never, ReliableSystem | Scope.Scope> =
  Effect.flatMap(ReliableSystem, (system) => system.subscribeHealth)

/** Dead letters published by the endpoints of the system in context. */
export const deadLetters: Stream.Stream<DeliveryDeadLettered, never, ReliableSystem> = Stream.unwrap(
  Effect.map(ReliableSystem, (system) => system.deadLetters)
)

/** Subscribes to the dead letters of the system in context for the life of the scope. */
export const subscribeDeadLetters: Effect.Effect<Queue.Dequeue<DeliveryDeadLettered>, never, ReliableSystem | Scope.Scope> =
  Effect.flatMap(ReliableSystem, (system) => system.subscribeDeadLetters)

/** Respawns an endpoint of the system in context. */
export const respawn = (name: string): Effect.Effect<void, EndpointNotFound, ReliableSystem> =>
  Effect.flatMap(ReliableSystem, (system) => system.respawn(name))

interface EndpointSnapshotBase {
  readonly name: string
  /** The peer its configuration names (a consumer's producer...); none for a work-pulling producer. */
  readonly peer: string | undefined
  /** True while a controller runs (false between a terminal failure and `respawn`). */
  readonly live: boolean
  /** True when the endpoint persists through a durable queue. */
  readonly durable: boolean
}

/** One endpoint as `snapshot` sees it: its kind, and its `stats` of that kind. */
export type EndpointSnapshot =
  | EndpointSnapshotBase & { readonly kind: "Producer"; readonly stats: ProducerStats }
  | EndpointSnapshotBase & {
    readonly kind: "WorkProducer"
    readonly stats: ProducerStats
    /** The pool: bound workers with what each has in flight, pending jobs; none while stopped. */
    readonly pool: WorkPullingStats | undefined
  }
  | EndpointSnapshotBase & {
    readonly kind: "Consumer" | "Worker"
    readonly stats: ConsumerStats
    /** The most messages it holds unconfirmed. */
    readonly window: number
  }

export interface SystemSnapshot {
  readonly node: string
  /** The clock's time of the snapshot (ms since the epoch). */
  readonly at: number
  /** The endpoints made by `Producer.make`, `Consumer.make`, `WorkPulling.producer` and `worker`, by name. */
  readonly endpoints: ReadonlyArray<EndpointSnapshot>
}

/**
 * What the endpoints of the system in context report right now, for operators (the operations
 * page reads it): each one's kind, peer, liveness and stats; a work-pulling producer's pool too.
 * Reads only.
 */
export const snapshot: Effect.Effect<SystemSnapshot, never, ReliableSystem> = Effect.gen(function*() {
  const system = yield* ReliableSystem
  const at = yield* Clock.currentTimeMillis
  const endpoints: Array<EndpointSnapshot> = []
  const entries = [...system.internal.registry.entries()].sort((a, b) => a.record.name.localeCompare(b.record.name))
  for (const entry of entries) {
    const view = entry.view
    if (view === undefined) continue
    const base = { name: entry.record.name, peer: entry.record.peer, live: entry.record.address !== undefined, durable: view.queue !== undefined }
    // The view's stats are the endpoint's own `stats`, whose type its kind names.
    const stats = yield* view.stats
    const kind = entry.record.kind
    if (kind === "WorkProducer") endpoints.push({ ...base, kind, stats: stats as ProducerStats, pool: entry.details.workStats?.() })
    else if (kind === "Producer") endpoints.push({ ...base, kind, stats: stats as ProducerStats })
    else endpoints.push({ ...base, kind, stats: stats as ConsumerStats, window: view.window ?? OptionChecks.DefaultWindow })
  }
  return { node: system.node, at, endpoints }
})
