/**
 * The producer endpoint around any producer-side controller (point-to-point or work-pulling):
 * it checks and encodes what callers send, queues them fairly (`Ingress`), runs the contract
 * calls, publishes confirmations, and outlives its controllers (`EndpointLifecycle`).
 *
 * A message's way in: `send` checks its id and encodes its payload in the caller's fiber (a
 * mistake fails that call and nothing else), joins the ingress queue, and resolves with its
 * `Stored` once the controller has stored (and, when durable, accepted) it.
 */
import { Chunk, Effect, Either, Exit, FiberSet, PubSub, Sink, Stream } from "effect"
import type { Duration, Queue, Scope, Tracer } from "effect"
import type { QueueRetryPolicy } from "../Controller/internal/LaneRunner.js"
import type { ProduceError } from "../Controller/internal/ProducerCalls.js"
import type { ProduceItem } from "../Controller/internal/ProducerHandshake.js"
import type { ProducerHooks, ProducerSide } from "../Controller/internal/ProducerShell.js"
import type { ControllerStats, ProducerStats } from "../Controller/ProducerController.js"
import type { EnqueueRequest, QueueOperatorService } from "../DurableQueue/DurableProducerQueue.js"
import type { QueueBackendError } from "../DurableQueue/QueueErrors.js"
import type { DeliveryConfirmed, Enqueued, Produced, RequestNext, Stored, StoredAck } from "../Protocol/Contract.js"
import { EndpointClosed, PayloadEncodeError, ProducerContractError, ReliableConfigError } from "../Protocol/Errors.js"
import type { MessageRejected } from "../Protocol/Errors.js"
import { checkMessageId } from "../Protocol/MessageIdRule.js"
import type { PayloadCodec } from "../Protocol/PayloadCodec.js"
import * as SlabCopy from "../Protocol/SlabCopy.js"
import * as Metrics from "../Observability/Metrics.js"
import * as Tracing from "../Observability/Tracing.js"
import type { SystemInternals } from "./SystemInternals.js"
import type { EndpointDetails, EndpointRecord } from "./EndpointRegistry.js"
import * as BacklogFeeder from "./BacklogFeeder.js"
import * as EndpointLifecycle from "./EndpointLifecycle.js"
import * as EnqueueBatcher from "./EnqueueBatcher.js"
import { DeferredItem, isTakeError } from "./DeferredItem.js"
import type { EncodeLater, OutgoingItem } from "./DeferredItem.js"
import * as Ingress from "./Ingress.js"
import { newMessageId } from "./MessageId.js"

/** Why a call on a producer endpoint can fail. */
export type SendError = ProduceError | EndpointClosed

/**
 * Why an `enqueue` can fail: a message id or payload that cannot be sent; the queue refusing a
 * message's content (`MessageRejected`); the queue not answering within its retries
 * (`QueueBackendError`: nothing is known to be committed, and enqueueing again is safe, since the
 * first write of an id wins); the endpoint closed; or an endpoint without a durable queue
 * (`ReliableConfigError`).
 */
export type EnqueueError =
  | ProducerContractError
  | PayloadEncodeError
  | MessageRejected
  | QueueBackendError
  | EndpointClosed
  | ReliableConfigError

export interface SendOptions {
  /** The stable deduplication key; default a fresh time-ordered UUID (version 7). */
  readonly messageId?: string
}

/** One message of a `sendAll`. */
export interface Message<A> {
  readonly payload: A
  readonly messageId?: string
}

export interface Producer<A> {
  readonly name: string
  /**
   * Waits for demand, stores the message and completes the handshake; resolves with `Stored`.
   * Senders are served in the order they called. A message id or payload that cannot be sent
   * (see `ProducerContractError`, `PayloadEncodeError`, `FrameTooLarge`, `MessageRejected`)
   * fails this call only: nothing is stored and the flow goes on.
   */
  readonly send: (payload: A, options?: SendOptions) => Effect.Effect<Stored, SendError>
  /**
   * Sends many messages, as many at a time as demand allows. Every id and payload is checked
   * before anything is stored: one bad message fails the call and stores none (plain-struct
   * payloads are then encoded as their batch goes out; see `DeferredItem`). Results are in input
   * order and identical to sending one by one.
   */
  readonly sendAll: (messages: Iterable<Message<A>>) => Effect.Effect<ReadonlyArray<Stored>, SendError>
  /**
   * Durable producers: commits the message to the queue's backlog and resolves once it is
   * durable, without waiting for demand or for a consumer (or worker) to exist. The flow then
   * delivers the backlog in order as demand arrives. Concurrent callers share one transaction.
   */
  readonly enqueue: (payload: A, options?: SendOptions) => Effect.Effect<Enqueued, EnqueueError>
  /** Enqueues many messages in one transaction (all or none); results in input order. */
  readonly enqueueAll: (messages: Iterable<Message<A>>) => Effect.Effect<ReadonlyArray<Enqueued>, EnqueueError>
  /**
   * Feeds the flow from a `Stream`: each chunk of the stream goes in as one `sendAll`, so the
   * stream's own chunking is the batching. Its result is the number of messages sent.
   */
  readonly sink: Sink.Sink<number, A, never, SendError>
  /** As `sink`, with `enqueueAll` (durable producers): a stream fills the backlog at the database's pace. */
  readonly enqueueSink: Sink.Sink<number, A, never, EnqueueError>
  /** Waits for the next grant (the contract's `RequestNext`), in line with senders. */
  readonly requestNext: Effect.Effect<RequestNext, EndpointClosed>
  /** Answers a grant; resolves with `Stored` once the message is stored. */
  readonly produce: (produced: Produced<A>) => Effect.Effect<Stored, SendError>
  /** Completes a message's handshake; the controller then emits it. */
  readonly storedAck: (ack: StoredAck) => Effect.Effect<void, ProducerContractError | EndpointClosed>
  /** Consumer confirmations (with `deliveryConfirmation: true`); best effort. */
  readonly confirmations: Stream.Stream<DeliveryConfirmed>
  /** A subscription to confirmations for the life of the scope (no race with the first one). */
  readonly subscribeConfirmations: Effect.Effect<Queue.Dequeue<DeliveryConfirmed>, never, Scope.Scope>
  readonly stats: Effect.Effect<ProducerStats>
}

/** The largest batch one grant carries. */
export const MaxBatch = 1000

/** A producer-side controller as its endpoint uses it. */
export interface EndpointController<A> extends ProducerSide<A> {
  readonly stats: () => ControllerStats
  /** What the endpoint's gauges show (sampled). */
  readonly gauges: () => Metrics.FlowGauges
}

/** A durable endpoint's backlog: where `enqueue` writes and what the flow takes in. */
export interface BacklogSettings {
  readonly queue: QueueOperatorService
  /** The queue's retry policy, as for the controller's own calls. */
  readonly retry: QueueRetryPolicy & {
    readonly timeout: Duration.Duration
    readonly backoff: { readonly initial: Duration.Duration; readonly max: Duration.Duration }
  }
  /** How often the backlog is read when nothing says it has news. */
  readonly pollInterval: Duration.Duration
}

/** The backlog settings of an endpoint with a durable queue (none without one). */
export const backlogOf = (
  queue: QueueOperatorService | undefined,
  checked: { readonly queueRetry: BacklogSettings["retry"]; readonly backlogPollInterval: Duration.Duration }
): BacklogSettings | undefined =>
  queue === undefined ? undefined : { queue, retry: checked.queueRetry, pollInterval: checked.backlogPollInterval }

/** Starts a controller in the current scope, wired to the endpoint's hooks. */
export type ControllerStart<A, C extends EndpointController<A>> = (hooks: ProducerHooks) => Effect.Effect<C, never, Scope.Scope>

const noStats: ControllerStats = { sent: 0, resent: 0, confirmed: 0, dropped: 0, oldestUnconfirmedAgeMillis: 0 }

/** The message's id when it may be sent (a fresh one when none was given), or why not. */
const checkedId = (payload: unknown, messageId: string | undefined): string | ProducerContractError => {
  if (messageId !== undefined) {
    const problem = checkMessageId(messageId)
    if (problem !== undefined) {
      const reason = problem.problem === "Blank" ? "BlankMessageId" : problem.problem === "Reserved" ? "ReservedMessageId" : "InvalidMessageId"
      return new ProducerContractError({ reason, message: problem.message })
    }
  }
  const id = messageId ?? newMessageId()
  return payload === undefined ? new ProducerContractError({ reason: "MissingPayload", message: `message ${id} carries no payload` }) : id
}

/**
 * Encodes a checked message's payload as the item the controller takes, with its sender's trace
 * context when there is one. `binary` is applied to binary payloads (the send path lends them to
 * the controller, which copies them into its own snapshot; the enqueue path copies them, as the
 * queue keeps them).
 */
const itemEncoder = <A>(endpoint: string, codec: PayloadCodec<A>, binary: (bytes: Uint8Array) => Uint8Array): EncodeLater =>
  (payload, messageId, trace) => {
    const bytes = codec.encode(payload as A, binary)
    if (Either.isLeft(bytes)) return new PayloadEncodeError({ endpointName: endpoint, messageId, cause: bytes.left })
    return trace === undefined ? { messageId, payload: bytes.right } : { messageId, payload: bytes.right, trace }
  }

/** Checks a caller's id (a generated one is fine by construction) and encodes the payload. */
const encoder = <A>(endpoint: string, codec: PayloadCodec<A>, binary: (bytes: Uint8Array) => Uint8Array) => {
  const encodeItem = itemEncoder(endpoint, codec, binary)
  return (payload: A, messageId: string | undefined): Either.Either<ProduceItem, ProduceError> => {
    const id = checkedId(payload, messageId)
    if (typeof id !== "string") return Either.left(id)
    const item = encodeItem(payload, id, undefined)
    return isTakeError(item) ? Either.left(item) : Either.right(item)
  }
}

/**
 * A `sendAll`'s items, every message checked first: one bad message fails the whole call before
 * anything is sent. A payload that surely encodes is encoded only when a grant takes it
 * (`DeferredItem`); any other is encoded now, to find out.
 */
const outgoingAll = <A>(endpoint: string, codec: PayloadCodec<A>) => {
  const encodeItem = itemEncoder(endpoint, codec, (bytes) => bytes)
  const surely = codec.encodesSurely
  return (messages: Iterable<Message<A>>, span: Tracer.Span | undefined): Either.Either<Array<OutgoingItem>, ProduceError> => {
    const items: Array<OutgoingItem> = []
    for (const message of messages) {
      const id = checkedId(message.payload, message.messageId)
      if (typeof id !== "string") return Either.left(id)
      const trace = span === undefined ? undefined : Tracing.messageTrace(span, id)
      if (surely !== undefined && surely(message.payload)) {
        items.push(new DeferredItem(id, message.payload, trace, encodeItem))
        continue
      }
      const item = encodeItem(message.payload, id, trace)
      if (isTakeError(item)) return Either.left(item)
      items.push(item)
    }
    return Either.right(items)
  }
}

/** A sink that hands each chunk of its stream to `all` as one call; its result counts the messages. */
const chunkSink = <A, R, E>(all: (messages: Iterable<Message<A>>) => Effect.Effect<ReadonlyArray<R>, E>): Sink.Sink<number, A, never, E> =>
  Sink.foldLeftChunksEffect(0, (count, chunk: Chunk.Chunk<A>) =>
    Effect.as(all(Chunk.map(chunk, (payload) => ({ payload }))), count + chunk.length))

interface Backlog {
  readonly batcher: EnqueueBatcher.EnqueueBatcher
  readonly feeder: BacklogFeeder.BacklogFeeder
}

/** The backlog's two halves: group-committed enqueues in, the feeder taking it into the flow. */
const startBacklog = (endpoint: string, settings: BacklogSettings, ingress: Ingress.Ingress) =>
  Effect.gen(function*() {
    const runFork = yield* FiberSet.makeRuntime<never>()
    const feeder = yield* BacklogFeeder.start({
      endpoint,
      queue: settings.queue,
      send: (items) => Effect.suspend(() => ingress.send(items)),
      pollInterval: settings.pollInterval,
      timeout: settings.retry.timeout,
      backoff: settings.retry.backoff
    })
    const batcher = EnqueueBatcher.make({
      endpoint,
      queue: settings.queue,
      retry: settings.retry,
      runFork,
      committed: feeder.hint
    })
    const backlog: Backlog = { batcher, feeder }
    return backlog
  })

/**
 * The everyday send path: each call in a span when the caller has a tracer (its messages then
 * carry the span's trace context), its send latency recorded. An answer there at once (a
 * volatile flow with a grant in hand) took no measurable time.
 */
const sender = <A>(
  endpoint: string,
  codec: PayloadCodec<A>,
  encode: ReturnType<typeof encoder<A>>,
  ingress: Ingress.Ingress,
  metrics: Metrics.EndpointMetrics,
  closed: () => boolean
) => {
  const spanAttributes = { "effect_reliable.endpoint": endpoint }
  const closedError = () => Exit.fail(new EndpointClosed({ name: endpoint }))

  const outgoing = outgoingAll(endpoint, codec)

  const submit = (items: ReadonlyArray<OutgoingItem>): Effect.Effect<ReadonlyArray<Stored>, SendError> => {
    const sent = ingress.send(items)
    // A wait's latency is recorded by the ingress when it answers (`IngressOptions.waited`).
    if (Exit.isExit(sent)) metrics.sendLatency.observe(0)
    return sent
  }

  const sendOne = (payload: A, options: SendOptions | undefined, span: Tracer.Span | undefined): Effect.Effect<Stored, SendError> => {
    if (closed()) return closedError()
    const item = encode(payload, options?.messageId)
    if (Either.isLeft(item)) return Exit.fail(item.left)
    const sent = submit([span === undefined ? item.right : Tracing.tracedItem(item.right, span)])
    if (!Exit.isExit(sent)) return Effect.map(sent, (stored) => stored[0])
    const settled = sent as Exit.Exit<ReadonlyArray<Stored>, SendError>
    return Exit.isSuccess(settled) ? Exit.succeed(settled.value[0]) : settled as Exit.Exit<never, SendError>
  }

  // The hot path: untraced, a call allocates what an `Effect.suspend` would (one closure).
  const send = (payload: A, options?: SendOptions): Effect.Effect<Stored, SendError> =>
    Effect.withFiberRuntime((fiber) =>
      Tracing.isTracing(fiber)
        ? Tracing.inSpan(fiber, Tracing.SpanNames.send, "producer", spanAttributes, (span) => sendOne(payload, options, span))
        : sendOne(payload, options, undefined)
    )

  const sendAll = (messages: Iterable<Message<A>>): Effect.Effect<ReadonlyArray<Stored>, SendError> =>
    Tracing.withSendSpan(Tracing.SpanNames.send, spanAttributes, (span) => {
      if (closed()) return closedError()
      const items = outgoing(messages, span)
      if (Either.isLeft(items)) return Exit.fail(items.left)
      return items.right.length === 0 ? Exit.succeed([]) : submit(items.right)
    })

  return { send, sendAll }
}

/** `enqueue` and `enqueueAll`: into the backlog, group-committed; refused without a durable queue. */
const enqueuer = <A>(
  endpoint: string,
  codec: PayloadCodec<A>,
  backlog: Backlog | undefined,
  now: () => number,
  closed: () => boolean
) => {
  // A binary payload is copied: the queue keeps it, and the caller may reuse its array.
  const encodeKept = encoder(endpoint, codec, SlabCopy.copy)
  const spanAttributes = { "effect_reliable.endpoint": endpoint }
  const noBacklog = () =>
    Exit.fail(
      new ReliableConfigError({
        option: "durableQueue",
        message: `${endpoint} has no durable queue: enqueue needs one (durableQueue, or durableWorkQueue for work-pulling)`
      })
    )

  /** The backlog requests, stamped `at`; a sampled sender's trace context is kept with each, and travels on from there. */
  const requestsOf = (items: ReadonlyArray<ProduceItem>, at: number, span: Tracer.Span | undefined): Array<EnqueueRequest> =>
    items.map((item) => {
      const trace = span === undefined ? undefined : Tracing.messageTrace(span, item.messageId)
      return trace === undefined ? { messageId: item.messageId, payload: item.payload, at } : { messageId: item.messageId, payload: item.payload, at, trace }
    })

  const enqueueAll = (messages: Iterable<Message<A>>): Effect.Effect<ReadonlyArray<Enqueued>, EnqueueError> =>
    Effect.withFiberRuntime((fiber): Effect.Effect<ReadonlyArray<Enqueued>, EnqueueError> => {
      if (closed()) return Exit.fail(new EndpointClosed({ name: endpoint }))
      if (backlog === undefined) return noBacklog()
      // Encoded now (the batcher stores them), learning on the way whether the caller chose any id.
      const items: Array<ProduceItem> = []
      let chosenIds = false
      for (const message of messages) {
        const item = encodeKept(message.payload, message.messageId)
        if (Either.isLeft(item)) return Exit.fail(item.left as ProducerContractError | PayloadEncodeError)
        chosenIds ||= message.messageId !== undefined
        items.push(item.right)
      }
      if (items.length === 0) return Exit.succeed([])
      const at = now()
      // Without an installed tracer (the common case) no span is made: straight to the batcher.
      if (!Tracing.isTracing(fiber)) return backlog.batcher.enqueue(requestsOf(items, at, undefined), chosenIds)
      return Tracing.withSendSpan(Tracing.SpanNames.send, spanAttributes, (span) => backlog.batcher.enqueue(requestsOf(items, at, span), chosenIds))
    })

  const enqueue = (payload: A, options?: SendOptions): Effect.Effect<Enqueued, EnqueueError> =>
    Effect.map(enqueueAll([options?.messageId === undefined ? { payload } : { payload, messageId: options.messageId }]), (results) => results[0])

  return { enqueue, enqueueAll }
}

export interface EndpointOptions<A, C extends EndpointController<A>> {
  readonly system: SystemInternals
  readonly record: EndpointRecord
  readonly codec: PayloadCodec<A>
  readonly start: ControllerStart<A, C>
  readonly details?: ((current: () => C | undefined, degraded: () => boolean) => EndpointDetails) | undefined
  /** A durable endpoint's backlog (absent: `enqueue` is refused). */
  readonly backlog?: BacklogSettings | undefined
}

export const make = <A, C extends EndpointController<A>>(
  options: EndpointOptions<A, C>
): Effect.Effect<{ readonly producer: Producer<A>; readonly current: () => C | undefined }, ReliableConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const { codec, record, start, system } = options
    const confirmations = yield* Effect.acquireRelease(PubSub.sliding<DeliveryConfirmed>(4096), PubSub.shutdown)
    const encode = encoder(record.name, codec, (bytes) => bytes)
    const metrics = yield* Metrics.make(record.name, record.kind === "WorkProducer" ? "work_producer" : "producer")
    const clock = yield* Effect.clock
    let closed = false
    const ingress = Ingress.make({
      endpoint: record.name,
      maxBatch: MaxBatch,
      controllerOf: (grant) => controllerOf(grant),
      waited: { now: () => clock.unsafeCurrentTimeMillis(), observe: (millis) => metrics.sendLatency.observe(millis) }
    })
    const backlog = options.backlog === undefined ? undefined : yield* startBacklog(record.name, options.backlog, ingress)
    // Added before the controller's lifecycle, so it runs after the controller has closed: a
    // store in flight gets its answer first.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
        ingress.close()
        backlog?.batcher.close()
      })
    )
    const lifecycle: EndpointLifecycle.Lifecycle<C> = yield* EndpointLifecycle.make<C>({
      system,
      record,
      role: "Producer",
      address: (controller) => controller.address,
      onStop: ingress.voidGrant,
      details: options.details?.(() => lifecycle.current(), () => lifecycle.health.degradedSince() !== undefined),
      start: (stopped, health) =>
        start({
          health,
          offerGrant: ingress.offer,
          notify: (confirmed) => {
            for (const item of confirmed) confirmations.unsafeOffer(item)
          },
          stopped,
          metrics
        }).pipe(Effect.tap(() => Effect.sync(() => backlog?.feeder.hint())))
    })

    // Added after the lifecycle, so it runs before the controller is closed: a graceful shutdown
    // lets the durable lane finish what it holds.
    yield* Effect.addFinalizer(() => Effect.suspend(() => lifecycle.current()?.drain ?? Effect.void))

    const controllerOf = (grant: RequestNext): C | undefined => {
      const controller = lifecycle.current()
      return controller !== undefined && controller.address.incarnation === grant.controller ? controller : undefined
    }

    yield* Metrics.sampleGauges(metrics, () => {
      const gauges = lifecycle.current()?.gauges() ?? Metrics.noGauges
      return { ...gauges, pending: gauges.pending + ingress.waiting() }
    })

    const closedError = () => Exit.fail(new EndpointClosed({ name: record.name }))
    const spanAttributes = { "effect_reliable.endpoint": record.name }
    const { send, sendAll } = sender(record.name, codec, encode, ingress, metrics, () => closed)

    const { enqueue, enqueueAll } = enqueuer(record.name, codec, backlog, () => clock.unsafeCurrentTimeMillis(), () => closed)

    const produceOne = (produced: Produced<A>, span: Tracer.Span | undefined): Effect.Effect<Stored, SendError> => {
      if (closed) return closedError()
      const controller = controllerOf(produced.grant) ?? lifecycle.current()
      if (controller === undefined) return Effect.die(new Error("producer endpoint has no controller"))
      const trace = span === undefined ? undefined : Tracing.messageTrace(span, produced.messageId)
      return controller.produce(produced.grant, produced.messageId, produced.payload, trace)
    }

    // The contract's send: in a span like `send`, its message carrying the span's trace context.
    const produce = (produced: Produced<A>): Effect.Effect<Stored, SendError> =>
      Effect.withFiberRuntime((fiber) =>
        Tracing.isTracing(fiber)
          ? Tracing.inSpan(fiber, Tracing.SpanNames.produce, "producer", spanAttributes, (span) => produceOne(produced, span))
          : produceOne(produced, undefined)
      )

    const storedAck = (ack: StoredAck): Effect.Effect<void, ProducerContractError | EndpointClosed> =>
      Effect.suspend((): Effect.Effect<void, ProducerContractError | EndpointClosed> => {
        if (closed) return closedError()
        const controller = lifecycle.current()
        if (controller === undefined) return Effect.die(new Error("producer endpoint has no controller"))
        return controller.storedAck(ack)
      })

    const producer: Producer<A> = {
      name: record.name,
      send,
      sendAll,
      enqueue,
      enqueueAll,
      sink: chunkSink(sendAll),
      enqueueSink: chunkSink(enqueueAll),
      requestNext: ingress.requestNext,
      produce,
      storedAck,
      confirmations: Stream.fromPubSub(confirmations),
      subscribeConfirmations: PubSub.subscribe(confirmations),
      stats: Effect.sync(() => ({ ...(lifecycle.current()?.stats() ?? noStats), degraded: lifecycle.health.degradedSince() !== undefined }))
    }
    return { producer, current: lifecycle.current }
  })
