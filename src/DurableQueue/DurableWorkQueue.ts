/**
 * The durable work queue contract (work-pulling). Store and accept keep the producer queue's
 * epoch-fenced, first-write-wins append model; confirmation is per message id, because workers
 * complete out of order and a watermark cannot express holes.
 *
 * A job is in one state: `Stored`, `Accepted` (pending: in the pool or dispatched), `Confirmed`
 * (done) or `DeadLettered` (given up on, payload kept). Jobs may also wait in the queue's backlog
 * before they have a seq, exactly as in the producer queue (see `DurableProducerQueue`, whose
 * backlog, dead-letter and inspection rules hold here too).
 *
 * The rules every implementation keeps (the conformance suite checks them):
 * - All operations are linearizable and safe to call concurrently.
 * - `load` returns a fresh positive epoch greater than every earlier one; every write carrying an
 *   older epoch fails with `QueueFenced`, checked in the same transaction as the write (an epoch
 *   no `load` returned is `QueueConflict`).
 * - The queue assigns store sequences 1, 2, 3... in store order.
 * - The first `store` of a message id wins: a retry returns the stored seq and payload with
 *   `alreadyStored: true` and appends nothing.
 * - `accept` and `confirmMessage` do nothing when repeated and fail with `QueueConflict` for an
 *   unknown id; confirming a message that was never accepted is `QueueConflict` too. Accepting
 *   or confirming a dead letter does nothing (it stays a dead letter).
 * - `recordFailure` keeps a failed attempt of an accepted job: its attempt count, last error and
 *   the time it may run again; `load` returns `attempts` and `notBefore` with the job. An unknown
 *   or never accepted job is `QueueConflict`; for a confirmed or dead-lettered job it does
 *   nothing (a late report of a job that finished elsewhere).
 * - A job may be compacted once it is both accepted and confirmed, never before: its payload may
 *   be dropped, but its id keeps answering (a repeated `confirmMessage` does nothing, a
 *   resubmission returns `alreadyStored` with `confirmed: true`), so a retry after a lost answer
 *   stays harmless and a completed job is never dispatched again.
 * - A batch call (`storeBatch`, `acceptBatch`, `confirmBatch`, `storeAccepted`,
 *   `recordFailureBatch`, `enqueue`) that fails writes nothing.
 * - `storeAccepted` (optional) is `store` then `accept` for each job in turn, in one transaction:
 *   a crash leaves all of it or none of it.
 * - An empty message id (or a blank one, for `enqueue`) is `QueueConflict`.
 * - `load` returns `currentSeq` (the append cursor) and every accepted job (not confirmed, not
 *   dead-lettered) in ascending seq order; holes are normal.
 * - `deadLetter` marks a stored or accepted job dead-lettered, keeping its payload; repeating it
 *   does nothing; an unknown or confirmed job is `QueueConflict`.
 * - A payload handed to the queue may be a view into a larger buffer that other payloads share
 *   (as a pooled Node `Buffer` is): an implementation reads its `byteOffset` and `byteLength`, and
 *   copies the bytes it keeps in memory.
 * - Any other backend failure is `QueueBackendError` and is retried by the controller.
 */
import { Context } from "effect"
import type { Effect } from "effect"
import type { DeadLetterRequest, QueueEpoch, QueueOperatorService, StoredEntry, StoreRequest } from "./DurableProducerQueue.js"
import type { QueueBackendError, QueueConflict, QueueFenced, QueueRejected } from "./QueueErrors.js"

export interface WorkQueueState {
  /** The highest seq ever assigned (0 for an empty queue). */
  readonly currentSeq: number
  /** Accepted jobs (not confirmed, not dead-lettered), ascending by seq, with their attempts. */
  readonly pending: ReadonlyArray<StoredEntry>
}

export interface WorkLoadResult {
  readonly state: WorkQueueState
  readonly epoch: QueueEpoch
}

export interface WorkStoreResult {
  readonly entry: StoredEntry
  readonly alreadyStored: boolean
  /** True when the job was accepted before (confirmed and dead-lettered jobs were). */
  readonly accepted: boolean
  readonly confirmed: boolean
  /** True when the job is a dead letter: it must not be dispatched (absent: false). */
  readonly deadLettered?: boolean | undefined
}

/** A failed attempt of an accepted job. */
export interface FailureRequest {
  readonly messageId: string
  /** Failed attempts so far, this one included. */
  readonly attempts: number
  /** The last error, as text. */
  readonly lastError: string
  /** Not to be dispatched again before this time (milliseconds since the Unix epoch). */
  readonly notBefore: number
}

export interface DurableWorkQueueService extends QueueOperatorService {
  readonly load: Effect.Effect<WorkLoadResult, QueueBackendError>
  readonly store: (
    epoch: QueueEpoch,
    request: StoreRequest
  ) => Effect.Effect<WorkStoreResult, QueueFenced | QueueConflict | QueueRejected | QueueBackendError>
  /** Stores several jobs in one transaction, each result as `store` would give one by one. */
  readonly storeBatch: (
    epoch: QueueEpoch,
    requests: ReadonlyArray<StoreRequest>
  ) => Effect.Effect<ReadonlyArray<WorkStoreResult>, QueueFenced | QueueConflict | QueueRejected | QueueBackendError>
  readonly accept: (epoch: QueueEpoch, messageId: string) => Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError>
  readonly acceptBatch: (
    epoch: QueueEpoch,
    messageIds: ReadonlyArray<string>
  ) => Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError>
  readonly confirmMessage: (
    epoch: QueueEpoch,
    messageId: string
  ) => Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError>
  /** Confirms several jobs in one transaction, as `confirmMessage` would one by one. */
  readonly confirmBatch: (
    epoch: QueueEpoch,
    messageIds: ReadonlyArray<string>
  ) => Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError>
  /**
   * Optional. Stores and accepts several jobs in one transaction, for a producer that owns its
   * jobs and acknowledges them at once (the everyday `send`/`sendAll` path): one commit instead
   * of two, and a crash leaves neither the store nor the accept. Each result is exactly what
   * `store` would have returned if each job were stored and then accepted, one after the other:
   * `alreadyStored` for an id stored before (its first write, which this call accepts if it was
   * not yet; a confirmed job stays confirmed), and `accepted` telling whether the job was
   * accepted *before* the call (so a repeated id later in the same call answers `accepted:
   * true`). A failure writes nothing. A queue without it gets `storeBatch` then `acceptBatch`.
   */
  readonly storeAccepted?: (
    epoch: QueueEpoch,
    requests: ReadonlyArray<StoreRequest>
  ) => Effect.Effect<ReadonlyArray<WorkStoreResult>, QueueFenced | QueueConflict | QueueRejected | QueueBackendError>
  /** Records a failed attempt of an accepted job: its attempt count and when it may run again. */
  readonly recordFailure: (
    epoch: QueueEpoch,
    request: FailureRequest
  ) => Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError>
  /** Records several failed attempts in one transaction, as `recordFailure` would one by one. */
  readonly recordFailureBatch: (
    epoch: QueueEpoch,
    requests: ReadonlyArray<FailureRequest>
  ) => Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError>
  /** Marks a stored or accepted job dead-lettered (fenced writer only); its payload is kept. */
  readonly deadLetter: (
    epoch: QueueEpoch,
    request: DeadLetterRequest
  ) => Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError>
}

export class DurableWorkQueue extends Context.Tag("effect-reliable/DurableWorkQueue")<
  DurableWorkQueue,
  DurableWorkQueueService
>() {}
