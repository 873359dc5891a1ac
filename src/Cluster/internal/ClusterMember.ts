/**
 * One node's membership in the cluster. It joins with a fresh incarnation and renews its lease
 * on a `Schedule`; it claims a cluster-wide name for every endpoint the node creates (a name
 * held by a live node is a configuration error); it resolves peers through the registry; and on
 * every lease tick it takes over orphans it has factories for and starts what was placed on it.
 *
 * Losing the lease (the node was paused or cut off from the registry longer than the lease) is
 * detected by the next renewal: the node joins again as a new incarnation and moves each of its
 * records to it with a conditional write. A record another node took over meanwhile cannot be
 * moved back: its endpoint's controller is fenced (a terminal `ReliableDeliveryFailed` with
 * `ReliableOwnershipLost`), and a relocatable endpoint's factory scope closes.
 *
 * The node does not wait for the registry to say so: a watch on its own clock stops its
 * relocatable endpoints once its lease may be about to run out unrenewed (`HeldNames.surrender`),
 * so they stop dispatching before another node may take them over; the next tick then joins
 * afresh and the records go to whichever node takes them first. A relocatable endpoint whose
 * durable write was fenced while its node still holds it gives its record up the same way
 * (`HeldNames.giveUp`), instead of staying stopped under a live record.
 *
 * Resolution trusts the registry for *where* (a live record: its node holds a lease, the record
 * names the node's current incarnation) and asks that node for *which controller* (the node
 * lookup every system serves), so a controller restart costs no registry write and a record of a
 * dead node or a stale incarnation is never used.
 */
import { Cause, Duration, Effect, ExecutionStrategy, Exit, FiberSet, Option, Schedule, Scope } from "effect"
import { waitAtMost } from "../../internal/DrainBound.js"
import type { EndpointRecord, EndpointRegistry } from "../../internal/EndpointRegistry.js"
import type { NodeLookup } from "../../internal/NodeLookup.js"
import { checkName, DefaultLease } from "../../Protocol/Config.js"
import { ReliableConfigError } from "../../Protocol/Errors.js"
import type { TransportService } from "../../Transport/Transport.js"
import type { ClusterPlacementError, ClusterRegistryError, ReliableOwnershipLost } from "../ClusterErrors.js"
import type { ClusterRegistryService } from "../ClusterRegistry.js"
import * as HeldNames from "./HeldNames.js"
import * as Hosting from "./Hosting.js"
import type { HostedFactory, MemberState } from "./MemberState.js"

/**
 * What joining reads of the public `ClusterOptions`. The factories' service type is left open
 * here: the system provides their services when it runs them (`start`'s `provide`).
 */
export interface MemberOptions {
  readonly lease?: Duration.DurationInput
  readonly renewInterval?: Duration.DurationInput
  readonly relocatable?: ReadonlyArray<{ readonly key: string; readonly make: HostedFactory }>
}

export interface ClusterMember {
  readonly node: string
  readonly incarnation: () => string
  readonly registry: ClusterRegistryService
  readonly leaseMs: number
  readonly renewMs: number
  /** Claims the endpoint's name cluster-wide for the life of the scope. */
  readonly claim: (
    record: EndpointRecord,
    fence: (cause: ReliableOwnershipLost) => void
  ) => Effect.Effect<void, ReliableConfigError, Scope.Scope>
  /** Before a respawn: undefined when this node holds the name (taking it back if it is free), else why not. */
  readonly owns: (name: string) => Effect.Effect<ReliableOwnershipLost | undefined>
  /** The endpoint's durable write was fenced by a newer writer: a relocatable endpoint is given up for re-creation. */
  readonly fenced: (name: string) => Effect.Effect<void>
  /** Resolves an endpoint: locally if this node holds it, else through the registry and its node. */
  readonly lookup: (name: string, node?: string | undefined) => Effect.Effect<EndpointRecord | undefined>
  readonly spawn: (
    key: string,
    name: string,
    node: string,
    timeout: Duration.Duration
  ) => Effect.Effect<void, ClusterPlacementError | ClusterRegistryError>
  readonly stop: (name: string) => Effect.Effect<void, ClusterPlacementError | ClusterRegistryError>
  /** Starts the lease ticks; factories run through `provide` (the system and the user's services). */
  readonly start: (
    provide: (effect: Effect.Effect<unknown, unknown, any>) => Effect.Effect<unknown, unknown, Scope.Scope>
  ) => Effect.Effect<void, never, Scope.Scope>
}

export interface MemberParts {
  readonly registry: ClusterRegistryService
  readonly transport: TransportService
  readonly endpoints: EndpointRegistry
  readonly nodes: NodeLookup
  readonly newId: () => string
}

const checkTiming = (options: MemberOptions) =>
  Effect.gen(function*() {
    const lease = Duration.decodeUnknown(options.lease ?? DefaultLease)
    if (Option.isNone(lease) || !(Duration.toMillis(lease.value) >= 10) || !Duration.isFinite(lease.value)) {
      return yield* new ReliableConfigError({ option: "cluster.lease", message: `lease must be a finite duration of at least 10ms, got ${String(options.lease)}` })
    }
    const leaseMs = Duration.toMillis(lease.value)
    const renew = Duration.decodeUnknown(options.renewInterval ?? Duration.millis(leaseMs / 3))
    const renewMs = Option.isSome(renew) ? Duration.toMillis(renew.value) : Number.NaN
    if (!(renewMs > 0 && renewMs < leaseMs)) {
      return yield* new ReliableConfigError({ option: "cluster.renewInterval", message: `renewInterval must be positive and shorter than the lease (${leaseMs}ms), got ${String(options.renewInterval)}` })
    }
    return { leaseMs, renewMs }
  })

/** Every relocatable factory has a non-blank key of its own and a function to run. */
const checkFactories = (options: MemberOptions) =>
  Effect.gen(function*() {
    const factories = options.relocatable ?? []
    if (!Array.isArray(factories)) {
      return yield* new ReliableConfigError({ option: "relocatable", message: "relocatable must be an array of Cluster.relocatable(key, factory)" })
    }
    const keys = new Set<string>()
    for (const entry of factories) {
      const key = yield* checkName("relocatable.key", entry?.key)
      if (typeof entry.make !== "function") {
        return yield* new ReliableConfigError({ option: "relocatable", message: `the relocatable factory "${key}" is not a function` })
      }
      if (keys.has(key)) {
        return yield* new ReliableConfigError({ option: "relocatable", message: `two relocatable factories share the key "${key}"; each key names one factory` })
      }
      keys.add(key)
    }
  })

/**
 * Resolves an endpoint: this node's own when it holds the name; otherwise the registry says where
 * (a live record) and that node says which controller, and both must describe the same endpoint.
 */
const lookupWith = (state: MemberState, parts: MemberParts) =>
(name: string, node?: string | undefined): Effect.Effect<EndpointRecord | undefined> =>
  Effect.suspend(() => {
    if (node !== undefined && node !== state.node) return parts.nodes.ask(node, name)
    const local = parts.endpoints.get(name)
    if (local !== undefined && state.held.get(name)?.lost !== true) return Effect.succeed(local.record)
    return state.registry.resolve(name).pipe(
      Effect.flatMap((record) =>
        Option.isNone(record) || record.value.node === state.node
          ? Effect.succeed(undefined)
          : Effect.map(parts.nodes.ask(record.value.node, name), (answer) =>
            answer !== undefined && answer.kind === record.value.kind && answer.peer === record.value.peer ? answer : undefined)
      ),
      Effect.catchAll(() => Effect.succeed(undefined))
    )
  })

/** Joins the cluster; the lease ticks start with `start`. */
export const make = (options: MemberOptions, parts: MemberParts): Effect.Effect<ClusterMember, ClusterRegistryError | ReliableConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const { leaseMs, renewMs } = yield* checkTiming(options)
    yield* checkFactories(options)
    const { registry, transport } = parts
    const clock = yield* Effect.clock
    const monotonicMs = () => Number(clock.unsafeCurrentTimeNanos() / 1_000_000n)
    const state: MemberState = {
      node: transport.node,
      incarnation: parts.newId(),
      registry,
      leaseMs,
      renewMs,
      factories: new Map((options.relocatable ?? []).map((entry) => [entry.key, entry.make])),
      held: new Map(),
      hosted: new Map(),
      leaving: false,
      leaseUntil: monotonicMs() + leaseMs,
      surrendered: false
    }
    const lock = yield* Effect.makeSemaphore(1)
    const runFork = yield* FiberSet.makeRuntime<never>()
    let runtime: Hosting.HostingRuntime | undefined
    yield* registry.join({ node: state.node, incarnation: state.incarnation, factories: [...state.factories.keys()] }, leaseMs)

    const names: HeldNames.Names = {
      state,
      lock,
      newId: parts.newId,
      stopHosted: (name) => {
        if (runtime !== undefined) Hosting.stopHosted(runtime, name)
      },
      runFork: (effect) => void runFork(effect)
    }

    // The lease loop must outlive any one tick: a tick that fails, dies or hangs past a lease is
    // logged and the next one runs on schedule.
    const tick = Effect.gen(function*() {
      const sentAt = monotonicMs()
      const renewed = !state.surrendered && (yield* registry.renew(state.node, state.incarnation, leaseMs))
      if (!renewed) yield* HeldNames.rejoin(names)
      state.leaseUntil = sentAt + leaseMs
      yield* HeldNames.reconcile(names)
      if (runtime === undefined) return
      yield* Hosting.relocateOrphans(runtime)
      yield* Hosting.syncHosted(runtime)
    }).pipe(
      Effect.timeoutFail({ duration: Duration.millis(leaseMs), onTimeout: () => new Error(`took longer than the lease (${leaseMs}ms)`) }),
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause)
          ? Effect.failCause(cause)
          : Effect.logWarning(`cluster: lease tick on ${state.node} failed`, cause)
      )
    )

    // Half a renewal before the lease may end, checked every quarter renewal: the endpoints are
    // stopped a quarter renewal before the registry could call the node dead, at the latest.
    const surrenderMarginMs = renewMs / 2
    const watchLease = Effect.sync(() => {
      if (!state.surrendered && monotonicMs() >= state.leaseUntil - surrenderMarginMs) HeldNames.surrender(names)
    })

    const start = (provide: Hosting.HostingRuntime["provide"]) =>
      Effect.gen(function*() {
        // Hosted endpoints live in a scope of their own that only the finalizer below closes (a
        // child of the system's scope could close first): they must see `leaving` when they close,
        // or they would release their names instead of leaving them to a survivor.
        const scope = yield* Scope.make(ExecutionStrategy.sequential)
        runtime = { state, scope, provide, runFork }
        yield* Effect.addFinalizer(() =>
          Effect.gen(function*() {
            state.leaving = true
            state.hosted.clear()
            yield* Scope.close(scope, Exit.void)
            // Past the lease the registry calls the node dead anyway: a database that stopped
            // answering holds the shutdown no longer than that (the leave goes on in the background).
            yield* waitAtMost(Duration.millis(leaseMs), registry.leave(state.node, state.incarnation))
          })
        )
        yield* Effect.forkScoped(Effect.repeat(tick, Schedule.spaced(Duration.millis(renewMs))))
        yield* Effect.forkScoped(Effect.repeat(watchLease, Schedule.spaced(Duration.millis(renewMs / 4))))
      })

    return {
      node: state.node,
      incarnation: () => state.incarnation,
      registry,
      leaseMs,
      renewMs,
      claim: (record, fence) => HeldNames.claim(names, record, fence),
      owns: (name) => HeldNames.owns(names, name),
      // On the member's fibers: giving the name up closes the endpoint that reports it.
      fenced: (name) => Effect.sync(() => names.runFork(HeldNames.giveUp(names, name))),
      lookup: lookupWith(state, parts),
      spawn: (key, name, node, timeout) =>
        runtime === undefined ? Effect.dieMessage("cluster member not started") : Hosting.spawn(runtime, key, name, node, timeout),
      stop: (name) => runtime === undefined ? Effect.dieMessage("cluster member not started") : Hosting.stop(runtime, name),
      start
    }
  })
