/**
 * The producer endpoint of a point-to-point flow. `send` is the everyday path: it waits for
 * demand, stores the message and completes the handshake. `requestNext`, `produce` and
 * `storedAck` are the contract underneath, for producers fed from their own recoverable source.
 */
import { Effect, Either, Exit, PubSub, Stream } from "effect"
import type { Duration, Queue, Schema, Scope } from "effect"
import * as ProducerController from "./Controller/ProducerController.js"
import type { ProduceError, ProducerStats } from "./Controller/ProducerController.js"
import type { DurableProducerQueueService } from "./DurableQueue/DurableProducerQueue.js"
import type { EndpointRecord } from "./internal/EndpointRegistry.js"
import * as EndpointLifecycle from "./internal/EndpointLifecycle.js"
import { newMessageId } from "./internal/MessageId.js"
import { Signal } from "./internal/Signal.js"
import * as Config from "./Protocol/Config.js"
import type { DeliveryConfirmed, Produced, RequestNext, Stored, StoredAck } from "./Protocol/Contract.js"
import { ReliableConfigError } from "./Protocol/Errors.js"
import type { ProducerContractError, ReliableEndpointConfigError } from "./Protocol/Errors.js"
import * as PayloadCodec from "./Protocol/PayloadCodec.js"
import { ReliableSystem } from "./ReliableSystem.js"
import type { SystemInternals } from "./ReliableSystem.js"
import { isEitherOf } from "./internal/IsEither.js"

export type { ProduceError } from "./Controller/internal/ProducerCalls.js"
export type { ProducerStats } from "./Controller/ProducerController.js"

export interface ProducerOptions<A, I> {
  /** This endpoint's name, unique on its system. */
  readonly name: string
  /** The consumer endpoint's name. */
  readonly consumer: string
  /** Every payload is encoded with this Schema before it is sequenced. */
  readonly payload: Schema.Schema<A, I, never>
  /** Publish a `DeliveryConfirmed` on `confirmations` for every confirmed message; default off. */
  readonly deliveryConfirmation?: boolean
  /** Cadence for offering an unanswered grant again; default 500ms. */
  readonly retryInterval?: Duration.DurationInput
  /** Split payloads larger than this many bytes into chunks; default off. */
  readonly chunkSize?: number
  /** Store messages durably so a producer crash loses nothing; default none. */
  readonly durableQueue?: DurableProducerQueueService
  /** Durable operation retries before the controller restarts; default 3 attempts, 100ms apart. */
  readonly queueRetry?: Config.QueueRetry
  /**
   * The remoting address of the node hosting the consumer (a remoting-only flow); needs a socket
   * transport. Default: the consumer is on this system.
   */
  readonly remoteConsumer?: Config.PeerAddress
}

export interface SendOptions {
  /** The stable deduplication key; default a fresh time-ordered UUID (version 7). */
  readonly messageId?: string
}

export interface Producer<A> {
  readonly name: string
  /**
   * Waits for demand, stores the message and completes the handshake; resolves with `Stored`.
   * Fails with `FrameTooLarge`, storing nothing, when the consumer is on another node and the
   * message (or, with `chunkSize`, one chunk) cannot fit the transport's frame.
   */
  readonly send: (payload: A, options?: SendOptions) => Effect.Effect<Stored, ProduceError>
  /**
   * Sends many messages, storing (and durably accepting) as many as current demand allows in one
   * step each time; results are in input order and identical to sending one by one.
   */
  readonly sendAll: (
    messages: Iterable<{ readonly payload: A; readonly messageId?: string }>
  ) => Effect.Effect<ReadonlyArray<Stored>, ProduceError>
  /** Waits for the next grant (the contract's `RequestNext`). */
  readonly requestNext: Effect.Effect<RequestNext>
  /** Answers a grant; resolves with `Stored` once the message is stored. */
  readonly produce: (produced: Produced<A>) => Effect.Effect<Stored, ProduceError>
  /** Completes a message's handshake; the controller then emits it. */
  readonly storedAck: (ack: StoredAck) => Effect.Effect<void, ProducerContractError>
  /** Consumer confirmations (with `deliveryConfirmation: true`); best effort. */
  readonly confirmations: Stream.Stream<DeliveryConfirmed>
  /** A subscription to confirmations for the life of the scope (no race with the first one). */
  readonly subscribeConfirmations: Effect.Effect<Queue.Dequeue<DeliveryConfirmed>, never, Scope.Scope>
  readonly stats: Effect.Effect<ProducerStats>
}

/** The largest batch `sendAll` stores in one step. */
const MaxBatch = 1000

const producerKeys = Config.optionKeys<ProducerOptions<unknown, unknown>>({
  name: true,
  consumer: true,
  payload: true,
  deliveryConfirmation: true,
  retryInterval: true,
  chunkSize: true,
  durableQueue: true,
  queueRetry: true,
  remoteConsumer: true
})

/** Unknown options are refused; the work-pulling durable queue with why (its watermark cannot hold per-job confirmations). */
const checkKeys = (options: object) =>
  Config.checkKeys("Producer.make", options, producerKeys, {
    durableWorkQueue: "durableWorkQueue is for work-pulling producers (WorkPulling.producer); a point-to-point producer persists with durableQueue"
  })

/** Checks the options of a producer endpoint. */
export const checkOptions = <A, I>(options: ProducerOptions<A, I>) =>
  Effect.zipRight(Effect.zipRight(checkKeys(options), Config.checkSchema("payload", options.payload)), Effect.all({
    name: Config.checkName("name", options.name),
    consumer: Config.checkName("consumer", options.consumer),
    deliveryConfirmation: Config.checkFlag("deliveryConfirmation", options.deliveryConfirmation),
    retryInterval: Config.checkInterval("retryInterval", options.retryInterval, Config.DefaultRetryInterval),
    chunkSize: Config.checkChunkSize(options.chunkSize),
    queueRetry: Config.checkQueueRetry(options.queueRetry)
  }))

/** What a producer-side controller tells its endpoint. */
export type ProducerControllerStart<A> = (hooks: ProducerController.ProducerHooks) => Effect.Effect<
  ProducerController.ProducerController<A>,
  never,
  Scope.Scope
>

/**
 * The producer endpoint around any producer-side controller (point-to-point or work-pulling):
 * the grant slot, the everyday `send` path, the contract calls and the confirmations stream.
 */
export const makeEndpoint = <A>(
  system: SystemInternals,
  record: EndpointRecord,
  start: ProducerControllerStart<A>
): Effect.Effect<Producer<A>, ReliableConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const confirmations = yield* Effect.acquireRelease(PubSub.sliding<DeliveryConfirmed>(4096), PubSub.shutdown)
    const grants = new Signal()
    let grant: RequestNext | undefined

    const lifecycle = yield* EndpointLifecycle.make<ProducerController.ProducerController<A>>({
      system,
      record,
      role: "Producer",
      address: (controller) => controller.address,
      onStop: () => {
        grant = undefined
      },
      start: (stopped) =>
        start({
          offerGrant: (offered) => {
            grant = offered
            grants.fire()
          },
          notify: (confirmed) => {
            for (const item of confirmed) confirmations.unsafeOffer(item)
          },
          stopped
        })
    })

    /** Takes the held grant, or waits for the next one (the contract's `RequestNext`). */
    const takeGrant: Effect.Effect<RequestNext> = Effect.suspend(() => {
      const taken = grant
      if (taken !== undefined) {
        grant = undefined
        // A grant of a controller that has since stopped is void: wait for the next one.
        if (controllerOf(taken)?.running() === true) return Effect.succeed(taken)
      }
      return Effect.zipRight(grants.next(), takeGrant)
    })

    const controllerOf = (of: RequestNext) => {
      const controller = lifecycle.current()
      return controller !== undefined && controller.address.incarnation === of.controller ? controller : undefined
    }

    const stillGranted = (controller: ProducerController.ProducerController<A>, of: RequestNext) => {
      const handshake = controller.handshake()
      return controller.running() && handshake._tag === "Granted" && handshake.grant.token === of.token
    }

    const isStale = (error: ProduceError) =>
      error._tag === "ProducerContractError" && error.reason === "StaleGrant"

    /**
     * The everyday path: take a grant and answer it with up to `free demand` messages, again
     * until the batch is sent. With a grant at hand and a volatile controller this is one
     * synchronous step. A grant re-offered for a handshake someone abandoned (their fiber was
     * interrupted after the message was stored) is completed first: that message is sent
     * rather than lost.
     */
    const sendBatch = (
      batch: ReadonlyArray<{ readonly payload: A; readonly messageId: string }>,
      from: number,
      results: Array<Stored> | undefined
    ): Effect.Effect<ReadonlyArray<Stored>, ProduceError> => Effect.suspend(() => sendStep(batch, from, results))

    /**
     * Sends `batch` from position `from` on; `results` holds the answers of the messages before
     * it (undefined until a batch takes more than one step: a batch sent in one step answers with
     * the controller's own array).
     */
    /**
     * After a step stored `stored`: the rest of the batch from `next`, with the answers so far.
     * Undefined when the whole batch went in this one step (its answer is `stored` itself).
     */
    const continueBatch = (
      batch: ReadonlyArray<{ readonly payload: A; readonly messageId: string }>,
      next: number,
      results: Array<Stored> | undefined,
      stored: ReadonlyArray<Stored>
    ): Effect.Effect<ReadonlyArray<Stored>, ProduceError> | undefined => {
      if (next === batch.length && results === undefined) return undefined
      const all = results ?? []
      for (const answer of stored) all.push(answer)
      return next === batch.length ? Effect.succeed(all) : sendBatch(batch, next, all)
    }

    const sendStep = (
      batch: ReadonlyArray<{ readonly payload: A; readonly messageId: string }>,
      from: number,
      results: Array<Stored> | undefined
    ): Effect.Effect<ReadonlyArray<Stored>, ProduceError> => {
      const taken = grant
      if (taken === undefined) return Effect.zipRight(grants.next(), sendBatch(batch, from, results))
      grant = undefined
      const controller = controllerOf(taken)
      if (controller === undefined || !controller.running()) return sendBatch(batch, from, results)
      const handshake = controller.handshake()
      if (handshake._tag === "Stored" && handshake.grant.token === taken.token) {
        controller.ackAll(taken.token)
        return sendBatch(batch, from, results)
      }
      if (handshake._tag !== "Granted" || handshake.grant.token !== taken.token) return sendBatch(batch, from, results)
      const remaining = batch.length - from
      const count = remaining === 1 ? 1 : Math.max(1, Math.min(MaxBatch, controller.freeDemand(), remaining))
      const items = from === 0 && count === batch.length ? batch : batch.slice(from, from + count)
      const next = from + count
      const sent = controller.sendNow(taken, items)
      if (isEitherOf(sent)) {
        if (Either.isLeft(sent)) {
          if (isStale(sent.left)) return sendBatch(batch, from, results)
          // Refused before anything was stored: the grant is still good for the next send.
          if (grant === undefined && stillGranted(controller, taken)) {
            grant = taken
            grants.fire()
          }
          return sent
        }
        return continueBatch(batch, next, results, sent.right) ?? sent
      }
      return Effect.matchEffect(sent, {
        onFailure: (error) => isStale(error) ? sendBatch(batch, from, results) : Effect.fail(error),
        onSuccess: (stored) => continueBatch(batch, next, results, stored) ?? Effect.succeed(stored)
      })
    }

    // One message: with a grant at hand and a volatile controller, the answer is settled in the
    // call and handed back as an `Exit` (the runtime would turn a `Right` into one first).
    const send = (payload: A, sendOptions?: SendOptions): Effect.Effect<Stored, ProduceError> =>
      Effect.suspend((): Effect.Effect<Stored, ProduceError> => {
        const sent = sendStep([{ payload, messageId: sendOptions?.messageId ?? newMessageId() }], 0, undefined)
        if (!isEitherOf(sent)) return Effect.map(sent, (stored) => stored[0])
        const settled = sent as Either.Either<ReadonlyArray<Stored>, ProduceError>
        return Either.isRight(settled) ? Exit.succeed(settled.right[0]) : settled as Either.Either<never, ProduceError>
      })

    const sendAll = (messages: Iterable<{ readonly payload: A; readonly messageId?: string }>) =>
      Effect.suspend(() => {
        const batch = Array.from(messages, (message) => ({ payload: message.payload, messageId: message.messageId ?? newMessageId() }))
        return batch.length === 0 ? Effect.succeed([]) : sendBatch(batch, 0, undefined)
      })

    const produce = (produced: Produced<A>) =>
      Effect.suspend(() => {
        const controller = controllerOf(produced.grant) ?? lifecycle.current()
        if (controller === undefined) return Effect.die(new Error("producer endpoint has no controller"))
        return controller.produce(produced.grant, produced.messageId, produced.payload)
      })

    const storedAck = (ack: StoredAck) =>
      Effect.suspend(() => {
        const controller = lifecycle.current()
        if (controller === undefined) return Effect.die(new Error("producer endpoint has no controller"))
        return controller.storedAck(ack)
      })

    return {
      name: record.name,
      send,
      sendAll,
      requestNext: takeGrant,
      produce,
      storedAck,
      confirmations: Stream.fromPubSub(confirmations),
      subscribeConfirmations: PubSub.subscribe(confirmations),
      stats: Effect.sync(() => lifecycle.current()?.stats() ?? { sent: 0, resent: 0, confirmed: 0, dropped: 0 })
    }
  })

/** A point-to-point producer endpoint. */
export const make = <A, I>(
  options: ProducerOptions<A, I>
): Effect.Effect<Producer<A>, ReliableEndpointConfigError, ReliableSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const checked = yield* checkOptions(options)
    const system = (yield* ReliableSystem).internal
    const consumerNode = yield* Config.checkPeerAddress("remoteConsumer", options.remoteConsumer, {
      remoting: system.transport.remoting,
      clustered: system.clustered
    })
    if (consumerNode !== undefined) yield* Config.checkChunkFitsFrame(checked.chunkSize, system.transport.maxFrameSize)
    const codec = PayloadCodec.make(options.payload)
    const settings: ProducerController.ProducerSettings = {
      endpoint: checked.name,
      consumer: checked.consumer,
      deliveryConfirmation: checked.deliveryConfirmation,
      retryInterval: checked.retryInterval,
      chunkSize: checked.chunkSize,
      durableQueue: options.durableQueue,
      queueRetry: checked.queueRetry,
      consumerNode
    }
    return yield* makeEndpoint(
      system,
      { name: checked.name, kind: "Producer", peer: checked.consumer, address: undefined },
      (hooks) => ProducerController.make(settings, codec, system, hooks)
    )
  })
