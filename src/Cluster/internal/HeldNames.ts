/**
 * The names a member holds in the registry for its endpoints: claiming one when an endpoint is
 * made (or adopting the record a placement assigned), releasing it when the endpoint closes,
 * moving held records to a new node incarnation after the lease was lost, and fencing the
 * endpoints whose records another node took over meanwhile.
 */
import { Duration, Effect, FiberRef, Option, Schedule } from "effect"
import type { Scope } from "effect"
import { waitAtMost } from "../../internal/DrainBound.js"
import type { EndpointRecord } from "../../internal/EndpointRegistry.js"
import { ReliableConfigError } from "../../Protocol/Errors.js"
import { ReliableOwnershipLost } from "../ClusterErrors.js"
import type { ClusterRegistryError } from "../ClusterErrors.js"
import type { HeldName, MemberState } from "./MemberState.js"
import { currentPlacement } from "./Placement.js"

export interface Names {
  readonly state: MemberState
  /** Serializes claims with incarnation changes, so no claim names an incarnation being replaced. */
  readonly lock: Effect.Semaphore
  readonly newId: () => string
  /** Ends the factory scope of a relocatable endpoint this node lost. */
  readonly stopHosted: (name: string) => void
  /** Forks an effect for the life of the member. */
  readonly runFork: (effect: Effect.Effect<unknown>) => void
}

/** Registry calls at construction wait out backend trouble instead of failing the endpoint. */
const patiently = <A>(state: MemberState, effect: Effect.Effect<A, ClusterRegistryError>): Effect.Effect<A> =>
  effect.pipe(
    Effect.tapError((error) => Effect.logWarning(`cluster: ${error.message}; retrying`)),
    Effect.retry(Schedule.exponential(Duration.millis(20)).pipe(Schedule.union(Schedule.spaced(Duration.millis(state.renewMs))))),
    Effect.orDie
  )

const nameError = (name: string, message: string) => new ReliableConfigError({ option: "name", message: `"${name}": ${message}` })

const acquire = (names: Names, record: EndpointRecord, fence: HeldName["fence"]) =>
  names.lock.withPermits(1)(Effect.gen(function*() {
    const { state } = names
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
      if (!(yield* patiently(state, state.registry.adopt({ ...request, generation: placement.generation })))) {
        return yield* nameError(record.name, "the endpoint moved to another node before it started here")
      }
      generation = placement.generation
    } else {
      const result = yield* patiently(state, state.registry.claim(request))
      if (result._tag === "Taken") {
        return yield* nameError(record.name, `a reliable endpoint of this name already exists on node ${result.owner} of the cluster`)
      }
      generation = result.generation
    }
    const held: HeldName = { request, generation, incarnation: state.incarnation, lost: false, fence }
    state.held.set(record.name, held)
    return held
  }))

const release = (names: Names, name: string, held: HeldName) =>
  Effect.suspend(() => {
    const { state } = names
    if (state.held.get(name) === held) state.held.delete(name)
    // A lost name is someone else's now; a relocatable one stays for a survivor while the node leaves.
    if (held.lost || (state.leaving && held.request.factory !== undefined)) return Effect.void
    const released = state.registry.release(name, held.generation).pipe(
      Effect.retry(Schedule.recurs(2)),
      Effect.catchAll((error) => Effect.logWarning(`cluster: could not release "${name}": ${error.message}`))
    )
    // A database that stopped answering holds the endpoint's close no longer than a lease; the
    // release goes on in the background until it is answered.
    return waitAtMost(Duration.millis(state.leaseMs), released)
  })

/** Holds the endpoint's name cluster-wide for the life of the scope; a live holder elsewhere is a configuration error. */
export const claim = (
  names: Names,
  record: EndpointRecord,
  fence: HeldName["fence"]
): Effect.Effect<void, ReliableConfigError, Scope.Scope> =>
  Effect.asVoid(Effect.acquireRelease(acquire(names, record, fence), (held) => release(names, record.name, held)))

/** Another node holds `name` now: fence its controller, end its factory's scope. */
const lose = (names: Names, name: string, held: HeldName) =>
  Effect.gen(function*() {
    held.lost = true
    const record = Option.getOrUndefined(Option.flatten(yield* Effect.option(names.state.registry.get(name))))
    const owner = record?.live === true ? record.node : undefined
    held.fence(new ReliableOwnershipLost({ endpointName: name, owner }))
    names.stopHosted(name)
    yield* Effect.logWarning(`cluster: ${names.state.node} lost "${name}"${owner === undefined ? "" : ` to ${owner}`}; its controller is fenced`)
  })

/** Moves every held record that names an older incarnation to the current one, or loses it. */
export const reconcile = (names: Names): Effect.Effect<void, ClusterRegistryError> =>
  names.lock.withPermits(1)(Effect.gen(function*() {
    const { state } = names
    for (const [name, held] of [...state.held]) {
      if (held.lost || held.incarnation === state.incarnation) continue
      const moved = yield* state.registry.reclaim(name, held.generation, state.node, state.incarnation)
      if (Option.isNone(moved)) {
        yield* lose(names, name, held)
        continue
      }
      held.generation = moved.value
      held.incarnation = state.incarnation
    }
  }))

/** The lease was lost (expired, replaced, or given up): join again as a new incarnation. */
export const rejoin = (names: Names): Effect.Effect<void, ClusterRegistryError> =>
  names.lock.withPermits(1)(Effect.gen(function*() {
    const { state } = names
    const incarnation = names.newId()
    yield* state.registry.join({ node: state.node, incarnation, factories: [...state.factories.keys()] }, state.leaseMs)
    state.incarnation = incarnation
    state.surrendered = false
    yield* Effect.logWarning(`cluster: ${state.node} had lost its lease; it joined again`)
  }))

/**
 * The node could not renew its lease in time (the registry is out of reach, or the node was
 * paused): before any other node may take its relocatable endpoints over, it stops them itself
 * (fenced, their factory scopes closed) and leaves their records to whichever node reaches the
 * registry first, itself included. Pinned endpoints run on: nobody takes them over. Synchronous,
 * without the lock: a lease tick may hang on the registry meanwhile.
 */
export const surrender = (names: Names): void => {
  const { state } = names
  state.surrendered = true
  const given: Array<string> = []
  for (const [name, held] of state.held) {
    if (held.lost || held.request.factory === undefined) continue
    held.lost = true
    held.fence(new ReliableOwnershipLost({ endpointName: name, owner: undefined }))
    names.stopHosted(name)
    given.push(name)
  }
  names.runFork(Effect.logWarning(
    `cluster: ${state.node} could not renew its lease in time; ` +
      (given.length === 0 ? "it holds no relocatable endpoint" : `it stopped ${given.map((name) => `"${name}"`).join(", ")} for a survivor to re-create`)
  ))
}

/**
 * A durable write of the relocatable endpoint `name` was fenced (a newer writer loaded its
 * queue) while this node still holds its record: the record is given up (an orphan at once) and
 * the factory scope closed, so a survivor, or this node, re-creates the endpoint from its queue.
 * A pinned endpoint keeps its name and waits for `respawn`. Retried until the registry answers,
 * unless the name is lost meanwhile (a surrender or another node's takeover settles it then).
 */
export const giveUp = (names: Names, name: string): Effect.Effect<void> =>
  Effect.suspend(() => {
    const held = names.state.held.get(name)
    if (held === undefined || held.lost || held.request.factory === undefined) return Effect.void
    // Whatever the answer (a record moved on meanwhile is someone else's), the endpoint is done here.
    const abandon = names.lock.withPermits(1)(Effect.suspend(() => {
      if (held.lost) return Effect.void
      return Effect.zipRight(names.state.registry.abandon(name, held.generation), Effect.sync(() => {
        held.lost = true
        names.stopHosted(name)
      }))
    }))
    return abandon.pipe(
      Effect.retry({ schedule: Schedule.spaced(Duration.millis(names.state.renewMs)), while: () => !held.lost }),
      Effect.zipRight(Effect.logWarning(`cluster: a durable write of "${name}" was fenced on ${names.state.node}; it gave the endpoint up for re-creation`)),
      Effect.catchAll(() => Effect.void)
    )
  })

/**
 * Before a respawn: undefined when this node holds `name`, taking a lost name back if nobody
 * holds it now; otherwise the reason it cannot.
 */
export const owns = (names: Names, name: string): Effect.Effect<ReliableOwnershipLost | undefined> =>
  names.lock.withPermits(1)(Effect.suspend(() => {
    const { state } = names
    const held = state.held.get(name)
    if (held === undefined || !held.lost) return Effect.succeed(undefined)
    return state.registry.claim({ ...held.request, nodeIncarnation: state.incarnation }).pipe(
      Effect.map((result) => {
        if (result._tag === "Taken") return new ReliableOwnershipLost({ endpointName: name, owner: result.owner })
        held.generation = result.generation
        held.incarnation = state.incarnation
        held.lost = false
        return undefined
      }),
      Effect.catchAll(() => Effect.succeed(new ReliableOwnershipLost({ endpointName: name, owner: undefined })))
    )
  }))
