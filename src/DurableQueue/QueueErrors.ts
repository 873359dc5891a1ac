/**
 * Errors of the durable queue contracts. `QueueFenced` and `QueueConflict` are terminal for the
 * controller; `QueueChunkedBatch` tells it to recover a chunked batch; `QueueBackendError` is
 * anything else and is retried.
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

/** Any other backend failure (connection lost, timeout, lock). Retried under `queueRetry`. */
export class QueueBackendError extends Data.TaggedError("QueueBackendError")<{
  readonly operation: string
  readonly cause: unknown
}> {
  override get message(): string {
    const reason = this.cause instanceof Error ? this.cause.message : String(this.cause)
    return `durable queue ${this.operation} failed: ${reason}`
  }
}

export type DurableQueueError = QueueFenced | QueueConflict | QueueChunkedBatch | QueueBackendError

/** True for the errors no retry can fix. */
export const isTerminal = (error: DurableQueueError): error is QueueFenced | QueueConflict =>
  error._tag === "QueueFenced" || error._tag === "QueueConflict"
