/**
 * Fault injection for durable queues: wrappers that make a seeded share of operations fail with
 * `QueueBackendError`, either before the operation runs (nothing happened) or after it ran (it
 * took effect, but the caller is told it failed: the realistic case of a commit whose answer was
 * lost). The same seed and the same sequence of calls give the same failures.
 */
import { Data, Effect } from "effect"
import type { DurableProducerQueueService, StoreRequest } from "./DurableProducerQueue.js"
import type { DurableWorkQueueService } from "./DurableWorkQueue.js"
import { QueueBackendError } from "./QueueErrors.js"
import * as SeededRandom from "../internal/SeededRandom.js"

export interface FlakyOptions {
  /** Seeds the failure sequence. */
  readonly seed: number
  /** The probability, in [0, 1], that an operation reports failure; half before it runs, half after. */
  readonly failureRate: number
  /** Whether `load` may fail too (default true). */
  readonly failLoad?: boolean | undefined
}

/** Where an injected failure strikes. */
export type FlakyFault = "before" | "after"

/** The cause of an injected `QueueBackendError`. */
export class FlakyFailure extends Data.TaggedError("FlakyFailure")<{
  readonly operation: string
  readonly fault: FlakyFault
}> {
  override get message(): string {
    const what = this.fault === "before" ? "not performed" : "performed, answer lost"
    return `injected ${this.operation} failure (${what})`
  }
}

const makeFault = (options: FlakyOptions) => {
  if (!(options.failureRate >= 0 && options.failureRate <= 1)) {
    throw new RangeError(`failureRate must be within [0, 1], got ${options.failureRate}`)
  }
  const random = SeededRandom.make(options.seed)
  const rate = options.failureRate
  return <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | QueueBackendError, R> =>
    Effect.suspend(() => {
      // the draw happens when the operation runs, so the failure sequence follows the call order
      const draw = random.next()
      if (draw < rate / 2) {
        return Effect.fail(new QueueBackendError({ operation, cause: new FlakyFailure({ operation, fault: "before" }) }))
      }
      if (draw < rate) {
        return Effect.flatMap(
          effect,
          () => Effect.fail(new QueueBackendError({ operation, cause: new FlakyFailure({ operation, fault: "after" }) }))
        )
      }
      return effect
    })
}

/**
 * Wraps a producer queue so that a seeded share of its operations fail (see `FlakyOptions`).
 * Throws a `RangeError` when `failureRate` is outside [0, 1].
 */
export const flakyProducerQueue = (
  queue: DurableProducerQueueService,
  options: FlakyOptions
): DurableProducerQueueService => {
  const fault = makeFault(options)
  const storeAccepted = queue.storeAccepted
  return {
    load: options.failLoad === false ? queue.load : fault("load", queue.load),
    store: (epoch, request) => fault("store", queue.store(epoch, request)),
    storeChunked: (epoch, messageId, chunks) => fault("storeChunked", queue.storeChunked(epoch, messageId, chunks)),
    storeBatch: (epoch, requests) => fault("storeBatch", queue.storeBatch(epoch, requests)),
    accept: (epoch, messageId) => fault("accept", queue.accept(epoch, messageId)),
    acceptBatch: (epoch, messageIds) => fault("acceptBatch", queue.acceptBatch(epoch, messageIds)),
    confirm: (epoch, upToSeq) => fault("confirm", queue.confirm(epoch, upToSeq)),
    ...(storeAccepted === undefined ? {} : {
      storeAccepted: (epoch: number, requests: ReadonlyArray<StoreRequest>) => fault("storeAccepted", storeAccepted(epoch, requests))
    })
  }
}

/**
 * Wraps a work queue so that a seeded share of its operations fail (see `FlakyOptions`).
 * Throws a `RangeError` when `failureRate` is outside [0, 1].
 */
export const flakyWorkQueue = (queue: DurableWorkQueueService, options: FlakyOptions): DurableWorkQueueService => {
  const fault = makeFault(options)
  const storeAccepted = queue.storeAccepted
  return {
    load: options.failLoad === false ? queue.load : fault("load", queue.load),
    store: (epoch, request) => fault("store", queue.store(epoch, request)),
    storeBatch: (epoch, requests) => fault("storeBatch", queue.storeBatch(epoch, requests)),
    accept: (epoch, messageId) => fault("accept", queue.accept(epoch, messageId)),
    acceptBatch: (epoch, messageIds) => fault("acceptBatch", queue.acceptBatch(epoch, messageIds)),
    confirmMessage: (epoch, messageId) => fault("confirmMessage", queue.confirmMessage(epoch, messageId)),
    confirmBatch: (epoch, messageIds) => fault("confirmBatch", queue.confirmBatch(epoch, messageIds)),
    ...(storeAccepted === undefined ? {} : {
      storeAccepted: (epoch: number, requests: ReadonlyArray<StoreRequest>) => fault("storeAccepted", storeAccepted(epoch, requests))
    })
  }
}
