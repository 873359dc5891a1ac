/**
 * Writers: put messages into a durable queue's backlog from anywhere, without the producer's
 * epoch (a writer is never fenced). The live producer controller, wherever it runs, takes the
 * backlog into its flow in order.
 *
 * The SQL writer is the transactional outbox: it writes through the `SqlClient` in context, so
 * inside the application's `sql.withTransaction(...)` the message commits or rolls back with the
 * application's own rows (the writer opens no transaction of its own there; outside one, a batch
 * that needs several statements gets one). Payloads are encoded exactly as a producer encodes
 * them (the same Schema on both sides), and ids follow the producer's rules.
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import { Effect, Either } from "effect"
import type { Schema } from "effect"
import { newMessageId } from "../internal/MessageId.js"
import * as Config from "../Protocol/Config.js"
import { PayloadEncodeError, ProducerContractError, ReliableConfigError } from "../Protocol/Errors.js"
import { checkMessageId } from "../Protocol/MessageIdRule.js"
import * as PayloadCodec from "../Protocol/PayloadCodec.js"
import type { EnqueueRequest, EnqueueResult, QueueOperatorService } from "./DurableProducerQueue.js"
import { enqueue as enqueueSql, operatorTables } from "./internal/SqlOperators.js"
import type { SqlQueueOptions } from "./internal/SqlQueueSetup.js"
import { setUp } from "./internal/SqlQueueSetup.js"
import type { QueueBackendError, QueueConflict, QueueRejected } from "./QueueErrors.js"

/** Which queue a writer feeds: a point-to-point producer's or a work-pulling producer's. */
export type WriterKind = "producer" | "work"

export interface WriterOptions<A, I> extends SqlQueueOptions {
  /** The payload Schema, the producer's. */
  readonly payload: Schema.Schema<A, I, never>
  /** Default `"producer"`. */
  readonly kind?: WriterKind | undefined
}

export interface WriteOptions {
  /** The message's id (default: a fresh, time-ordered one); the first write of an id wins. */
  readonly messageId?: string | undefined
  /** W3C trace context to carry with the message. */
  readonly trace?: string | undefined
}

export interface WriterMessage<A> extends WriteOptions {
  readonly payload: A
}

export type WriterError = PayloadEncodeError | ProducerContractError | QueueRejected | QueueBackendError

export interface QueueWriter<A> {
  /** Adds one message to the backlog; `alreadyStored` when its id was there or stored already. */
  readonly enqueue: (payload: A, options?: WriteOptions) => Effect.Effect<EnqueueResult, WriterError>
  /** Adds messages in order, all or none. */
  readonly enqueueAll: (messages: Iterable<WriterMessage<A>>) => Effect.Effect<ReadonlyArray<EnqueueResult>, WriterError>
}

const writerKeys = Config.optionKeys<WriterOptions<unknown, unknown>>({ queueName: true, tablePrefix: true, payload: true, kind: true })

const contractReasons = { Blank: "BlankMessageId", Invalid: "InvalidMessageId", Reserved: "ReservedMessageId" } as const

/** Checks and encodes one message as a producer would; the first refusal fails the batch. */
const encodeAll = <A>(
  queueName: string,
  codec: PayloadCodec.PayloadCodec<A>,
  messages: Iterable<WriterMessage<A>>
): Either.Either<ReadonlyArray<EnqueueRequest>, PayloadEncodeError | ProducerContractError> => {
  const requests: Array<EnqueueRequest> = []
  for (const message of messages) {
    if (message.messageId !== undefined) {
      const problem = checkMessageId(message.messageId)
      if (problem !== undefined) {
        return Either.left(new ProducerContractError({ reason: contractReasons[problem.problem], message: problem.message }))
      }
    }
    const messageId = message.messageId ?? newMessageId()
    if (message.payload === undefined) {
      return Either.left(new ProducerContractError({ reason: "MissingPayload", message: `message ${messageId} carries no payload` }))
    }
    const bytes = codec.encode(message.payload)
    if (Either.isLeft(bytes)) return Either.left(new PayloadEncodeError({ endpointName: queueName, messageId, cause: bytes.left }))
    requests.push(message.trace === undefined ? { messageId, payload: bytes.right } : { messageId, payload: bytes.right, trace: message.trace })
  }
  return Either.right(requests)
}

type Enqueue = (requests: ReadonlyArray<EnqueueRequest>) => Effect.Effect<
  ReadonlyArray<EnqueueResult>,
  QueueConflict | QueueRejected | QueueBackendError
>

const makeWriter = <A, I>(queueName: string, payload: Schema.Schema<A, I, never>, enqueue: Enqueue): QueueWriter<A> => {
  const codec = PayloadCodec.make(payload)
  const enqueueAll = (messages: Iterable<WriterMessage<A>>): Effect.Effect<ReadonlyArray<EnqueueResult>, WriterError> =>
    Effect.suspend(() =>
      Effect.flatMap(encodeAll(queueName, codec, messages), (requests) =>
        // the ids were checked as a producer checks them, which the queue's own check cannot refuse
        Effect.catchTag(enqueue(requests), "QueueConflict", (conflict) => Effect.die(conflict)))
    )
  return {
    enqueue: (value, options) => Effect.map(enqueueAll([{ ...options, payload: value }]), (results) => results[0]),
    enqueueAll
  }
}

/**
 * A writer into the SQL queue `queueName` (of `kind`, default the point-to-point producer's)
 * through the `SqlClient` in context; the tables are migrated first, so a writer may start before
 * any producer.
 */
export const writer = <A, I>(
  options: WriterOptions<A, I>
): Effect.Effect<QueueWriter<A>, ReliableConfigError | QueueBackendError, SqlClient> =>
  Effect.gen(function*() {
    yield* Config.checkKeys("DurableQueue.writer", options, writerKeys)
    yield* Config.checkSchema("payload", options.payload)
    const kind = options.kind ?? "producer"
    if (kind !== "producer" && kind !== "work") {
      return yield* new ReliableConfigError({ option: "kind", message: `kind must be "producer" or "work", got ${JSON.stringify(kind)}` })
    }
    const { sql, tables } = yield* setUp("DurableQueue.writer", options, ["payload", "kind"])
    const queue = operatorTables(sql, tables, options.queueName, kind)
    return makeWriter(options.queueName, options.payload, (requests) => enqueueSql(queue, requests))
  })

/** A writer into any queue service's backlog (for tests: a memory queue), encoding as a producer does. */
export const writerMemory = <A, I>(
  queue: QueueOperatorService,
  payload: Schema.Schema<A, I, never>
): Effect.Effect<QueueWriter<A>, ReliableConfigError> =>
  Effect.as(Config.checkSchema("payload", payload), makeWriter("memory writer", payload, queue.enqueue))
