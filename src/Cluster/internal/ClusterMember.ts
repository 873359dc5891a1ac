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
 * Resolution trusts the registry for *where* (a live record: its node holds a lease, the record
 * names the node's current incarnation) and asks that node for *which controller* (the node
 * lookup every system serves), so a controller restart costs no registry write and a record of a
 * dead node or a stale incarnation is never used.
 */
import { Duration, Effect, ExecutionStrategy, Exit, FiberRef, FiberSet, Option, Schedule, Scope } from "effect"
import type { EndpointRecord, EndpointRegistry } from "../../internal/EndpointRegistry.js"
import type { NodeLookup } from "../../internal/NodeLookup.js"
import { ReliableConfigError } from "../../Protocol/Errors.js"
import type { TransportService } from "../../Transport/Transport.js"
import { ReliableOwnershipLost } from "../ClusterErrors.js"
import type { ClusterPlacementError, ClusterRegistryError } from "../ClusterErrors.js"
import type { ClusterRegistryService } from "../ClusterRegistry.js"
import type { Relocatable } from "../Relocatable.js"
import * as Hosting from "./Hosting.js"
import type { HeldName, MemberState } from "./MemberState.js"
import { currentPlacement } from "./Placement.js"

export interface ClusterOptions<R = never> {
  /** How long a node stays a member without renewing; default 3 seconds. */
  readonly lease?: Duration.DurationInput
  /** Lease renewal, orphan and placement checks; default a third of the lease. */
  readonly renewInterval?: Duration.DurationInput
  /** The relocatable factories this node can host endpoints with. */
  readonly relocatable?: ReadonlyArray<Relocatable<R>>
}

export const DefaultLease: Duration.Duration = Duration.seconds(3)

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
  /** Resolves an endpoint: locally if this node holds it, else through the registry and its node. */
  readonly lookup: (name: string, node?: string | undefined) => Effect.Effect<EndpointRecord | undefined>
  readonly spawn: (
    key: string,
    name: string,
    node: string,
    timeout: Duration.Duration
  ) => Effect.Effect<void, ClusterPlacementError | ClusterRegistryError>
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

const checkTiming = (options: ClusterOptions<unknown>) =>
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

/** Registry calls at construction wait out backend trouble instead of failing the endpoint. */
const patiently = <A>(state: MemberState, effect: Effect.Effect<A, ClusterRegistryError>): Effect.Effect<A> =>
  effect.pipe(
    Effect.tapError((error) => Effect.logWarning(`cluster: ${error.message}; retrying`)),
    Effect.retry(Schedule.exponential(Duration.millis(20)).pipe(Schedule.union(Schedule.spaced(Duration.millis(state.renewMs))))),
    Effect.orDie
  )

const taken = (name: string, owner: string) =>
  new ReliableConfigError({ option: "name", message: `a reliable endpoint named "${name}" already exists on node ${owner} of the cluster` })

/** Joins the cluster; the lease ticks start with `start`. */
export const make = <R>(options: ClusterOptions<R>, parts: MemberParts): Effect.Effect<ClusterMember, ClusterRegistryError | ReliableConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const { leaseMs, renewMs } = yield* checkTiming(options)
    const { registry, transport } = parts
    const state: MemberState = {
      node: transport.node,
      incarnation: parts.newId(),
      registry,
      leaseMs,
      renewMs,
      factories: new Map((options.relocatable ?? []).map((entry) => [entry.key, entry.make])),
      held: new Map(),
      hosted: new Map(),
      leaving: false
    }
    const keys = [...state.factories.keys()]
    const lock = yield* Effect.makeSemaphore(1)
    const runFork = yield* FiberSet.makeRuntime<never>()
    let runtime: Hosting.HostingRuntime | undefined
    yield* registry.join({ node: state.node, incarnation: state.incarnation, factories: keys }, leaseMs)

    const release = (name: string, held: HeldName) =>
      Effect.suspend(() => {
        if (state.held.get(name) === held) state.held.delete(name)
        // A lost name is someone else's now; a relocatable one stays for a survivor while the node leaves.
        if (held.lost || (state.leaving && held.request.factory !== undefined)) return Effect.void
        return registry.release(name, held.generation).pipe(
          Effect.retry(Schedule.recurs(2)),
          Effect.catchAll((error) => Effect.logWarning(`cluster: could not release "${name}": ${error.message}`))
        )
      })

    const acquire = (record: EndpointRecord, fence: HeldName["fence"]) =>
      lock.withPermits(1)(Effect.gen(function*() {
        const placement = yield* FiberRef.get(currentPlacement)
        const adopting = placement !== undefined && placement.name === record.name
        const request = {
          name: record.name,
          kind: record.kind,
          peer: record.peer,
          factory: adopting ? placement.factory : undefined,
          node: state.node,
          nodeIncarnation: state.incarnation
        }
        let generation: number
        if (adopting) {
          if (!(yield* patiently(state, registry.adopt({ ...request, generation: placement.generation })))) {
            return yield* new ReliableConfigError({ option: "name", message: `endpoint "${record.name}" moved to another node before it started here` })
          }
          generation = placement.generation
        } else {
          const result = yield* patiently(state, registry.claim(request))
          if (result._tag === "Taken") return yield* taken(record.name, result.owner)
          generation = result.generation
        }
        const held: HeldName = { request, generation, lost: false, fence }
        state.held.set(record.name, held)
        return held
      }))

    const claim = (record: EndpointRecord, fence: HeldName["fence"]) =>
      Effect.asVoid(Effect.acquireRelease(acquire(record, fence), (held) => release(record.name, held)))

    /** Another node holds `name` now: fence its controller, end its factory's scope. */
    const lose = (name: string, held: HeldName) =>
      Effect.gen(function*() {
        held.lost = true
        const record = yield* Effect.option(registry.get(name))
        const owner = Option.getOrUndefined(Option.flatten(record))
        held.fence(new ReliableOwnershipLost({ endpointName: name, owner: owner?.live === true ? owner.node : undefined }))
        if (runtime !== undefined) Hosting.stopHosted(runtime, name)
        yield* Effect.logWarning(`cluster: ${state.node} lost "${name}"${owner?.live === true ? ` to ${owner.node}` : ""}; its controller is fenced`)
      })

    /** The lease was lost: join as a new incarnation and move every held record to it, or lose it. */
    const rejoin = lock.withPermits(1)(Effect.gen(function*() {
      const incarnation = parts.newId()
      yield* Effect.logWarning(`cluster: ${state.node} lost its lease; joining again`)
      yield* registry.join({ node: state.node, incarnation, factories: keys }, leaseMs)
      state.incarnation = incarnation
      for (const [name, held] of [...state.held]) {
        if (held.lost) continue
        const moved = yield* registry.reclaim(name, held.generation, state.node, incarnation)
        if (Option.isSome(moved)) held.generation = moved.value
        else yield* lose(name, held)
      }
    }))

    const tick = Effect.gen(function*() {
      if (!(yield* registry.renew(state.node, state.incarnation, leaseMs))) yield* rejoin
      if (runtime === undefined) return
      yield* Hosting.relocateOrphans(runtime)
      yield* Hosting.startPlaced(runtime)
    }).pipe(Effect.catchAll((error) => Effect.logWarning(`cluster: lease tick on ${state.node} failed: ${error.message}`)))

    const owns = (name: string): Effect.Effect<ReliableOwnershipLost | undefined> =>
      lock.withPermits(1)(Effect.suspend(() => {
        const held = state.held.get(name)
        if (held === undefined || !held.lost) return Effect.succeed(undefined)
        return registry.claim({ ...held.request, nodeIncarnation: state.incarnation }).pipe(
          Effect.map((result) => {
            if (result._tag === "Taken") return new ReliableOwnershipLost({ endpointName: name, owner: result.owner })
            held.generation = result.generation
            held.lost = false
            return undefined
          }),
          Effect.catchAll(() => Effect.succeed(new ReliableOwnershipLost({ endpointName: name, owner: undefined })))
        )
      }))

    const lookup = (name: string, node?: string | undefined): Effect.Effect<EndpointRecord | undefined> =>
      Effect.suspend(() => {
        if (node !== undefined && node !== state.node) return parts.nodes.ask(node, name)
        const local = parts.endpoints.get(name)
        if (local !== undefined && state.held.get(name)?.lost !== true) return Effect.succeed(local.record)
        return registry.resolve(name).pipe(
          Effect.flatMap((record) =>
            Option.isNone(record) || record.value.node === state.node
              ? Effect.succeed(undefined)
              : Effect.map(parts.nodes.ask(record.value.node, name), (answer) =>
                // the node's answer must describe the endpoint the registry records
                answer !== undefined && answer.kind === record.value.kind && answer.peer === record.value.peer ? answer : undefined)
          ),
          Effect.catchAll(() => Effect.succeed(undefined))
        )
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
            yield* Effect.ignore(registry.leave(state.node, state.incarnation))
          })
        )
        yield* Effect.forkScoped(Effect.repeat(tick, Schedule.spaced(Duration.millis(renewMs))))
      })

    return {
      node: state.node,
      incarnation: () => state.incarnation,
      registry,
      leaseMs,
      renewMs,
      claim,
      owns,
      lookup,
      spawn: (key, name, node, timeout) =>
        runtime === undefined ? Effect.dieMessage("cluster member not started") : Hosting.spawn(runtime, key, name, node, timeout),
      start
    }
  })
