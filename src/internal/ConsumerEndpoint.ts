/**
 * The consumer endpoint around a consumer controller (a point-to-point consumer or a worker):
 * it takes the controller's deliveries (`Handoff`), runs handlers on them (`run`) or streams them
 * (`deliveries`), and outlives its controllers (`EndpointLifecycle`).
 *
 * A delivery's way out: the controller hands out one delivery at a time; `run` processes it in
 * its own loop fiber and confirms it when the handler succeeds, and the confirmation's fold hands
 * out the next one, taken at once. A delivery whose handler is interrupted is given back and
 * handed out again.
 *
 * Shutting down is graceful: closing the endpoint's scope hands out nothing more, lets the
 * handler in flight finish and confirms it (at most `drainTimeout`), then fails every waiting and
 * later call with `EndpointClosed`. Interrupting a `run` likewise lets its handler finish first.
 */
import { Cause, Effect, Fiber, Stream } from "effect"
import type { Duration, Schema, Scope } from "effect"
import * as ConsumerController from "../Controller/ConsumerController.js"
import type { ConsumerSettings, ConsumerStats } from "../Controller/ConsumerController.js"
import type { Delivery } from "../Protocol/Contract.js"
import * as Config from "../Protocol/Config.js"
import { ReliableConfigError } from "../Protocol/Errors.js"
import type { EndpointClosed, ReliableEndpointConfigError } from "../Protocol/Errors.js"
import * as PayloadCodec from "../Protocol/PayloadCodec.js"
import { ReliableSystem } from "./ReliableSystemTag.js"
import type { SystemInternals } from "./SystemInternals.js"
import type { EndpointKind } from "./EndpointRegistry.js"
import { drainWithin } from "./DrainBound.js"
import * as EndpointLifecycle from "./EndpointLifecycle.js"
import { Handoff } from "./Handoff.js"
import { Signal } from "./Signal.js"

export interface ConsumerOptions<A, I> {
  /** This endpoint's name, unique on its system. */
  readonly name: string
  /** The producer endpoint's name. */
  readonly producer: string
  /** Payloads are decoded with this Schema; a payload it cannot decode stops the flow. */
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
}

export interface Consumer<A> {
  readonly name: string
  /**
   * Deliveries one at a time; confirm each with `delivery.confirm` after processing it. A
   * delivery is never handed out again while it is unconfirmed here, however long that takes.
   * Fails with `EndpointClosed` once the endpoint's scope has closed.
   */
  readonly deliveries: Stream.Stream<Delivery<A>, EndpointClosed>
  /**
   * Runs `handler` on every delivery, in order, and confirms after it succeeds. A failed handler
   * is not confirmed: the delivery comes again. Runs until interrupted (the handler in flight
   * finishes first, within the drain timeout) or until the endpoint closes (`EndpointClosed`).
   */
  readonly run: <E, R>(handler: (delivery: Delivery<A>) => Effect.Effect<void, E, R>) => Effect.Effect<never, EndpointClosed, R>
  readonly stats: Effect.Effect<ConsumerStats>
}

export interface EndpointSettings extends ConsumerSettings {
  /** How long closing (or interrupting `run`) waits for the handler in flight. */
  readonly drainTimeout: Duration.Duration
}

const noStats: ConsumerStats = { delivered: 0, redelivered: 0, registrations: 0, dropped: 0 }

const build = <A>(
  settings: EndpointSettings,
  codec: PayloadCodec.PayloadCodec<A>,
  system: SystemInternals
): Effect.Effect<Consumer<A>, ReliableConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const handoff = new Handoff<Delivery<A>>(settings.endpoint)
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
          settled: () => {
            handoff.done()
            confirmed.fire()
          },
          stopped
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

    const run = <E, R>(handler: (delivery: Delivery<A>) => Effect.Effect<void, E, R>): Effect.Effect<never, EndpointClosed, R> =>
      Effect.gen(function*() {
        const loop = RunLoop.make(settings.endpoint, handoff, handler, release, settings.resendInterval)
        // Not a child of this fiber: a child is interrupted together with it, and interrupting
        // `run` must let the handler in flight finish first (`loop.stop`).
        const fiber = yield* Effect.forkDaemon(loop.run)
        return yield* Fiber.join(fiber).pipe(
          Effect.onInterrupt(() => loop.stop(fiber, settings.drainTimeout))
        )
      })

    return {
      name: settings.endpoint,
      deliveries: Stream.repeatEffect(Effect.suspend(() => handoff.take())),
      run,
      stats: Effect.sync(() => lifecycle.current()?.stats() ?? noStats)
    }
  })

const checkOptions = <A, I>(options: ConsumerOptions<A, I>) =>
  Effect.zipRight(Config.checkSchema("payload", options.payload), Effect.suspend(() => Effect.all({
    name: Config.checkName("name", options.name),
    producer: Config.checkName("producer", options.producer),
    window: Config.checkWindow(options.window),
    resendInterval: Config.checkInterval("resendInterval", options.resendInterval, Config.DefaultResendInterval),
    lendPayloads: Config.checkLendPayloads(options.lendPayloads, PayloadCodec.isBinary(options.payload)),
    drainTimeout: Config.checkDrainTimeout(options.drainTimeout)
  })))

/** A consumer-side endpoint of the given kind (a point-to-point consumer or a worker), from its options. */
export const make = <A, I>(
  options: ConsumerOptions<A, I>,
  kind: EndpointKind,
  producerKinds: ReadonlyArray<EndpointKind>
): Effect.Effect<Consumer<A>, ReliableEndpointConfigError, ReliableSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const checked = yield* checkOptions(options)
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
      drainTimeout: checked.drainTimeout
    }, PayloadCodec.make(options.payload), system)
  })

/**
 * One `run` call's loop, in a fiber of its own: takes a delivery, runs the handler, confirms on
 * success. Asked to stop, it finishes the handler in flight (within the drain timeout) and ends.
 */
namespace RunLoop {
  export const make = <A, E, R>(
    endpoint: string,
    handoff: Handoff<Delivery<A>>,
    handler: (delivery: Delivery<A>) => Effect.Effect<void, E, R>,
    release: (delivery: Delivery<A>) => void,
    retryAfter: Duration.Duration
  ) => {
    let busy = false
    let stopping = false
    // The delivery the handler is working on (one at a time: the loop is sequential).
    let current: Delivery<A> | undefined
    // Made once per loop, not per delivery: this is the hot path.
    const continuations = {
      onFailure: (cause: Cause.Cause<E>): Effect.Effect<void, never, R> => {
        const delivery = current!
        // Not confirmed: the handler runs on it again after the retry delay.
        return Effect.zipRight(
          Effect.logWarning(`reliable consumer "${endpoint}": handler failed on ${delivery.messageId}; it will be redelivered`, cause),
          Effect.zipRight(Effect.sleep(retryAfter), Effect.suspend(() => stopping ? Effect.sync(() => release(delivery)) : process(delivery)))
        )
      },
      onSuccess: (): Effect.Effect<void> => {
        busy = false
        ConsumerController.confirmNow(current!)
        return Effect.void
      }
    }
    const process = (delivery: Delivery<A>): Effect.Effect<void, never, R> => {
      busy = true
      current = delivery
      return Effect.matchCauseEffect(handler(delivery), continuations)
    }
    const step: Effect.Effect<void, EndpointClosed, R> = Effect.suspend(() => stopping ? Effect.interrupt : Effect.flatMap(handoff.take(), process))
    // An interrupted loop gives the delivery it was working on back (once per loop, not per delivery).
    const givenBack = Effect.sync(() => {
      if (!busy) return
      busy = false
      release(current!)
    })
    return {
      run: Effect.onInterrupt(Effect.forever(step), () => givenBack) as Effect.Effect<never, EndpointClosed, R>,
      /** Lets the handler in flight finish (at most `drainTimeout`), then ends the loop. */
      stop: (fiber: Fiber.RuntimeFiber<never, EndpointClosed>, drainTimeout: Duration.Duration): Effect.Effect<void> =>
        Effect.suspend(() => {
          stopping = true
          if (!busy) return Fiber.interrupt(fiber)
          return Effect.zipRight(drainWithin(drainTimeout, Effect.asVoid(Fiber.await(fiber))), Fiber.interrupt(fiber))
        })
    }
  }
}
