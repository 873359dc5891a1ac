/**
 * The life of one endpoint's controller. Each controller runs in its own child scope of the
 * endpoint scope; a terminal stop publishes one `ReliableDeliveryFailed` and leaves the endpoint
 * waiting for `respawn`; a restart request (retriable durable trouble) replaces the controller at
 * once; `respawn` always starts a fresh one. On a clustered system the endpoint also holds its
 * name cluster-wide: losing it to another node fences the controller (one terminal event), a
 * respawn first takes the name back, or publishes why it cannot, and a controller stopped by a
 * fenced durable write (a newer writer loaded its queue) is reported to the cluster, which gives
 * a relocatable endpoint up for re-creation instead of leaving it stopped under its name.
 */
import { Effect, ExecutionStrategy, Exit, FiberSet, Scope } from "effect"
import type { ReliableConfigError } from "../Protocol/Errors.js"
import { ReliableDeliveryFailed } from "../Protocol/Failure.js"
import type { ReliableControllerRole, ReliableDeliveryStage } from "../Protocol/Failure.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import * as Tracing from "../Observability/Tracing.js"
import { QueueFenced } from "../DurableQueue/QueueErrors.js"
import * as EndpointHealth from "./EndpointHealth.js"
import type { EndpointDetails, EndpointRecord, LocalEndpoint } from "./EndpointRegistry.js"
import type { SystemInternals } from "./SystemInternals.js"
import type { StopOutcome } from "./StopOutcome.js"

export interface Lifecycle<C> {
  /** The controller of the latest start; it may have stopped. */
  readonly current: () => C | undefined
  readonly respawn: Effect.Effect<void>
  /** The endpoint's health across its controllers (degraded while its queue does not answer). */
  readonly health: EndpointHealth.EndpointHealth
}

export interface LifecycleOptions<C> {
  readonly system: SystemInternals
  readonly record: EndpointRecord
  readonly role: ReliableControllerRole
  /** Starts a controller in the current scope; it calls `stopped` at most once and reports health. */
  readonly start: (stopped: (outcome: StopOutcome) => void, health: EndpointHealth.HealthReporter) => Effect.Effect<C, never, Scope.Scope>
  readonly address: (controller: C) => ControllerAddress
  /** Runs synchronously when a controller stops (e.g. to void its grants). */
  readonly onStop?: () => void
  /** What the endpoint tells about itself in the system's registry. */
  readonly details?: EndpointDetails | undefined
}

const isFenced = (cause: unknown): boolean => cause instanceof QueueFenced

export const make = <C>(options: LifecycleOptions<C>): Effect.Effect<Lifecycle<C>, ReliableConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const endpointScope = yield* Effect.scope
    const runFork = yield* FiberSet.makeRuntime<never>()
    const lock = yield* Effect.makeSemaphore(1)
    let current: C | undefined
    let currentScope: Scope.CloseableScope | undefined
    let running = false
    // Claimed below, after `respawn` exists (the registry keeps it for `ReliableSystem.respawn`).
    const claimed: { entry?: LocalEndpoint } = {}
    let generation = 0
    const cluster = options.system.cluster
    const clock = yield* Effect.clock
    const health = EndpointHealth.make({
      endpointName: options.record.name,
      role: options.role,
      publish: options.system.publishHealth,
      now: () => clock.unsafeCurrentTimeMillis()
    })

    const spanAttributes = { "effect_reliable.endpoint": options.record.name, "effect_reliable.role": options.role }

    const closeCurrent = Effect.suspend(() => {
      const scope = currentScope
      currentScope = undefined
      return scope === undefined ? Effect.void : Scope.close(scope, Exit.void)
    })

    // Every start (the first, a restart, a respawn) in a span, when the application traces.
    const startFresh: Effect.Effect<void> = Tracing.withSpanIfTracing(Tracing.SpanNames.restart, spanAttributes, Effect.gen(function*() {
      options.onStop?.()
      yield* closeCurrent
      const scope = yield* Scope.fork(endpointScope, ExecutionStrategy.sequential)
      const mine = ++generation
      currentScope = scope
      const controller = yield* Scope.extend(options.start((outcome) => stopped(mine, outcome), health), scope)
      current = controller
      running = true
      if (claimed.entry !== undefined) options.system.registry.setAddress(claimed.entry, options.address(controller))
      yield* Effect.annotateCurrentSpan("effect_reliable.generation", mine)
    }), { root: true })

    const publish = (stage: ReliableDeliveryStage, cause: unknown) =>
      options.system.publishFailure(new ReliableDeliveryFailed({ endpointName: options.record.name, role: options.role, stage, cause }))

    const stopped = (mine: number, outcome: StopOutcome) => {
      if (mine !== generation) return
      running = false
      options.onStop?.()
      if (claimed.entry !== undefined) options.system.registry.setAddress(claimed.entry, undefined)
      if (outcome._tag === "Terminal") {
        publish(outcome.stage, outcome.cause)
        runFork(lock.withPermits(1)(Effect.when(closeCurrent, () => mine === generation)))
        if (cluster !== undefined && isFenced(outcome.cause)) runFork(cluster.fenced(options.record.name))
      } else {
        runFork(lock.withPermits(1)(Effect.when(startFresh, () => mine === generation)))
      }
    }

    /** Another node holds the endpoint now: stop the controller like a terminal failure would (once). */
    const fence = (cause: unknown) => {
      if (!running) return
      running = false
      const mine = ++generation
      options.onStop?.()
      if (claimed.entry !== undefined) options.system.registry.setAddress(claimed.entry, undefined)
      publish("Protocol", cause)
      runFork(lock.withPermits(1)(Effect.when(closeCurrent, () => mine === generation)))
    }

    const respawn = lock.withPermits(1)(
      cluster === undefined ? startFresh : Effect.flatMap(cluster.owns(options.record.name), (lost) =>
        lost === undefined ? startFresh : Effect.sync(() => publish("Protocol", lost)))
    )
    // The cluster claim goes first: a name held on another node fails here with nothing claimed locally.
    if (cluster !== undefined) yield* cluster.claim(options.record, fence)
    claimed.entry = yield* options.system.registry.claim(options.record, respawn, options.details)
    yield* Effect.addFinalizer(() => closeCurrent)
    yield* respawn
    return { current: () => current, respawn, health }
  })
