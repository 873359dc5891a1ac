/**
 * Errors of the durable queue contracts. `QueueFenced` and `QueueConflict` are terminal for the
 * controller; `QueueChunkedBatch` tells it to recover a chunked batch; `QueueRejected` refuses
 * the messages of one request for their content (their senders are told, the flow goes on);
 * `QueueBackendError` is anything else and is retried until the backend answers again.
 */
import { Data } from "effect"

/** The writer's epoch is older than the queue's: a newer `load` took writership. Terminal. */
export class QueueFenced extends Data.TaggedError("QueueFenced")<{
  readonly epoch: number
  readonly currentEpoch: number
}> {
  override get message(): string {
    return `durable queue writer with epoch ${this.epoch} is fenced by epoch ${this.currentEpoch}`
  }
}

/** The request contradicts the queue's state (unknown id, impossible range, broken integrity). Terminal. */
export class QueueConflict extends Data.TaggedError("QueueConflict")<{
  readonly message: string
}> {}

/** A plain `store` named a message id whose retained first write is a chunked batch. */
export class QueueChunkedBatch extends Data.TaggedError("QueueChunkedBatch")<{
  readonly messageId: string
}> {
  override get message(): string {
    return `message ${this.messageId} is stored as a chunked batch; recover it with storeChunked`
  }
}

/**
 * The backend refused a store for the content of its messages (on PostgreSQL a data error:
 * SQLSTATE class 22, e.g. a NUL in text, or 54, e.g. an index row too large). Nothing was written;
 * retrying the same request cannot help, and other requests are unaffected.
 */
export class QueueRejected extends Data.TaggedError("QueueRejected")<{
  readonly operation: string
  readonly cause: unknown
}> {
  override get message(): string {
    const reason = this.cause instanceof Error ? this.cause.message : String(this.cause)
    return `durable queue ${this.operation} refused its messages: ${reason}`
  }
}

/** Any other backend failure (connection lost, timeout, lock). Retried until the backend answers. */
export class QueueBackendError extends Data.TaggedError("QueueBackendError")<{
  readonly operation: string
  readonly cause: unknown
}> {
  override get message(): string {
    const reason = this.cause instanceof Error ? this.cause.message : String(this.cause)
    return `durable queue ${this.operation} failed: ${reason}`
  }
}

export type DurableQueueError = QueueFenced | QueueConflict | QueueChunkedBatch | QueueRejected | QueueBackendError

/** True for the errors no retry can fix and that stop the controller. */
export const isTerminal = (error: DurableQueueError): error is QueueFenced | QueueConflict =>
  error._tag === "QueueFenced" || error._tag === "QueueConflict"
