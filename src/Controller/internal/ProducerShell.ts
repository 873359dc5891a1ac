/**
 * The fiber shell every producer-side controller shares (point-to-point and work-pulling). It
 * holds the machine's state, folds events through the machine's pure `step` and performs the
 * actions both machines have in common: offering a grant, answering a caller, verifying a
 * registration, reporting confirmations, handing durable operations to the lane, stopping. A
 * controller adds only what differs: its machine, how it sends, its lane, its own actions.
 *
 * There is no inbox fiber. Wire input folds where the transport delivers it (`WireInput`),
 * endpoint calls fold in the caller's fiber (`ProducerCalls`), timer ticks in the timer's fiber:
 * a fold is synchronous and never yields, so the JS thread runs one at a time.
 *
 * Closing the controller's scope ends it: it takes no call and folds no event from then on, and
 * every caller waiting on it is told to take a new grant.
 */
import { Effect, FiberSet } from "effect"
import type { Duration, Either, Fiber, Scope } from "effect"
import { drainWithin } from "../../internal/DrainBound.js"
import type { HealthReporter } from "../../internal/EndpointHealth.js"
import type { StopOutcome } from "../../internal/StopOutcome.js"
import type { SystemInternals } from "../../internal/SystemInternals.js"
import type { ControllerAddress } from "../../Protocol/Address.js"
import type { DeliveryConfirmed, RequestNext, Stored } from "../../Protocol/Contract.js"
import type { FrameTooLarge, ProducerContractError } from "../../Protocol/Errors.js"
import type { ReliableDeliveryStage } from "../../Protocol/Failure.js"
import type { PayloadCodec } from "../../Protocol/PayloadCodec.js"
import type { ConsumerToProducer, Envelope } from "../../Protocol/WireMessage.js"
import * as Metrics from "../../Observability/Metrics.js"
import * as DeadlineTimer from "./DeadlineTimer.js"
import { withEnvelope } from "./EnvelopeBatch.js"
import * as ProducerCalls from "./ProducerCalls.js"
import type { Handshake } from "./ProducerHandshake.js"
import * as WireInput from "./WireInput.js"

/** What a producer-side controller tells its endpoint. */
export interface ProducerHooks {
  readonly offerGrant: (grant: RequestNext) => void
  readonly notify: (confirmed: ReadonlyArray<DeliveryConfirmed>) => void
  /** The controller stopped: terminal (publish and wait for respawn) or to be restarted. */
  readonly stopped: (outcome: StopOutcome) => void
  /** Where the durable lane reports that its backend stopped or started answering. */
  readonly health: HealthReporter
  /** The endpoint's metrics. */
  readonly metrics: Metrics.EndpointMetrics
}

/** Who a controller is: its address (a fresh incarnation) and its session. */
export interface Identity {
  readonly incarnation: string
  readonly sessionId: string
  readonly address: ControllerAddress
}

export const identity = (system: SystemInternals, endpoint: string): Identity => {
  const incarnation = system.newId()
  return { incarnation, sessionId: system.newId(), address: { node: system.transport.node, endpoint, incarnation } }
}

/** The events the shell itself folds; every producer-side machine takes them. */
export type ShellEvent =
  | WireInput.WireEvent<ConsumerToProducer>
  | { readonly _tag: "Verified"; readonly address: ControllerAddress; readonly nonce: string; readonly ok: boolean; readonly now: number }
  | { readonly _tag: "Tick"; readonly now: number }
  | ProducerCalls.CallEvent

/** The actions the shell performs for every machine; the rest go to the controller's `perform`. */
type CommonAction =
  | { readonly _tag: "Offer"; readonly grant: RequestNext }
  | ProducerCalls.AnswerAction
  | { readonly _tag: "Completed" | "AckRejected" }
  | { readonly _tag: "Verify"; readonly address: ControllerAddress; readonly nonce: string }
  | { readonly _tag: "Notify"; readonly confirmed: ReadonlyArray<DeliveryConfirmed> }
  | { readonly _tag: "Confirmed"; readonly count: number }
  | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }

export interface Step<S, A> {
  readonly state: S
  readonly actions: ReadonlyArray<A>
}

/** The pure machine under the shell. */
export interface ShellMachine<S, Ev, Act> {
  readonly step: (state: S, event: Ev) => Step<S, Act>
  /** When the timer must next tick; undefined when nothing waits on it. */
  readonly nextDeadline: (state: S) => number | undefined
  readonly handshake: (state: S) => Handshake
  /** Messages the free demand is worth. */
  readonly freeDemand: (state: S) => number
  readonly checkProduced: (state: S, grant: RequestNext, messageId: string, payload: unknown) => ProducerContractError | undefined
  readonly answeredBefore: (state: S, grant: RequestNext, messageId: string) => Either.Either<Stored, ProducerContractError> | undefined
}

/** A durable lane as the shell sees it: it takes the machine's durable actions. */
export interface Lane<Act> {
  readonly submit: (action: Act) => void
  /** Lets the running call finish and writes what is deferred (a graceful shutdown). */
  readonly drain: Effect.Effect<void>
}

/** What the shell gives a controller's own parts (its lane, its `perform`). */
export interface ShellContext<Ev> {
  readonly now: () => number
  readonly runFork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>
  /** Folds an event; returns nothing once the controller has ended. */
  readonly dispatch: (event: Ev) => void
  /** Ends the controller (once): terminal, or to be restarted by its endpoint. */
  readonly stop: (outcome: StopOutcome) => void
  /** Queues an envelope; everything queued in one fold goes to the transport together. */
  readonly post: (envelope: Envelope) => void
  /** What a durable lane takes from its controller (the same for both lanes). */
  readonly laneParts: LaneParts<Ev>
}

export interface LaneParts<Ev> {
  readonly runFork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>
  readonly health: HealthReporter
  /** Where the lane counts its queue calls. */
  readonly metrics: Metrics.QueueMetrics
  readonly now: () => number
  /** A durable operation finished; the event goes through the controller's machine. */
  readonly completed: (event: (now: number) => Ev) => void
  /** A durable operation failed for good: terminal (the machine fails), or healed by a restart. */
  readonly failed: (stage: ReliableDeliveryStage, cause: unknown, terminal: boolean) => void
}

const laneParts = <Ev>(
  parts: Omit<LaneParts<Ev>, "completed" | "failed"> & {
    readonly dispatch: (event: Ev) => void
    readonly stop: (outcome: StopOutcome) => void
  }
): LaneParts<Ev> => ({
  runFork: parts.runFork,
  health: parts.health,
  metrics: parts.metrics,
  now: parts.now,
  completed: (event) => parts.dispatch(event(parts.now())),
  failed: (stage, cause, terminal) => {
    if (terminal) parts.dispatch({ _tag: "Fail", stage, cause } as Ev)
    else parts.stop({ _tag: "Restart", cause })
  }
})

/** Counters every producer-side controller keeps. */
export interface ShellCounters {
  confirmed: number
  dropped: number
}

/** What a producer-side controller counts into the endpoint's counter metrics (its stats' numbers). */
export interface MetricCounts {
  readonly sent: () => number
  readonly resent: () => number
  readonly confirmed: () => number
  readonly dropped: () => number
}

export interface ShellOptions<S, Ev, Act extends { readonly _tag: string }, A> {
  readonly identity: Identity
  readonly system: SystemInternals
  readonly hooks: ProducerHooks
  readonly codec: PayloadCodec<A>
  readonly durable: boolean
  readonly retryIntervalMs: number
  /** How long closing waits for the durable lane to finish what it holds. */
  readonly drainTimeout: Duration.Duration
  readonly counters: ShellCounters
  /** The controller's counts as its stats report them, added to the counter metrics every sample interval. */
  readonly metricCounts: MetricCounts
  readonly machine: ShellMachine<S, Ev, Act>
  readonly initial: (now: number) => Step<S, Act>
  /** Whether the resolver vouches for a registering controller. */
  readonly verify: (address: ControllerAddress) => Effect.Effect<boolean>
  /** The durable lane, if any; the machine's durable actions (by tag) go to it. */
  readonly lane: ((context: ShellContext<Ev>) => Lane<Act>) | undefined
  readonly laneActions: ReadonlySet<string>
  /** Performs an action the shell does not know; false stops performing the rest of the step. */
  readonly perform: (action: Act, context: ShellContext<Ev>) => boolean
  /** Counts a dropped input (by the machine's reason). */
  readonly dropped: (reason: string) => void
  /** Runs after each step, with the state before it. */
  readonly afterStep?: ((before: S, after: S) => void) | undefined
  readonly snapshot?: ((bytes: Uint8Array) => Uint8Array) | undefined
  readonly refuse?: ((messageId: string, bytes: number) => FrameTooLarge | undefined) | undefined
}

/** What every producer-side controller offers its endpoint. */
export interface ProducerSide<A> {
  readonly address: ControllerAddress
  readonly running: () => boolean
  readonly produce: ProducerCalls.Calls<A>["produce"]
  readonly storedAck: ProducerCalls.Calls<A>["storedAck"]
  readonly ackAll: (token: string) => void
  readonly submit: ProducerCalls.Calls<A>["submit"]
  /** The handshake as it stands (the everyday `send` path recovers abandoned handshakes with it). */
  readonly handshake: () => Handshake
  /** Graceful shutdown: refuses calls and lets the durable lane finish what it holds (bounded). */
  readonly drain: Effect.Effect<void>
  /** Messages the consumer side's free demand is worth (with chunking, an estimate). */
  readonly freeDemand: () => number
}

export interface Shell<S, A> extends ProducerSide<A> {
  readonly state: () => S
  /** The controller's clock (millis), the one its machine's times come from. */
  readonly now: () => number
  /** The timer may have a new deadline (e.g. a first audit): wake it if it sleeps for one. */
  readonly wakeTimer: () => void
}

// A switch rather than a set lookup: the shell routes several actions per message.
const isCommon = (action: { readonly _tag: string }): action is CommonAction => {
  switch (action._tag) {
    case "Offer":
    case "Answer":
    case "Completed":
    case "AckRejected":
    case "Verify":
    case "Notify":
    case "Confirmed":
    case "Fail":
      return true
    default:
      return false
  }
}

/** What performing the shell's own actions needs. */
interface CommonParts {
  readonly hooks: ProducerHooks
  readonly counters: ShellCounters
  readonly timer: DeadlineTimer.DeadlineTimer
  readonly settle: ProducerCalls.Calls<unknown>["settle"]
  readonly verify: (address: ControllerAddress) => Effect.Effect<boolean>
  readonly dispatch: (event: ShellEvent) => void
  readonly now: () => number
  readonly runFork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>
  readonly stop: (outcome: StopOutcome) => void
}

const performCommon = (action: CommonAction, parts: CommonParts): void => {
  switch (action._tag) {
    case "Offer":
      parts.hooks.offerGrant(action.grant)
      return parts.timer.wake()
    case "Answer":
      return parts.settle(action)
    case "Verify":
      return void parts.runFork(Effect.flatMap(parts.verify(action.address), (ok) =>
        Effect.sync(() => parts.dispatch({ _tag: "Verified", address: action.address, nonce: action.nonce, ok, now: parts.now() }))))
    case "Notify":
      parts.counters.confirmed += action.confirmed.length
      return parts.hooks.notify(action.confirmed)
    case "Confirmed":
      parts.counters.confirmed += action.count
      return
    case "Fail":
      return parts.stop({ _tag: "Terminal", stage: action.stage, cause: action.cause })
    case "Completed":
    case "AckRejected":
      return
  }
}

/** Adds the controller's counts to the endpoint's counter metrics (see `Metrics.syncEvery`). */
const counterSync = (counts: MetricCounts, metrics: Metrics.EndpointMetrics) =>
  Metrics.counterSync([
    [counts.sent, metrics.sent],
    [counts.resent, metrics.resent],
    [counts.confirmed, metrics.confirmed],
    [counts.dropped, metrics.dropped]
  ])

/**
 * Graceful shutdown, before the endpoint closes the controller (not on a respawn or a restart,
 * which replace it at once): calls are refused from now on (`startClosing`), the store in flight
 * completes and every confirmation received so far is written, so a clean restart redelivers
 * nothing that was confirmed.
 */
const drainOf = <Act>(lane: Lane<Act> | undefined, drainTimeout: Duration.Duration, finished: () => boolean, startClosing: () => void) =>
  Effect.suspend(() => {
    startClosing()
    return lane === undefined || finished() ? Effect.void : drainWithin(drainTimeout, lane.drain)
  })

export const make = <S, Ev, Act extends { readonly _tag: string }, A>(
  options: ShellOptions<S, Ev, Act, A>
): Effect.Effect<Shell<S, A>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { counters, hooks, machine, system } = options
    const address = options.identity.address
    const clock = yield* Effect.clock
    const runFork = yield* FiberSet.makeRuntime<never>()
    const now = () => clock.unsafeCurrentTimeMillis()
    const timer = DeadlineTimer.make()
    let state: S
    let stoppedWith: StopOutcome | undefined
    // Set when the controller's scope closes (a respawn, or the endpoint's end): from then on it
    // takes no call and folds no event, like a stopped one, though nobody is told it stopped.
    let closed = false
    const finished = () => closed || stoppedWith !== undefined
    // Set while the scope closes and the lane drains: calls are refused, events still fold (a
    // confirmation arriving now is still persisted).
    let closing = false
    const refusingCalls = () => closing || finished()
    let envelopes: Array<Envelope> | undefined

    const stop = (outcome: StopOutcome) => {
      if (finished()) return
      stoppedWith = outcome
      calls.abandon()
      hooks.stopped(outcome)
    }

    const context: ShellContext<Ev> = {
      now,
      runFork,
      dispatch: (event) => void dispatch(event),
      stop,
      post: (envelope) => void (envelopes = withEnvelope(envelopes, envelope)),
      laneParts: laneParts<Ev>({ runFork, health: hooks.health, metrics: hooks.metrics.queue, now, dispatch: (event) => void dispatch(event), stop })
    }
    const lane = options.lane?.(context)
    const syncCounters = counterSync(options.metricCounts, hooks.metrics)

    const perform = (actions: ReadonlyArray<Act>) => {
      for (const action of actions) {
        if (isCommon(action)) performCommon(action, common)
        else if (action._tag === "Dropped") options.dropped((action as unknown as { readonly reason: string }).reason)
        else if (options.laneActions.has(action._tag)) lane?.submit(action)
        else if (!options.perform(action, context)) break
      }
      const posted = envelopes
      envelopes = undefined
      if (posted !== undefined) system.transport.post(posted)
    }

    const dispatch = (event: Ev): ReadonlyArray<Act> => {
      if (finished()) return []
      const before = state
      const next = machine.step(state, event)
      state = next.state
      options.afterStep?.(before, state)
      perform(next.actions)
      return next.actions
    }

    const calls: ProducerCalls.Calls<A> = ProducerCalls.make({
      endpoint: address.endpoint,
      codec: options.codec,
      durable: options.durable,
      now,
      stopped: refusingCalls,
      check: (grant, messageId, payload) => machine.checkProduced(state, grant, messageId, payload),
      answeredBefore: (grant, messageId) => machine.answeredBefore(state, grant, messageId),
      refuse: options.refuse,
      snapshot: options.snapshot,
      dispatch: (event) => dispatch(event as Ev)
    })
    const common: CommonParts = { hooks, counters, timer, settle: calls.settle, verify: options.verify, dispatch: (event) => void dispatch(event as Ev), now, runFork, stop }
    // Closing the scope ends the controller and releases every waiting caller. A call made after
    // that (a fiber that took this controller's grant just before the respawn) must be refused at
    // once: folded, it would start a store no fiber runs any more and wait for it forever.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
        calls.abandon()
      })
    )
    yield* Metrics.syncEvery(hooks.metrics, syncCounters)

    const drain = drainOf(lane, options.drainTimeout, finished, () => void (closing = true))

    const started = options.initial(now())
    state = started.state
    perform(started.actions)

    yield* WireInput.attach(system.transport, address, WireInput.fromConsumer, (event) => dispatch(event as Ev), counters, now)
    // The retry timer sleeps until the machine's deadline, so a re-offer happens exactly one
    // interval after the offer; with nothing outstanding it waits for the next offer instead.
    yield* timer.run({
      tick: () => void dispatch({ _tag: "Tick", now: now() } as Ev),
      deadline: () => machine.nextDeadline(state),
      now,
      recheckMs: options.retryIntervalMs
    })

    return {
      address,
      running: () => !finished(),
      produce: calls.produce,
      storedAck: calls.storedAck,
      ackAll: calls.ackAll,
      submit: calls.submit,
      handshake: () => machine.handshake(state),
      freeDemand: () => machine.freeDemand(state),
      state: () => state,
      now,
      wakeTimer: timer.wake,
      drain
    }
  })
