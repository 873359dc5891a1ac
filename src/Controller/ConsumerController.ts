/**
 * The shell around `ConsumerMachine`: wire input folds where the transport delivers it (there is
 * no inbox fiber), and the shell owns the tick and lookups of the producer's live controller; it
 * decodes payloads into `Delivery` values for the endpoint.
 * Confirming folds in the caller's fiber, so with `run` the handler, its confirmation and the
 * next delivery all happen without a fiber hop.
 */
import { Duration, Effect, Either, FiberSet, Schedule } from "effect"
import type { Scope } from "effect"
import type { EndpointRecord } from "../internal/EndpointRegistry.js"
import type { StopOutcome } from "../internal/StopOutcome.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import type { Delivery } from "../Protocol/Contract.js"
import { PayloadDecodeError } from "../Protocol/Errors.js"
import type { PayloadCodec } from "../Protocol/PayloadCodec.js"
import type { Envelope } from "../Protocol/WireMessage.js"
import type { SystemInternals } from "../internal/SystemInternals.js"
import * as Metrics from "../Observability/Metrics.js"
import * as Machine from "./ConsumerMachine.js"
import { ControllerDelivery } from "./internal/ControllerDelivery.js"
import type { DeliveryOwner } from "./internal/ControllerDelivery.js"
import { withEnvelope } from "./internal/EnvelopeBatch.js"
import { errorText } from "./internal/ErrorText.js"
import * as Reassembly from "./internal/Reassembly.js"
import * as WireInput from "./internal/WireInput.js"

export interface ConsumerSettings {
  readonly endpoint: string
  /** What this endpoint is: a point-to-point consumer or a worker. */
  readonly kind: EndpointRecord["kind"]
  readonly producer: string
  readonly window: number
  readonly resendInterval: Duration.Duration
  /** Hand out binary payloads uncopied, valid until confirmed (see `ConsumerOptions.lendPayloads`). */
  readonly lendPayloads: boolean
  /** The endpoint kinds this consumer may register with. */
  readonly producerKinds: ReadonlyArray<EndpointRecord["kind"]>
  /** The node hosting the producer (a remoting-only flow); absent when it is local. */
  readonly producerNode?: string | undefined
  /** Deliveries handed out at once (1 for point-to-point). */
  readonly concurrency: number
  /** Workers: hand back unstarted messages when every handler has been busy this long. */
  readonly releaseStuckAfter: Duration.Duration | undefined
}

export interface ConsumerHooks<A> {
  /** Hands a delivery to the endpoint, which holds it until it confirms or releases it. */
  readonly deliver: (delivery: Delivery<A>) => void
  /** A message was dead-lettered here (its payload could not be decoded). */
  readonly deadLettered: (dead: { readonly messageId: string; readonly attempts: number; readonly cause: unknown }) => void
  /** A delivery handed out was confirmed or given back, once (a shutdown may be waiting for it). */
  readonly settled: () => void
  readonly stopped: (outcome: StopOutcome) => void
  /** The endpoint's metrics. */
  readonly metrics: Metrics.EndpointMetrics
}

export interface ConsumerStats {
  readonly delivered: number
  readonly redelivered: number
  readonly registrations: number
  /** Inputs ignored as stale, from an unknown sender, or beyond demand. */
  readonly dropped: number
}

export interface ConsumerController {
  readonly address: ControllerAddress
  readonly running: () => boolean
  /** Gives a delivery back unconfirmed (its handler was interrupted): it is handed out again. */
  readonly release: (id: number) => void
  /** Graceful shutdown: nothing more is handed out; true while a delivery is still held. */
  readonly drain: () => boolean
  /** True while a delivery is handed out and not confirmed. */
  readonly holding: () => boolean
  readonly stats: () => ConsumerStats
}

export { confirmNow } from "./internal/ControllerDelivery.js"

/** Marks a delivery as no longer held (given back), returning the id the controller knows it by. */
export const settle = <A>(delivery: Delivery<A>): number | undefined => {
  if (!(delivery instanceof ControllerDelivery)) return undefined
  delivery.release()
  return delivery.id
}

/** The producer's live controller, if its record is the kind we expect and names us. */
export const producerAddress = (
  record: EndpointRecord | undefined,
  settings: ConsumerSettings
): ControllerAddress | undefined =>
  record !== undefined && settings.producerKinds.includes(record.kind) &&
    (record.kind !== "Producer" || record.peer === settings.endpoint)
    ? record.address
    : undefined

/** Adds the controller's counts to the endpoint's counter metrics (see `Metrics.syncEvery`). */
const counterSync = (counters: { readonly delivered: number; readonly redelivered: number; readonly dropped: number }, metrics: Metrics.EndpointMetrics) =>
  Metrics.counterSync([
    [() => counters.delivered, metrics.delivered],
    [() => counters.redelivered, metrics.redelivered],
    [() => counters.dropped, metrics.dropped]
  ])

export const make = <A>(
  settings: ConsumerSettings,
  codec: PayloadCodec<A>,
  system: SystemInternals,
  hooks: ConsumerHooks<A>
): Effect.Effect<ConsumerController, never, Scope.Scope> =>
  Effect.gen(function*() {
    const incarnation = system.newId()
    const address: ControllerAddress = { node: system.transport.node, endpoint: settings.endpoint, incarnation }
    const clock = yield* Effect.clock
    const runFork = yield* FiberSet.makeRuntime<never>()
    const now = () => clock.unsafeCurrentTimeMillis()
    const counters = { delivered: 0, redelivered: 0, registrations: 0, dropped: 0 }
    const syncCounters = counterSync(counters, hooks.metrics)
    yield* Metrics.syncEvery(hooks.metrics, syncCounters)
    let stopped = false
    let state: Machine.ConsumerState

    const resolve = Effect.flatMap(system.lookup(settings.producer, settings.producerNode), (record) =>
      Effect.sync(() => dispatch({ _tag: "Resolved", producer: producerAddress(record, settings), now: now() })))

    const lent = settings.lendPayloads ? Reassembly.makeLent() : undefined

    const deliver = (inFlight: Machine.HandOut, payload: Uint8Array | ReadonlyArray<Uint8Array>) => {
      // Joined chunks are this hand-out's own (or lent) bytes; a whole payload is shared with
      // the transport and copied unless lent.
      const decoded = payload instanceof Uint8Array
        ? codec.decode(payload, lent !== undefined)
        : codec.decode(lent === undefined ? Reassembly.join(payload) : lent.join(payload), true)
      if (Either.isLeft(decoded)) {
        // A payload this consumer cannot decode is dead-lettered, not retried: decoding is deterministic.
        const cause = new PayloadDecodeError({ endpointName: settings.endpoint, messageId: inFlight.messageId, cause: decoded.left })
        hooks.deadLettered({ messageId: inFlight.messageId, attempts: 0, cause })
        dispatch({ _tag: "Settle", id: inFlight.id, outcome: { _tag: "DeadLettered", attempts: 0, error: errorText(cause) }, now: now() })
        return
      }
      hooks.deliver(new ControllerDelivery(inFlight.messageId, inFlight.seq, decoded.right, inFlight.attempt, owner, inFlight.id, inFlight.trace))
    }

    // A confirm's time only starts the clock on the next hand-out, which only a consumer that
    // releases stuck hand-outs reads (`releaseStuckAfter`, workers): a point-to-point consumer
    // skips the clock read (about 2% of its send loop).
    const confirmTime = settings.releaseStuckAfter === undefined ? () => 0 : now
    const owner: DeliveryOwner = {
      confirm: (id) => dispatch({ _tag: "Confirm", id, now: confirmTime() }),
      settle: (id, outcome) => dispatch({ _tag: "Settle", id, outcome, now: now() }),
      settled: hooks.settled
    }

    const perform = (actions: ReadonlyArray<Machine.ConsumerAction>) => {
      let envelopes: Array<Envelope> | undefined
      for (const action of actions) {
        switch (action._tag) {
          case "Send":
            if (action.message._tag === "RegisterConsumer") counters.registrations++
            envelopes = withEnvelope(envelopes, { from: address, to: action.to, message: action.message })
            break
          case "Resolve":
            runFork(resolve)
            break
          case "Deliver":
            if (action.redelivery) counters.redelivered++
            else counters.delivered++
            deliver(action.delivery, action.payload)
            break
          case "Fail":
            stopped = true
            hooks.stopped({ _tag: "Terminal", stage: action.stage, cause: action.cause })
            break
          case "Dropped":
            counters.dropped++
            break
        }
      }
      if (envelopes !== undefined) system.transport.post(envelopes)
    }

    const dispatch = (event: Machine.ConsumerEvent) => {
      if (stopped) return
      const next = Machine.step(state, event)
      state = next.state
      perform(next.actions)
    }

    const started = Machine.initial({
      endpoint: settings.endpoint,
      incarnation,
      window: settings.window,
      resendIntervalMs: Duration.toMillis(settings.resendInterval),
      concurrency: settings.concurrency,
      releaseStuckAfterMs: settings.releaseStuckAfter === undefined ? undefined : Duration.toMillis(settings.releaseStuckAfter)
    })
    state = started.state
    perform(started.actions)

    yield* WireInput.attach(system.transport, address, WireInput.fromProducer, dispatch, counters, now)
    yield* Effect.forkScoped(Effect.schedule(
      Effect.sync(() => dispatch({ _tag: "Tick", now: now() })),
      Schedule.spaced(settings.resendInterval)
    ))

    return {
      address,
      running: () => !stopped,
      release: (id) => dispatch({ _tag: "Release", id, now: now() }),
      drain: () => {
        dispatch({ _tag: "Drain" })
        return Machine.inFlight(state) !== undefined
      },
      holding: () => Machine.inFlight(state) !== undefined,
      stats: () => ({ ...counters })
    }
  })
