/**
 * The durable producer queue contract (point-to-point). A producer controller with a durable
 * queue stores every message before answering `Stored`, accepts it on `StoredAck` before
 * emitting it, and confirms what the consumer confirmed. After a crash, restart or relocation
 * the next controller loads the accepted, unconfirmed messages and redelivers them.
 *
 * Every stored entry is in one state: `Stored` (not accepted yet), `Accepted` (in the flow),
 * `Confirmed` (done; its payload may be compacted) or `DeadLettered` (given up on; its payload
 * kept for an operator). Messages may also wait in the queue's *backlog*, before they have a seq.
 *
 * The rules every implementation keeps (the conformance suite checks them):
 * - All operations are linearizable and safe to call concurrently.
 * - `load` returns a fresh positive epoch greater than every earlier one; every write carrying an
 *   older epoch fails with `QueueFenced`, checked in the same transaction as the write (an epoch
 *   no `load` returned is `QueueConflict`). The backlog and dead-letter operators (`enqueue`,
 *   `requeueDeadLetter`, `discardDeadLetter`) and the reads (`backlog`, `deadLetters`,
 *   `inspect`) take no epoch and are never fenced.
 * - The queue assigns store sequences: 1, 2, 3... in store order, one per stored entry (a chunked
 *   message takes one per chunk).
 * - The first `store`/`storeChunked` of a business message id wins: a retry returns the stored
 *   seq(s) and payload(s) with `alreadyStored: true` and appends nothing, whatever its payload.
 *   `storeChunked` on an id stored whole returns the whole entry; `store` on an id stored as a
 *   chunked batch fails with `QueueChunkedBatch` (recover the batch with `storeChunked`).
 * - `accept` marks a stored message (all its chunks) accepted; repeating it does nothing; an
 *   unknown id is `QueueConflict`.
 * - `confirm(upToSeq)` marks confirmed every `Accepted` entry with seq <= upToSeq; `Stored`
 *   entries are untouched (accepted later, they are confirmed by a later confirm covering them).
 *   Repeating it, or a lower value, is fine; a value beyond the highest stored seq is
 *   `QueueConflict`.
 * - `load` returns every `Accepted` entry in seq order, `currentSeq` (the highest seq ever
 *   assigned) and `confirmedSeq`, the *low mark*: the highest seq h such that no entry with
 *   seq <= h is `Stored` or `Accepted` (holes, confirmed and dead-lettered entries do not hold it
 *   back; one stored, never accepted entry does). Every loaded entry lies above it.
 * - Confirmed entries may be compacted: their payloads may come back empty in a later
 *   `alreadyStored` result, but the business id stays owned, in its stored shape, so a
 *   resubmission still answers `alreadyStored` (or `QueueChunkedBatch`) and appends nothing. A
 *   message never accepted keeps its payload: its resubmission gets the first write.
 * - A batch call (`storeBatch`, `acceptBatch`, `storeAccepted`, `enqueue`) that fails writes
 *   nothing.
 * - `storeAccepted` (optional) is `store` then `accept` for each message in turn, in one
 *   transaction: a crash leaves all of it or none of it.
 * - A business id that is empty (or blank, for `enqueue`) or starts with the reserved chunk
 *   prefix, and a `storeChunked` without chunks, are `QueueConflict`.
 * - Backlog: `enqueue` adds messages in request order, in one transaction, with no epoch. The
 *   first write of an id wins across the backlog and the stored entries: enqueueing an id that
 *   is in the backlog or stored answers `alreadyStored: true` and adds nothing. `backlog(limit)`
 *   reads the oldest messages in backlog order (the order enqueues committed, as one writer sees
 *   them), never an id that is stored already, and at most `limit` of them. A store with
 *   `fromBacklog` removes the backlog message of its id in the same transaction (first write
 *   wins as ever: an id stored before answers `alreadyStored`).
 * - Dead letters: `deadLetter` marks a stored message dead-lettered (all its chunks), keeping its
 *   payload; repeating it does nothing; an unknown id, or a message with a confirmed entry, is
 *   `QueueConflict`. A dead letter is never loaded, does not hold back the low mark, is not
 *   confirmed by `confirm`, answers a resubmission with `alreadyStored` (and `accepted`,
 *   `deadLettered`), and survives restarts. `requeueDeadLetter` removes its entries and enqueues
 *   it again under its id, payload (chunks joined), send time and trace; `discardDeadLetter`
 *   marks it confirmed (payload compacted, id still owned).
 * - `inspect` only reads: no epoch, no lock a writer waits for.
 * - Content the database cannot hold is `QueueRejected`; any other backend failure is
 *   `QueueBackendError` and is retried by the controller.
 * - A payload handed to the queue may be a view into a larger buffer that other payloads share
 *   (as a pooled Node `Buffer` is): an implementation reads its `byteOffset` and `byteLength`, and
 *   copies the bytes it keeps in memory.
 */
import { Context } from "effect"
import type { Effect, Stream } from "effect"
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
  /** When the message was sent or enqueued (milliseconds since the Unix epoch), when the store said. */
  readonly at?: number | undefined
  /** W3C trace context of the sender, when it had one. */
  readonly trace?: string | undefined
  /** Work queues: failed attempts so far (absent: none). */
  readonly attempts?: number | undefined
  /** Work queues: not to be dispatched before this time (milliseconds since the Unix epoch). */
  readonly notBefore?: number | undefined
}

/** What a controller needs after a (re)start. */
export interface DurableQueueState {
  /** The highest seq ever assigned (0 for an empty queue). */
  readonly currentSeq: number
  /**
   * The low mark: the highest seq h such that no entry with seq <= h is stored or accepted
   * (0 when nothing is confirmed yet).
   */
  readonly confirmedSeq: number
  /** Every accepted entry (all above `confirmedSeq`), ascending. */
  readonly unconfirmed: ReadonlyArray<StoredEntry>
}

export interface LoadResult {
  readonly state: DurableQueueState
  readonly epoch: QueueEpoch
}

/** How a message is stored, beside its id and payload. */
export interface StoreOptions {
  /** The message comes from the backlog: its backlog entry is removed in the same transaction. */
  readonly fromBacklog?: boolean | undefined
  /** When it was sent or enqueued (milliseconds since the Unix epoch), kept with the entry. */
  readonly at?: number | undefined
  /** W3C trace context of the sender, kept with the entry. */
  readonly trace?: string | undefined
}

export interface StoreRequest extends StoreOptions {
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
  /** True when the stored message was already accepted (or dead-lettered). */
  readonly accepted: boolean
  /** True when the stored message is a dead letter: it must not be emitted (absent: false). */
  readonly deadLettered?: boolean | undefined
}

// ---- the backlog -------------------------------------------------------------------------------

/** One message waiting in the backlog. */
export interface BacklogEntry {
  readonly messageId: string
  readonly payload: Uint8Array
  /** When it was enqueued (milliseconds since the Unix epoch, from the request or the queue's clock). */
  readonly enqueuedAt: number
  /** W3C trace context of the sender, when it had one. */
  readonly trace?: string | undefined
}

export interface EnqueueRequest {
  readonly messageId: string
  readonly payload: Uint8Array
  /** When it was sent (milliseconds since the Unix epoch); default: the queue's clock. */
  readonly at?: number | undefined
  readonly trace?: string | undefined
}

export interface EnqueueResult {
  readonly messageId: string
  /** True when the id was in the backlog or stored already: nothing was added (first write wins). */
  readonly alreadyStored: boolean
}

// ---- dead letters ------------------------------------------------------------------------------

export interface DeadLetterRequest {
  readonly messageId: string
  /** Handler attempts made. */
  readonly attempts: number
  /** The last error, as text. */
  readonly lastError: string
  /** When it was given up on (milliseconds since the Unix epoch). */
  readonly at: number
}

export interface DeadLetter {
  readonly messageId: string
  /** The stored seq (the first chunk's for a chunked message). */
  readonly seq: number
  /** The whole message's payload (chunks joined). */
  readonly payload: Uint8Array
  readonly attempts: number
  readonly lastError: string
  readonly deadAt: number
  /** When the message was sent or enqueued, when the store said. */
  readonly at?: number | undefined
  readonly trace?: string | undefined
}

export interface DeadLettersOptions {
  /** At most this many dead letters (a positive integer). */
  readonly limit: number
  /** Only dead letters with a seq above this (default 0): the last seq of the previous page. */
  readonly afterSeq?: number | undefined
}

// ---- inspection --------------------------------------------------------------------------------

export type InspectedState = "Backlog" | "Stored" | "Accepted" | "Confirmed" | "DeadLettered"

/** One message of a queue, as `inspect` saw it (a chunked message once, chunks joined). */
export interface InspectedEntry {
  readonly messageId: string
  /** The stored seq (the first chunk's); undefined in the backlog. */
  readonly seq: number | undefined
  readonly state: InspectedState
  /** Failed handler attempts recorded (dead letters, work queue failures). */
  readonly attempts: number
  /** When it was sent or enqueued, when known. */
  readonly at: number | undefined
  /** The payload; empty once compacted. */
  readonly payload: Uint8Array
}

export interface QueueInspection {
  /**
   * Messages waiting in the backlog (the SQL queues count from an index: a backlog message whose
   * id a plain store took meanwhile counts until a store from the backlog sweeps it).
   */
  readonly backlog: number
  /** Stored, not accepted. */
  readonly stored: number
  /** Accepted, not confirmed (in the flow; for work: pending or dispatched). */
  readonly unconfirmed: number
  readonly deadLettered: number
  /**
   * The head-of-line lag's start: the earlier of the first backlog message's `at` and the oldest
   * unconfirmed message's; undefined when there is none (or none has an `at`).
   */
  readonly oldestAt: number | undefined
  /**
   * A page of messages: stored ones with a seq above `afterSeq` in seq order, then, on the page
   * that reaches their end, backlog messages in backlog order. At most `limit` in all.
   */
  readonly entries: ReadonlyArray<InspectedEntry>
}

export interface InspectOptions {
  /** At most this many entries (a non-negative integer; 0 for the counts alone). */
  readonly limit: number
  /** Only entries in these states (default: all). */
  readonly states?: ReadonlyArray<InspectedState> | undefined
  /** Only stored entries with a seq above this (default 0). */
  readonly afterSeq?: number | undefined
}

/** The operations both queue kinds have for their backlog, dead letters and inspection. */
export interface QueueOperatorService {
  /** Adds messages to the backlog, in order, in one transaction. No epoch: any writer may. */
  readonly enqueue: (
    requests: ReadonlyArray<EnqueueRequest>
  ) => Effect.Effect<ReadonlyArray<EnqueueResult>, QueueConflict | QueueRejected | QueueBackendError>
  /** The oldest backlog messages, oldest first, at most `limit` (read only; takes no lock). */
  readonly backlog: (limit: number) => Effect.Effect<ReadonlyArray<BacklogEntry>, QueueBackendError>
  /**
   * Optional: emits when new backlog may have committed (PostgreSQL `LISTEN`; in memory, every
   * enqueue). Signals coalesce and may be lost (a reconnect, a subscriber that was busy), so a
   * reader subscribes, then reads the backlog, and still polls now and then. Absent where the
   * backend cannot tell (SQLite: poll).
   */
  readonly backlogSignal?: Stream.Stream<void> | undefined
  /** Dead letters in seq order after `afterSeq` (default 0), at most `limit`. No epoch. */
  readonly deadLetters: (options: DeadLettersOptions) => Effect.Effect<ReadonlyArray<DeadLetter>, QueueBackendError>
  /**
   * Moves a dead letter back into the flow: its entries are removed and the message is added to
   * the backlog under its original id, payload and trace (so it is delivered again after what is
   * in flight, and confirmed once). False when no dead letter has that id. No epoch.
   */
  readonly requeueDeadLetter: (messageId: string) => Effect.Effect<boolean, QueueBackendError>
  /** Drops a dead letter for good (its id stays owned: a resubmission answers alreadyStored). No epoch. */
  readonly discardDeadLetter: (messageId: string) => Effect.Effect<boolean, QueueBackendError>
  /** Counts and a page of messages, read without an epoch or a lock that holds up a writer. */
  readonly inspect: (options: InspectOptions) => Effect.Effect<QueueInspection, QueueBackendError>
}

export interface DurableProducerQueueService extends QueueOperatorService {
  readonly load: Effect.Effect<LoadResult, QueueBackendError>
  readonly store: (
    epoch: QueueEpoch,
    request: StoreRequest
  ) => Effect.Effect<StoreResult, QueueFenced | QueueConflict | QueueChunkedBatch | QueueRejected | QueueBackendError>
  /**
   * Stores every chunk of one business message atomically (one seq each, in order); `options`
   * as for `store` (`at` and `trace` are kept with every chunk).
   */
  readonly storeChunked: (
    epoch: QueueEpoch,
    messageId: string,
    chunks: ReadonlyArray<Uint8Array>,
    options?: StoreOptions
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
  /** Marks a stored message dead-lettered (fenced writer only); its payload is kept. */
  readonly deadLetter: (
    epoch: QueueEpoch,
    request: DeadLetterRequest
  ) => Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError>
}

export class DurableProducerQueue extends Context.Tag("effect-reliable/DurableProducerQueue")<
  DurableProducerQueue,
  DurableProducerQueueService
>() {}
