/**
 * A durable producer queue wrapper for tests: records every call, and lets a test make chosen
 * operations fail (with any error) or take time on the Effect clock.
 */
import { Duration, Effect } from "effect"
import type { DurableProducerQueueService } from "../../src/DurableQueue/DurableProducerQueue.js"
import type { DurableQueueError } from "../../src/DurableQueue/QueueErrors.js"

export type Operation = "load" | "store" | "storeChunked" | "storeBatch" | "accept" | "acceptBatch" | "confirm" | "storeAccepted"

export interface Spy {
  readonly queue: DurableProducerQueueService
  /** Every call in order, with its main argument. */
  readonly calls: Array<{ readonly operation: Operation; readonly argument: unknown }>
  /** The next `count` calls of `operation` fail with `error` (before they run). */
  readonly failNext: (operation: Operation, error: DurableQueueError, count?: number) => void
  /** Every call of `operation` takes `millis` of clock time (0: no delay again). */
  readonly delay: (operation: Operation, millis: number) => void
}

/**
 * `fused`: pass the queue's `storeAccepted` through (watched too); by default the wrapper has
 * none, so a producer stores and then accepts in two calls.
 */
export const spy = (inner: DurableProducerQueueService, options: { readonly fused?: boolean } = {}): Spy => {
  const calls: Array<{ readonly operation: Operation; readonly argument: unknown }> = []
  const failures = new Map<Operation, { error: DurableQueueError; count: number }>()
  const delays = new Map<Operation, number>()
  const wrap = <A, E>(operation: Operation, argument: unknown, effect: Effect.Effect<A, E>): Effect.Effect<A, E | DurableQueueError> =>
    Effect.suspend((): Effect.Effect<A, E | DurableQueueError> => {
      calls.push({ operation, argument })
      const failure = failures.get(operation)
      if (failure !== undefined && failure.count > 0) {
        failure.count--
        return Effect.fail(failure.error)
      }
      const millis = delays.get(operation)
      return millis === undefined ? effect : Effect.zipRight(Effect.sleep(Duration.millis(millis)), effect)
    })
  // Everything not watched (the backlog, dead letters, inspection) passes through.
  const { storeAccepted: _fused, ...unwatched } = inner
  const queue = {
    ...unwatched,
    load: wrap("load", undefined, inner.load),
    store: (epoch, request) => wrap("store", request.messageId, inner.store(epoch, request)),
    storeChunked: (epoch, messageId, chunks, options) => wrap("storeChunked", messageId, inner.storeChunked(epoch, messageId, chunks, options)),
    storeBatch: (epoch, requests) => wrap("storeBatch", requests.map((request) => request.messageId), inner.storeBatch(epoch, requests)),
    accept: (epoch, messageId) => wrap("accept", messageId, inner.accept(epoch, messageId)),
    acceptBatch: (epoch, messageIds) => wrap("acceptBatch", messageIds, inner.acceptBatch(epoch, messageIds)),
    confirm: (epoch, upToSeq) => wrap("confirm", upToSeq, inner.confirm(epoch, upToSeq)),
    ...(inner.storeAccepted === undefined || options.fused !== true ? {} : {
      storeAccepted: (epoch: number, requests: Parameters<NonNullable<DurableProducerQueueService["storeAccepted"]>>[1]) =>
        wrap("storeAccepted", requests.map((request) => request.messageId), inner.storeAccepted!(epoch, requests))
    })
  } as DurableProducerQueueService
  return {
    queue,
    calls,
    failNext: (operation, error, count = 1) => void failures.set(operation, { error, count }),
    delay: (operation, millis) => void (millis > 0 ? delays.set(operation, millis) : delays.delete(operation))
  }
}
