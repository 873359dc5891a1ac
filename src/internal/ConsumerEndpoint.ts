/**
 * The consumer endpoint around a consumer controller (a point-to-point consumer or a worker):
 * it takes the controller's deliveries (`Handoff`), runs handlers on them (`run`, one loop per
 * handler slot: see `RunLoop`) or streams them (`deliveries`), and outlives its controllers
 * (`EndpointLifecycle`).
 *
 * A delivery's way out: the controller hands out deliveries in order (a worker up to its
 * `concurrency` at once); a `run` loop processes one and confirms it when the handler succeeds,
 * and the confirmation's fold hands out the next one, taken at once. A failed handler is retried
 * (in place for point-to-point, at the producer for a worker) until its attempts are exhausted,
 * then the message is dead-lettered. A delivery whose handler is interrupted is given back and
 * handed out again.
 *
 * Shutting down is graceful: closing the endpoint's scope hands out nothing more, lets the
 * handlers in flight finish and confirms them (at most `drainTimeout`), then fails every waiting
 * and later call with `EndpointClosed`. Interrupting a `run` likewise lets its handlers finish.
 */
import { Effect, Exit, Fiber, FiberId, Stream } from "effect"
import type { Duration, Schedule, Schema, Scope } from "effect"
import * as ConsumerController from "../Controller/ConsumerController.js"
import type { ConsumerSettings, ConsumerStats } from "../Controller/ConsumerController.js"
import { confirmNow } from "../Controller/internal/ControllerDelivery.js"
import type { ControllerDelivery } from "../Controller/internal/ControllerDelivery.js"
import type { Delivery } from "../Protocol/Contract.js"
import * as Config from "../Protocol/Config.js"
import { DeliveryDeadLettered } from "../Protocol/DeadLetter.js"
import { ReliableConfigError } from "../Protocol/Errors.js"
import type { EndpointClosed, ReliableEndpointConfigError } from "../Protocol/Errors.js"
import * as PayloadCodec from "../Protocol/PayloadCodec.js"
import { ReliableSystem } from "./ReliableSystemTag.js"
import type { SystemInternals } from "./SystemInternals.js"
import type { EndpointKind } from "./EndpointRegistry.js"
import { drainWithin } from "./DrainBound.js"
import * as Metrics from "../Observability/Metrics.js"
import * as Tracing from "../Observability/Tracing.js"
import * as EndpointLifecycle from "./EndpointLifecycle.js"
import { Handoff } from "./Handoff.js"
import * as HandlerFailures from "./HandlerFailures.js"
import * as RunLoop from "./RunLoop.js"
import { Signal } from "./Signal.js"

export interface ConsumerOptions<A, I> {
  /** This endpoint's name, unique on its system. */
  readonly name: string
  /** The producer endpoint's name. */
  readonly producer: string
  /** Payloads are decoded with this Schema; a payload it cannot decode is dead-lettered. */
  readonly payload: Schema.Schema<A, I, never>
  /** Demand per request and buffer capacity, 1..10,000; default 50. */
  readonly window?: number
  /** Tick for re-registration, re-delivery and gap re-requests; default 2s. */
  readonly resendInterval?: Duration.DurationInput
  /**
   * Binary payloads only (a Schema whose encoded side is `Uint8ArrayFromSelf`). By default the
   * handler owns the bytes it gets: each delivery is an array of its own. With `lendPayloads` the
   * bytes are lent: they stay as they are until the delivery is confirmed (with `run`: until the
   * handler succeeds), after which the consumer may reuse them for a later message, so copy what
   * you keep. A flow of large chunked messages then allocates nothing per message on this side.
   * Default false.
   */
  readonly lendPayloads?: boolean
  /**
   * The remoting address of the node hosting the producer (a remoting-only flow); needs a socket
   * transport. Default: the producer is on this system.
   */
  readonly remoteProducer?: Config.PeerAddress
  /**
   * Closing the endpoint's scope (or interrupting `run`) lets the handler in flight finish and
   * confirms it, waiting at most this long before interrupting it; default 5 seconds.
   */
  readonly drainTimeout?: Duration.DurationInput
  /**
   * The delays between attempts of a delivery whose handler failed: the n-th delay comes before
   * attempt n + 1; when the schedule ends, the message is dead-lettered. Default: exponential
   * from 200ms, doubling, never more than 10 seconds apart. The protocol's own resends of lost
   * messages are not attempts.
   */
  readonly retry?: Schedule.Schedule<unknown, unknown>
  /**
   * Attempts before a failing message is dead-lettered (confirmed past, published on
   * `ReliableSystem.deadLetters`, kept in a durable queue). Point-to-point default: unlimited,
   * and the flow holds at a failing message (its order is kept) until it succeeds; workers: 5.
   */
  readonly maxAttempts?: number
  /** A handler running longer is interrupted and the attempt counts as failed; default off. */
  readonly handlerTimeout?: Duration.DurationInput
}

/** Options of `run`. */
export interface RunOptions<A, E, R> {
  /**
   * Decides what happens after a failed attempt, seeing the handler's typed error, the delivery
   * and its attempt: "Retry", "DeadLetter", or "Confirm" (done, nothing more to do). Without it,
   * the consumer retries while attempts are left (`decision` says what it would do).
   */
  readonly onFailure?: HandlerFailures.OnFailure<A, E, R>
}

export type { FailureDecision, HandlerFailure } from "./HandlerFailures.js"

export interface Consumer<A> {
  readonly name: string
  /**
   * Deliveries one at a time; confirm each with `delivery.confirm` after processing it. A
   * delivery is never handed out again while it is unconfirmed here, however long that takes.
   * Fails with `EndpointClosed` once the endpoint's scope has closed.
   */
  readonly deliveries: Stream.Stream<Delivery<A>, EndpointClosed>
  /**
   * The payloads as the first stage of a pipeline: each message is confirmed when the stream
   * pulls the next one, that is once the stages after it (e.g. `Stream.mapEffect`) have handled
   * it, so `consumer.stream.pipe(Stream.mapEffect(handle), Stream.runDrain)` confirms what
   * `handle` finished. The message held when the stream ends (by failure, interruption or
   * `Stream.take`) is given back unconfirmed and delivered again. A stage that pulls ahead
   * (`Stream.buffer`, `mapEffect` with concurrency) confirms what it pulled past.
   */
  readonly stream: Stream.Stream<A, EndpointClosed>
  /**
   * Runs `handler` on every delivery (in order; a worker runs up to its `concurrency` at once) and
   * confirms each after it succeeds. A failed attempt is retried after the `retry` delay until
   * `maxAttempts`, then the message is dead-lettered; `onFailure` may decide otherwise. Runs until
   * interrupted (the handlers in flight finish first, within the drain timeout) or until the
   * endpoint closes (`EndpointClosed`).
   */
  readonly run: <E, R, R2 = never>(
    handler: (delivery: Delivery<A>) => Effect.Effect<void, E, R>,
    options?: RunOptions<A, E, R2>
  ) => Effect.Effect<never, EndpointClosed, R | R2>
  readonly stats: Effect.Effect<ConsumerStats>
}

export interface EndpointSettings extends ConsumerSettings {
  /** How long closing (or interrupting `run`) waits for the handlers in flight. */
  readonly drainTimeout: Duration.Duration
  readonly retry: Schedule.Schedule<unknown, unknown>
  readonly maxAttempts: number
  readonly handlerTimeout: Duration.Duration | undefined
}

const noStats = { delivered: 0, redelivered: 0, registrations: 0, dropped: 0 }

const build = <A>(
  settings: EndpointSettings,
  codec: PayloadCodec.PayloadCodec<A>,
  system: SystemInternals
): Effect.Effect<Consumer<A>, ReliableConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const handoff = new Handoff<Delivery<A>>(settings.endpoint)
    const counted = { failed: 0, deadLettered: 0 }
    const metrics = yield* Metrics.make(settings.endpoint, settings.kind === "Worker" ? "worker" : "consumer")
    const policy: RunLoop.FailurePolicy = {
      endpoint: settings.endpoint,
      retriesAtProducer: settings.kind === "Worker",
      retry: settings.retry,
      maxAttempts: settings.maxAttempts,
      handlerTimeout: settings.handlerTimeout,
      publishDeadLetter: system.publishDeadLetter,
      counted,
      metrics
    }
    // Fired whenever the delivery in flight is confirmed: a shutdown may be waiting for it.
    const confirmed = new Signal()

    const lifecycle: EndpointLifecycle.Lifecycle<ConsumerController.ConsumerController> = yield* EndpointLifecycle.make<ConsumerController.ConsumerController>({
      system,
      record: { name: settings.endpoint, kind: settings.kind, peer: settings.producer, address: undefined },
      role: "Consumer",
      address: (controller) => controller.address,
      start: (stopped) =>
        ConsumerController.make(settings, codec, system, {
          deliver: (delivery) => handoff.put(delivery),
          deadLettered: (dead) => {
            counted.deadLettered++
            metrics.deadLettered.add(1)
            system.publishDeadLetter(new DeliveryDeadLettered({ endpointName: settings.endpoint, ...dead }))
          },
          settled: () => {
            handoff.done()
            confirmed.fire()
          },
          stopped,
          metrics
        })
    })

    /**
     * Graceful shutdown: the controller hands nothing more out, and this waits until no handler
     * (or stream consumer) holds a delivery it has not confirmed. A delivery handed out but not
     * taken by anyone is not waited for: it is redelivered to the next consumer incarnation.
     */
    const drained: Effect.Effect<void> = Effect.suspend(() => {
      lifecycle.current()?.drain()
      if (!handoff.holding()) return Effect.void
      const wait = confirmed.next()
      return Effect.zipRight(wait, drained)
    })

    // Added after the lifecycle, so it runs before the controller closes: the confirmation of the
    // delivery in flight still reaches the producer.
    yield* Effect.addFinalizer(() =>
      Effect.zipRight(drainWithin(settings.drainTimeout, drained), Effect.sync(() => handoff.close()))
    )

    const release = (delivery: Delivery<A>) => {
      const id = ConsumerController.settle(delivery)
      if (id !== undefined) lifecycle.current()?.release(id)
    }

    /** One loop per handler slot; interrupting `run` lets every handler in flight finish first. */
    const run = <E, R, R2 = never>(
      handler: (delivery: Delivery<A>) => Effect.Effect<void, E, R>,
      options?: RunOptions<A, E, R2>
    ): Effect.Effect<never, EndpointClosed, R | R2> =>
      Effect.gen(function*() {
        const loops = Array.from({ length: settings.concurrency }, () => RunLoop.make(handoff, handler, release, policy, options?.onFailure))
        // Not children of this fiber: a child is interrupted together with it, and interrupting
        // `run` must let the handlers in flight finish first (`stop`).
        const fibers = yield* Effect.forEach(loops, (loop) => Effect.forkDaemon(loop.run))
        const stopAll = Effect.forEach(loops, (loop, index) => loop.stop(fibers[index], settings.drainTimeout), { concurrency: "unbounded", discard: true })
        return yield* Effect.flatMap(Fiber.joinAll(fibers), () => Effect.never).pipe(Effect.onExit(() => stopAll))
      })

    const stream = payloadStream(handoff, release, settings.endpoint)
    const deliveries = deliveryStream(handoff, settings.endpoint)

    return {
      name: settings.endpoint,
      deliveries,
      stream,
      run,
      stats: Effect.sync(() => ({ ...(lifecycle.current()?.stats() ?? noStats), ...counted }))
    }
  })

/**
 * `stream`: confirms the message held when the next is pulled; gives it back when the stream
 * ends. A traced message is in a span from its take to its confirmation.
 */
const payloadStream = <A>(handoff: Handoff<Delivery<A>>, release: (delivery: Delivery<A>) => void, endpoint: string): Stream.Stream<A, EndpointClosed> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    let held: Delivery<A> | undefined
    let heldSpan: Tracing.OpenSpan | undefined
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        heldSpan?.end(Exit.interrupt(FiberId.none))
        if (held !== undefined) release(held)
        held = undefined
        heldSpan = undefined
      })
    )
    const next = Effect.withFiberRuntime<A, EndpointClosed>((fiber) => {
      const handled = held
      const span = heldSpan
      held = undefined
      heldSpan = undefined
      // Taken after the confirmation: its fold hands out the next delivery.
      const taken = Effect.map(Effect.suspend(() => handoff.take()), (delivery) => {
        held = delivery
        heldSpan = openTaken(fiber, endpoint, delivery)
        return delivery.payload
      })
      if (handled === undefined) return taken
      if (span === undefined) return Effect.zipRight(handled.confirm, taken)
      confirmIn(span, handled)
      return taken
    })
    return Stream.repeatEffect(next)
  }))

/** `deliveries`: as taken; a traced one is in a span from its take to its confirmation. */
const deliveryStream = <A>(handoff: Handoff<Delivery<A>>, endpoint: string): Stream.Stream<Delivery<A>, EndpointClosed> =>
  Stream.repeatEffect(Effect.withFiberRuntime<Delivery<A>, EndpointClosed>((fiber) => {
    if (!Tracing.isTracing(fiber)) return handoff.take()
    return Effect.map(handoff.take(), (delivery) => {
      const span = openTaken(fiber, endpoint, delivery)
      return span === undefined ? delivery : spanned(delivery, span)
    })
  }))

/** The span of a delivery taken by `deliveries` or `stream`, under its sender's; undefined when untraced. */
const openTaken = <A>(fiber: Fiber.RuntimeFiber<unknown, unknown>, endpoint: string, delivery: Delivery<A>): Tracing.OpenSpan | undefined => {
  const trace = (delivery as Partial<ControllerDelivery<A>>).trace
  if (trace === undefined || !Tracing.isTracing(fiber)) return undefined
  return Tracing.openRemoteChild(fiber, Tracing.SpanNames.deliver, trace, Tracing.deliveryAttributes(endpoint, delivery))
}

/** Confirms a taken delivery in a span inside its delivery span, which ends with it. */
const confirmIn = <A>(span: Tracing.OpenSpan, delivery: Delivery<A>): void => {
  if (span.span.status._tag === "Started") span.child(Tracing.SpanNames.confirm, () => confirmNow(delivery))
  else confirmNow(delivery)
  span.end(Exit.void)
}

/** The delivery as `deliveries` hands it out under a span: its `confirm` ends the span. */
const spanned = <A>(delivery: Delivery<A>, span: Tracing.OpenSpan): Delivery<A> => ({
  messageId: delivery.messageId,
  seq: delivery.seq,
  payload: delivery.payload,
  attempt: delivery.attempt,
  confirm: Effect.sync(() => confirmIn(span, delivery))
})

/** What a worker takes beyond a consumer's options. */
export interface WorkerExtras {
  /** Jobs the worker runs at once; default 1. */
  readonly concurrency?: number
}

/** Workers give up on a failing job after this many attempts unless told otherwise. */
export const DefaultWorkerMaxAttempts = 5

const checkOptions = <A, I>(options: ConsumerOptions<A, I> & WorkerExtras, kind: EndpointKind) =>
  Effect.zipRight(Config.checkSchema("payload", options.payload), Effect.suspend(() => Effect.all({
    name: Config.checkName("name", options.name),
    producer: Config.checkName("producer", options.producer),
    window: Config.checkWindow(options.window),
    resendInterval: Config.checkInterval("resendInterval", options.resendInterval, Config.DefaultResendInterval),
    lendPayloads: Config.checkLendPayloads(options.lendPayloads, PayloadCodec.isBinary(options.payload)),
    drainTimeout: Config.checkDrainTimeout(options.drainTimeout),
    retry: Config.checkSchedule("retry", options.retry, HandlerFailures.DefaultRetry),
    maxAttempts: Config.checkMaxAttempts(options.maxAttempts, kind === "Worker" ? DefaultWorkerMaxAttempts : Number.POSITIVE_INFINITY),
    handlerTimeout: Config.checkOptionalInterval("handlerTimeout", options.handlerTimeout),
    concurrency: Config.checkConcurrency(options.concurrency)
  })))

/** A consumer-side endpoint of the given kind (a point-to-point consumer or a worker), from its options. */
export const make = <A, I>(
  options: ConsumerOptions<A, I> & WorkerExtras,
  kind: EndpointKind,
  producerKinds: ReadonlyArray<EndpointKind>
): Effect.Effect<Consumer<A>, ReliableEndpointConfigError, ReliableSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const checked = yield* checkOptions(options, kind)
    const system = (yield* ReliableSystem).internal
    if (kind === "Worker" && options.remoteProducer !== undefined) {
      return yield* new ReliableConfigError({
        option: "remoteProducer",
        message: "work-pulling does not support peer addresses; a worker set spanning nodes requires cluster mode"
      })
    }
    const producerNode = yield* Config.checkPeerAddress("remoteProducer", options.remoteProducer, {
      remoting: system.transport.remoting,
      clustered: system.clustered
    })
    return yield* build({
      endpoint: checked.name,
      kind,
      producer: checked.producer,
      window: checked.window,
      resendInterval: checked.resendInterval,
      lendPayloads: checked.lendPayloads,
      producerKinds,
      producerNode,
      drainTimeout: checked.drainTimeout,
      retry: checked.retry,
      maxAttempts: checked.maxAttempts,
      handlerTimeout: checked.handlerTimeout,
      concurrency: checked.concurrency,
      // A worker whose every handler has been busy a whole tick hands its unstarted jobs back.
      releaseStuckAfter: kind === "Worker" ? checked.resendInterval : undefined
    }, PayloadCodec.make(options.payload), system)
  })
