/**
 * The consumer endpoint of a point-to-point flow. `run(handler)` processes deliveries one at a
 * time and confirms each after the handler succeeds; `deliveries` hands them out as a Stream
 * for full control, each with its own `confirm`.
 */
import { Cause, Effect, Option, Queue, Stream } from "effect"
import type { Duration, Schema, Scope } from "effect"
import * as ConsumerController from "./Controller/ConsumerController.js"
import type { ConsumerStats } from "./Controller/ConsumerController.js"
import type { EndpointKind } from "./internal/EndpointRegistry.js"
import * as EndpointLifecycle from "./internal/EndpointLifecycle.js"
import { Signal } from "./internal/Signal.js"
import * as Config from "./Protocol/Config.js"
import type { Delivery } from "./Protocol/Contract.js"
import type { ReliableEndpointConfigError } from "./Protocol/Errors.js"
import * as PayloadCodec from "./Protocol/PayloadCodec.js"
import { ReliableSystem } from "./ReliableSystem.js"

export type { ConsumerStats } from "./Controller/ConsumerController.js"

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
}

export interface Consumer<A> {
  readonly name: string
  /** Deliveries one at a time; confirm each with `delivery.confirm` after processing it. */
  readonly deliveries: Stream.Stream<Delivery<A>>
  /**
   * Runs `handler` on every delivery, in order, and confirms after it succeeds. A failed handler
   * is not confirmed: the delivery comes again after the resend interval. Runs until interrupted.
   */
  readonly run: <E, R>(handler: (delivery: Delivery<A>) => Effect.Effect<void, E, R>) => Effect.Effect<never, never, R>
  readonly stats: Effect.Effect<ConsumerStats>
}

export const checkOptions = <A, I>(options: ConsumerOptions<A, I>) =>
  Effect.zipRight(
    Config.checkSchema("payload", options.payload),
    Effect.suspend(() =>
      Effect.all({
        name: Config.checkName("name", options.name),
        producer: Config.checkName("producer", options.producer),
        window: Config.checkWindow(options.window),
        resendInterval: Config.checkInterval("resendInterval", options.resendInterval, Config.DefaultResendInterval),
        lendPayloads: Config.checkLendPayloads(options.lendPayloads, PayloadCodec.isBinary(options.payload))
      })
    )
  )

const consumerKeys = Config.optionKeys<ConsumerOptions<unknown, unknown>>({
  name: true,
  producer: true,
  payload: true,
  window: true,
  resendInterval: true,
  lendPayloads: true,
  remoteProducer: true
})

/** Builds a consumer-side endpoint of the given kind (a point-to-point consumer or a worker). */
export const makeEndpoint = <A, I>(
  options: ConsumerOptions<A, I>,
  kind: EndpointKind,
  producerKinds: ReadonlyArray<EndpointKind>
): Effect.Effect<Consumer<A>, ReliableEndpointConfigError, ReliableSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const checked = yield* checkOptions(options)
    const system = (yield* ReliableSystem).internal
    const producerNode = yield* Config.checkPeerAddress("remoteProducer", options.remoteProducer, {
      remoting: system.transport.remoting,
      clustered: system.clustered
    })
    const codec = PayloadCodec.make(options.payload)
    // Holds at most the delivery in flight plus re-deliveries of it: the protocol bounds it.
    const deliveries = yield* Effect.acquireRelease(Queue.unbounded<Delivery<A>>(), Queue.shutdown)
    // Fired when a delivery is queued: the `run` loop waits on it rather than in `Queue.take`
    // on an empty queue (which makes a Deferred each time: once per demand round).
    const queued = new Signal()
    let busy = false
    let pulling = false
    let handoff: Delivery<A> | undefined

    const lifecycle = yield* EndpointLifecycle.make<ConsumerController.ConsumerController>({
      system,
      record: { name: checked.name, kind, peer: checked.producer, address: undefined },
      role: "Consumer",
      address: (controller) => controller.address,
      start: (stopped) =>
        ConsumerController.make({
          endpoint: checked.name,
          producer: checked.producer,
          window: checked.window,
          resendInterval: checked.resendInterval,
          lendPayloads: checked.lendPayloads,
          producerKinds,
          producerNode
        }, codec, system, {
          deliver: (delivery) => {
            if (pulling) handoff = delivery
            else {
              deliveries.unsafeOffer(delivery)
              queued.fire()
            }
          },
          handlerBusy: () => busy,
          stopped
        })
    })

    /**
     * The `run` loop confirms in its own fiber; the confirmation's fold hands out the next
     * delivery at once, which the loop takes straight from `handoff` instead of the queue. The
     * continuations are made once per `run`, not per delivery: this is the hot path.
     */
    const run = <E, R>(handler: (delivery: Delivery<A>) => Effect.Effect<void, E, R>): Effect.Effect<never, never, R> =>
      Effect.suspend(() => {
        busy = false
        // The delivery the handler is working on (one at a time: the loop is sequential).
        let current: Delivery<A> | undefined
        const continuations = {
          onFailure: (cause: Cause.Cause<E>): Effect.Effect<void> => {
            busy = false
            return Cause.isInterruptedOnly(cause)
              ? Effect.failCause(cause as Cause.Cause<never>)
              : Effect.logWarning(`reliable consumer "${checked.name}": handler failed on ${current!.messageId}; it will be redelivered`, cause)
          },
          onSuccess: (): Effect.Effect<void, never, R> => {
            busy = false
            pulling = true
            ConsumerController.confirmNow(current!)
            pulling = false
            const next = handoff
            handoff = undefined
            return next === undefined ? Effect.void : process(next)
          }
        }
        // One continuation per delivery (matchCauseEffect, not exit + flatMap).
        const process = (delivery: Delivery<A>): Effect.Effect<void, never, R> => {
          busy = true
          current = delivery
          return Effect.matchCauseEffect(handler(delivery), continuations)
        }
        // Takes from a queue known to hold a delivery (or shut down: `take` then interrupts).
        const takeNext: Effect.Effect<Delivery<A>> = Effect.suspend(() => {
          const size = deliveries.unsafeSize()
          return Option.isNone(size) || size.value > 0 ? Queue.take(deliveries) : Effect.zipRight(queued.next(), takeNext)
        })
        return Effect.forever(Effect.flatMap(takeNext, process))
      })

    return {
      name: checked.name,
      deliveries: Stream.fromQueue(deliveries),
      run,
      stats: Effect.sync(() => lifecycle.current()?.stats() ?? { delivered: 0, redelivered: 0, registrations: 0, dropped: 0 })
    }
  })

/** A point-to-point consumer endpoint. */
export const make = <A, I>(
  options: ConsumerOptions<A, I>
): Effect.Effect<Consumer<A>, ReliableEndpointConfigError, ReliableSystem | Scope.Scope> =>
  Effect.zipRight(Config.checkKeys("Consumer.make", options, consumerKeys), makeEndpoint(options, "Consumer", ["Producer"]))
