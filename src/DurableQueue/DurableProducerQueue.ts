/**
 * The durable producer queue contract (point-to-point). A producer controller with a durable
 * queue stores every message before answering `Stored`, accepts it on `StoredAck` before
 * emitting it, and persists the consumer-confirmed watermark. After a crash, restart or
 * relocation the next controller loads the accepted, unconfirmed messages and redelivers them.
 *
 * The rules every implementation keeps (the conformance suite checks them):
 * - All operations are linearizable and safe to call concurrently.
 * - `load` returns a fresh positive epoch greater than every earlier one; every write carrying an
 *   older epoch fails with `QueueFenced`, checked in the same transaction as the write (an epoch
 *   no `load` returned is `QueueConflict`).
 * - The queue assigns store sequences: 1, 2, 3... in store order, one per stored entry (a chunked
 *   message takes one per chunk).
 * - The first `store`/`storeChunked` of a business message id wins: a retry returns the stored
 *   seq(s) and payload(s) with `alreadyStored: true` and appends nothing, whatever its payload.
 *   `storeChunked` on an id stored whole returns the whole entry; `store` on an id stored as a
 *   chunked batch fails with `QueueChunkedBatch` (recover the batch with `storeChunked`).
 * - `accept` marks a stored message (all its chunks) accepted; repeating it does nothing; an
 *   unknown id is `QueueConflict`.
 * - `confirm(upToSeq)` raises the confirmed watermark; a lower or equal value does nothing; a value
 *   beyond the highest stored seq is `QueueConflict`.
 * - `load` returns only accepted entries above the watermark, in seq order, and `currentSeq`, the
 *   highest seq ever assigned (stored-but-unaccepted entries keep their ids and seqs).
 * - Accepted entries at or below the watermark may be compacted: their payloads may come back
 *   empty in a later `alreadyStored` result, but the business id stays owned, in its stored
 *   shape, so a resubmission still answers `alreadyStored` (or `QueueChunkedBatch`) and appends
 *   nothing. A message never accepted keeps its payload: its resubmission gets the first write.
 * - A batch call (`storeBatch`, `acceptBatch`, `storeAccepted`) that fails writes nothing.
 * - `storeAccepted` (optional) is `store` then `accept` for each message in turn, in one
 *   transaction: a crash leaves all of it or none of it.
 * - A business id that is empty or starts with the reserved chunk prefix, and a `storeChunked`
 *   without chunks, are `QueueConflict`.
 * - Any other backend failure is `QueueBackendError` and is retried by the controller.
 */
import { Context } from "effect"
import type { Effect } from "effect"
import type { ChunkMark } from "../Protocol/WireMessage.js"
import type { DurableQueueError, QueueBackendError, QueueChunkedBatch, QueueConflict, QueueFenced, QueueRejected } from "./QueueErrors.js"

/** A writer's fencing token, from `load`. */
export type QueueEpoch = number

/** One stored entry: a whole message, or one chunk of a large one (derived id, `chunk` set). */
export interface StoredEntry {
  readonly seq: number
  /** The business id for whole messages; the derived chunk id for chunks. */
  readonly messageId: string
  readonly payload: Uint8Array
  readonly chunk?: ChunkMark | undefined
}

/** What a controller needs after a (re)start. */
export interface DurableQueueState {
  /** The highest seq ever assigned (0 for an empty queue). */
  readonly currentSeq: number
  /** The consumer-confirmed watermark (0 when nothing was confirmed). */
  readonly confirmedSeq: number
  /** Accepted entries with seq > confirmedSeq, ascending. */
  readonly unconfirmed: ReadonlyArray<StoredEntry>
}

export interface LoadResult {
  readonly state: DurableQueueState
  readonly epoch: QueueEpoch
}

export interface StoreRequest {
  readonly messageId: string
  readonly payload: Uint8Array
}

/** The authoritative outcome of storing one business message. */
export interface StoreResult {
  /** The business message id. */
  readonly messageId: string
  /** The stored entries: one for a whole message, one per chunk for a chunked batch. */
  readonly entries: ReadonlyArray<StoredEntry>
  /** True when the id was stored before; `entries` are the first write's. */
  readonly alreadyStored: boolean
  /** True when the stored message was already accepted. */
  readonly accepted: boolean
}

export interface DurableProducerQueueService {
  readonly load: Effect.Effect<LoadResult, QueueBackendError>
  readonly store: (
    epoch: QueueEpoch,
    request: StoreRequest
  ) => Effect.Effect<StoreResult, QueueFenced | QueueConflict | QueueChunkedBatch | QueueRejected | QueueBackendError>
  /** Stores every chunk of one business message atomically (one seq each, in order). */
  readonly storeChunked: (
    epoch: QueueEpoch,
    messageId: string,
    chunks: ReadonlyArray<Uint8Array>
  ) => Effect.Effect<StoreResult, QueueFenced | QueueConflict | QueueRejected | QueueBackendError>
  /**
   * Stores several whole messages in one transaction; each result is exactly what `store` would
   * have returned one by one, in order. A `QueueChunkedBatch` for one id fails the whole call
   * before anything is written.
   */
  readonly storeBatch: (
    epoch: QueueEpoch,
    requests: ReadonlyArray<StoreRequest>
  ) => Effect.Effect<ReadonlyArray<StoreResult>, DurableQueueError>
  readonly accept: (epoch: QueueEpoch, messageId: string) => Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError>
  /** Accepts several messages in one transaction, as `accept` would one by one. */
  readonly acceptBatch: (
    epoch: QueueEpoch,
    messageIds: ReadonlyArray<string>
  ) => Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError>
  readonly confirm: (epoch: QueueEpoch, upToSeq: number) => Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError>
  /**
   * Optional. Stores and accepts several whole messages in one transaction, for a producer that
   * owns its messages and acknowledges them at once (the everyday `send`/`sendAll` path): one
   * commit instead of two, and a crash leaves neither the store nor the accept. Each result is
   * exactly what `store` would have returned if each message were stored and then accepted, one
   * after the other: `alreadyStored` for an id stored before (its first write, which this call
   * accepts if it was not yet), and `accepted` telling whether the message was accepted *before*
   * the call (so a repeated id later in the same call answers `accepted: true`). A
   * `QueueChunkedBatch` for one id, or any other failure, fails the whole call before anything
   * is written. A queue without it gets `storeBatch` then `acceptBatch`, two transactions.
   */
  readonly storeAccepted?: (
    epoch: QueueEpoch,
    requests: ReadonlyArray<StoreRequest>
  ) => Effect.Effect<ReadonlyArray<StoreResult>, DurableQueueError>
}

export class DurableProducerQueue extends Context.Tag("effect-reliable/DurableProducerQueue")<
  DurableProducerQueue,
  DurableProducerQueueService
>() {}
