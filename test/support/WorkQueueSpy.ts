/**
 * A durable work queue wrapper for tests: records every call and, separately, the order in which
 * calls took effect; lets a test make chosen operations fail, or hold the next call of an
 * operation for some Effect-clock time before it runs (to force one order of two racing calls).
 */
import { Duration, Effect } from "effect"
import type { DurableWorkQueueService } from "../../src/DurableQueue/DurableWorkQueue.js"
import type { QueueBackendError, QueueConflict, QueueFenced } from "../../src/DurableQueue/QueueErrors.js"

/** What a work queue write may fail with (a load fails with `QueueBackendError` only). */
export type WorkQueueError = QueueFenced | QueueConflict | QueueBackendError

export type WorkOperation =
  | "load"
  | "store"
  | "storeBatch"
  | "storeAccepted"
  | "accept"
  | "acceptBatch"
  | "confirmMessage"
  | "confirmBatch"

export interface WorkCall {
  readonly operation: WorkOperation
  readonly messageIds: ReadonlyArray<string>
}

export interface WorkSpy {
  readonly queue: DurableWorkQueueService
  /** Every call in order, with the message ids it names. */
  readonly calls: Array<WorkCall>
  /** Calls that succeeded, in the order they completed. */
  readonly completed: Array<WorkCall>
  /** The next `count` calls of `operation` fail with `error` (before they run). */
  readonly failNext: (operation: WorkOperation, error: WorkQueueError, count?: number) => void
  /** The next call of any of `operations` waits `millis` of clock time before it runs. */
  readonly holdNext: (operations: ReadonlyArray<WorkOperation>, millis: number) => void
}

export const spyWork = (inner: DurableWorkQueueService): WorkSpy => {
  const calls: Array<WorkCall> = []
  const completed: Array<WorkCall> = []
  const failures = new Map<WorkOperation, { error: WorkQueueError; count: number }>()
  let hold: { readonly operations: ReadonlyArray<WorkOperation>; readonly millis: number } | undefined
  const wrap = <A, E>(operation: WorkOperation, messageIds: ReadonlyArray<string>, effect: Effect.Effect<A, E>): Effect.Effect<A, E | WorkQueueError> =>
    Effect.suspend((): Effect.Effect<A, E | WorkQueueError> => {
      const call = { operation, messageIds }
      calls.push(call)
      const failure = failures.get(operation)
      if (failure !== undefined && failure.count > 0) {
        failure.count--
        return Effect.fail(failure.error)
      }
      const done = Effect.tap(effect, () => Effect.sync(() => void completed.push(call)))
      if (hold === undefined || !hold.operations.includes(operation)) return done
      const millis = hold.millis
      hold = undefined
      return Effect.zipRight(Effect.sleep(Duration.millis(millis)), done)
    })
  const storeAccepted = inner.storeAccepted
  const queue: DurableWorkQueueService = {
    ...inner,
    load: wrap("load", [], inner.load) as DurableWorkQueueService["load"],
    store: (epoch, request) => wrap("store", [request.messageId], inner.store(epoch, request)),
    storeBatch: (epoch, requests) => wrap("storeBatch", requests.map((request) => request.messageId), inner.storeBatch(epoch, requests)),
    accept: (epoch, messageId) => wrap("accept", [messageId], inner.accept(epoch, messageId)),
    acceptBatch: (epoch, messageIds) => wrap("acceptBatch", messageIds, inner.acceptBatch(epoch, messageIds)),
    confirmMessage: (epoch, messageId) => wrap("confirmMessage", [messageId], inner.confirmMessage(epoch, messageId)),
    confirmBatch: (epoch, messageIds) => wrap("confirmBatch", messageIds, inner.confirmBatch(epoch, messageIds)),
    ...(storeAccepted === undefined ? {} : {
      storeAccepted: (epoch, requests) =>
        wrap("storeAccepted", requests.map((request) => request.messageId), storeAccepted(epoch, requests))
    } satisfies Pick<DurableWorkQueueService, "storeAccepted">)
  }
  return {
    queue,
    calls,
    completed,
    failNext: (operation, error, count = 1) => void failures.set(operation, { error, count }),
    holdNext: (operations, millis) => void (hold = { operations, millis })
  }
}
