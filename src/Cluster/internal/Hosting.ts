/**
 * Running relocatable endpoints: a factory runs in its own scope under the placement it was
 * given; orphans of dead nodes are taken over (one conditional write each, so exactly one
 * survivor wins) and started here; records placed on this node are picked up and started.
 */
import { Duration, Effect, ExecutionStrategy, Exit, Option, Schedule, Scope } from "effect"
import { ClusterPlacementError } from "../ClusterErrors.js"
import type { ClusterRegistryError } from "../ClusterErrors.js"
import { currentPlacement } from "./Placement.js"
import * as Tracing from "../../Observability/Tracing.js"
import type { MemberState } from "./MemberState.js"

/** Runs effects of the member with the system, the user's services and a scope provided. */
export interface HostingRuntime {
  readonly state: MemberState
  /** The scope hosted endpoints' scopes are forked from (the system's). */
  readonly scope: Scope.Scope
  /** Provides the system and the services captured when the cluster layer was built. */
  readonly provide: (effect: Effect.Effect<unknown, unknown, any>) => Effect.Effect<unknown, unknown, Scope.Scope>
  /** Forks a fiber for the life of the member. */
  readonly runFork: (effect: Effect.Effect<unknown>) => void
}

/** Closes the hosted scope of `name`, if any (the endpoint and its application code end). */
export const stopHosted = (runtime: HostingRuntime, name: string): void => {
  const scope = runtime.state.hosted.get(name)
  if (scope === undefined) return
  runtime.state.hosted.delete(name)
  runtime.runFork(Scope.close(scope, Exit.void))
}

/** Starts the endpoint `name` here with the factory under `key`, holding the record at `generation`. */
export const startHosted = (runtime: HostingRuntime, name: string, key: string, generation: number): Effect.Effect<void> =>
  Effect.gen(function*() {
    const { state } = runtime
    const factory = state.factories.get(key)
    if (factory === undefined || state.hosted.has(name)) return
    const scope = yield* Scope.fork(runtime.scope, ExecutionStrategy.sequential)
    state.hosted.set(name, scope)
    const run = runtime.provide(factory(name)).pipe(
      Effect.locally(currentPlacement, { name, factory: key, generation }),
      Effect.provideService(Scope.Scope, scope),
      Effect.catchAllCause((cause) =>
        Effect.zipRight(
          Effect.logError(`cluster: the relocatable factory "${key}" failed to start "${name}" on ${state.node}`, cause),
          Effect.sync(() => {
            if (state.hosted.get(name) === scope) stopHosted(runtime, name)
          })
        )
      )
    )
    yield* Effect.forkIn(run, scope)
  })

/** A random order, so survivors racing for several orphans tend to take different ones first. */
const shuffled = <A>(items: ReadonlyArray<A>): Array<A> => {
  const out = [...items]
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[out[i], out[j]] = [out[j], out[i]]
  }
  return out
}

/**
 * Takes over this node's share of the orphans it has factories for (their count divided by the
 * live members that share a key, rounded up; the rest on later ticks) and starts them.
 */
export const relocateOrphans = (runtime: HostingRuntime): Effect.Effect<number, ClusterRegistryError> =>
  Effect.gen(function*() {
    const { state } = runtime
    const keys = [...state.factories.keys()]
    if (keys.length === 0) return 0
    const orphans = yield* state.registry.orphans(keys)
    if (orphans.length === 0) return 0
    const members = yield* state.registry.members
    const eligible = members.filter((member) => member.factories.some((key) => keys.includes(key))).length
    const quota = Math.ceil(orphans.length / Math.max(1, eligible))
    let taken = 0
    for (const orphan of shuffled(orphans)) {
      if (taken >= quota) break
      if (yield* relocate(runtime, orphan)) taken++
    }
    return taken
  })

/** Takes one orphan over and starts it here (in a span, when the application traces); false when another node won it. */
const relocate = (runtime: HostingRuntime, orphan: { readonly name: string; readonly generation: number; readonly node: string; readonly factory?: string | undefined }) =>
  Tracing.withSpanIfTracing(
    Tracing.SpanNames.relocate,
    { "effect_reliable.endpoint": orphan.name, "effect_reliable.from_node": orphan.node, "effect_reliable.to_node": runtime.state.node },
    Effect.gen(function*() {
      const { state } = runtime
      const won = yield* state.registry.takeOver(orphan.name, orphan.generation, state.node, state.incarnation)
      if (Option.isNone(won)) return false
      yield* Effect.logInfo(`cluster: ${state.node} took over "${orphan.name}" from ${orphan.node}`)
      yield* startHosted(runtime, orphan.name, orphan.factory!, won.value)
      return true
    }),
    { root: true }
  )

/**
 * Brings the hosted endpoints in line with the records naming this node incarnation: starts the
 * unstarted ones (placements, takeovers) and quietly closes a hosted endpoint whose record is gone
 * (`Cluster.stop`).
 */
export const syncHosted = (runtime: HostingRuntime): Effect.Effect<void, ClusterRegistryError> =>
  Effect.gen(function*() {
    const { state } = runtime
    // Only endpoints hosted before the read are judged by it (a placement may start meanwhile).
    const before = new Map(state.hosted)
    const incarnation = state.incarnation
    const owned = yield* state.registry.owned(state.node, incarnation)
    for (const record of owned) {
      if (record.kind === undefined && record.factory !== undefined && !state.hosted.has(record.name)) {
        yield* startHosted(runtime, record.name, record.factory, record.generation)
      }
    }
    const names = new Set(owned.map((record) => record.name))
    for (const [name, scope] of before) {
      const held = state.held.get(name)
      if (names.has(name) || state.hosted.get(name) !== scope || held?.incarnation !== incarnation) continue
      yield* retire(runtime, name)
    }
  })

/** Closes a hosted endpoint whose record was deleted on purpose: no failure event, no release. */
export const retire = (runtime: HostingRuntime, name: string): Effect.Effect<void> =>
  Effect.suspend(() => {
    const held = runtime.state.held.get(name)
    if (held !== undefined) held.lost = true
    stopHosted(runtime, name)
    return Effect.logInfo(`cluster: "${name}" was stopped; ${runtime.state.node} closed it`)
  })

/**
 * Places the endpoint `name` on `node` through its factory `key` and waits until that node has
 * started it (its record names a kind at the placed generation). Idempotent: when the endpoint
 * already lives somewhere (same name, same factory), it only waits for it to be started.
 */
export const spawn = (
  runtime: HostingRuntime,
  key: string,
  name: string,
  node: string,
  timeout: Duration.Duration
): Effect.Effect<void, ClusterPlacementError | ClusterRegistryError> =>
  Effect.gen(function*() {
    const { state } = runtime
    const generation = yield* placeOrFind(runtime, key, name, node)
    const started = state.registry.get(name).pipe(
      Effect.map(Option.exists((record) => record.generation !== generation || record.kind !== undefined))
    )
    const poll = Duration.millis(Math.max(5, Math.min(50, state.renewMs / 4)))
    yield* started.pipe(
      Effect.repeat({ until: (done) => done, schedule: Schedule.spaced(poll) }),
      Effect.timeoutFail({
        duration: timeout,
        onTimeout: () =>
          new ClusterPlacementError({ reason: "Timeout", name, message: `node ${node} did not start "${name}" within ${Duration.format(timeout)}` })
      })
    )
  })

/** The generation of the endpoint's record: placed now, or the live one of the same endpoint. */
const placeOrFind = (
  runtime: HostingRuntime,
  key: string,
  name: string,
  node: string
): Effect.Effect<number, ClusterPlacementError | ClusterRegistryError> =>
  Effect.gen(function*() {
    const { state } = runtime
    const refuse = (reason: ClusterPlacementError["reason"], message: string) =>
      Effect.fail(new ClusterPlacementError({ reason, name, message }))
    const existing = Option.getOrUndefined(yield* state.registry.get(name))
    // The same endpoint (same name, same factory) already lives somewhere: nothing to create.
    if (existing !== undefined && existing.live && existing.factory === key) return existing.generation
    const placed = yield* state.registry.place(name, key, node)
    switch (placed._tag) {
      case "NodeUnavailable":
        return yield* refuse("NodeUnavailable", `node ${node} is not a live member of the cluster`)
      case "UnknownFactory":
        return yield* refuse("UnknownFactory", `node ${node} has no relocatable factory "${key}"`)
      case "Taken": {
        const again = Option.getOrUndefined(yield* state.registry.get(name))
        if (again === undefined || again.factory !== key) {
          return yield* refuse("NameTaken", `a reliable endpoint named "${name}" already runs on node ${placed.owner}`)
        }
        return again.generation
      }
      case "Placed":
        if (node === state.node) yield* startHosted(runtime, name, key, placed.generation)
        return placed.generation
    }
  })

/**
 * Retires the relocatable endpoint `name` for good: its record is deleted, so no node re-creates
 * it; the node running it closes it (at once when it is this node, else on its next lease tick).
 */
export const stop = (runtime: HostingRuntime, name: string): Effect.Effect<void, ClusterPlacementError | ClusterRegistryError> =>
  Effect.gen(function*() {
    const { state } = runtime
    const record = Option.getOrUndefined(yield* state.registry.get(name))
    if (record === undefined) return
    if (record.factory === undefined) {
      return yield* new ClusterPlacementError({
        reason: "NotRelocatable",
        name,
        message: `"${name}" was not created by a relocatable factory; close the scope that made it instead`
      })
    }
    yield* state.registry.release(name, record.generation)
    if (record.node === state.node && state.hosted.has(name)) yield* retire(runtime, name)
  })
