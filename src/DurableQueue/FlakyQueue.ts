/**
 * Fault injection for durable queues: wrappers that make a seeded share of operations fail with
 * `QueueBackendError`, either before the operation runs (nothing happened) or after it ran (it
 * took effect, but the caller is told it failed: the realistic case of a commit whose answer was
 * lost). The same seed and the same sequence of calls give the same failures.
 */
import { Data, Effect } from "effect"
import type { DurableProducerQueueService, QueueOperatorService, StoreRequest } from "./DurableProducerQueue.js"
import type { DurableWorkQueueService } from "./DurableWorkQueue.js"
import { QueueBackendError } from "./QueueErrors.js"
import * as SeededRandom from "../internal/SeededRandom.js"
import * as Config from "../Protocol/Config.js"
import { ReliableConfigError } from "../Protocol/Errors.js"

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

const flakyKeys = Config.optionKeys<FlakyOptions>({ seed: true, failureRate: true, failLoad: true })

/** Injects failures into one operation; the draws follow the order operations run in. */
type Fault = <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | QueueBackendError, R>

const checkOptions = (constructor: string, options: FlakyOptions) =>
  Effect.zipRight(
    Config.checkKeys(constructor, options, flakyKeys),
    Effect.all({
      seed: Config.checkSeed("seed", options.seed),
      failureRate: options.failureRate === undefined
        ? Effect.fail(new ReliableConfigError({ option: "failureRate", message: "failureRate is required: a probability in [0, 1]" }))
        : Config.checkProbability("failureRate", options.failureRate),
      failLoad: Config.checkFlag("failLoad", options.failLoad ?? true)
    })
  )

const makeFault = (seed: number, rate: number): Fault => {
  const random = SeededRandom.make(seed)
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

/** The backlog, dead-letter and inspection operations, each with faults; the signal as it is. */
const wrapOperators = (queue: QueueOperatorService, fault: Fault): QueueOperatorService => ({
  enqueue: (requests) => fault("enqueue", queue.enqueue(requests)),
  backlog: (limit) => fault("backlog", queue.backlog(limit)),
  ...(queue.backlogSignal === undefined ? {} : { backlogSignal: queue.backlogSignal }),
  deadLetters: (options) => fault("deadLetters", queue.deadLetters(options)),
  requeueDeadLetter: (messageId) => fault("requeueDeadLetter", queue.requeueDeadLetter(messageId)),
  discardDeadLetter: (messageId) => fault("discardDeadLetter", queue.discardDeadLetter(messageId)),
  inspect: (options) => fault("inspect", queue.inspect(options))
})

const wrapProducerQueue = (queue: DurableProducerQueueService, fault: Fault, failLoad: boolean): DurableProducerQueueService => {
  const storeAccepted = queue.storeAccepted
  return {
    ...wrapOperators(queue, fault),
    load: failLoad ? fault("load", queue.load) : queue.load,
    store: (epoch, request) => fault("store", queue.store(epoch, request)),
    storeChunked: (epoch, messageId, chunks, options) => fault("storeChunked", queue.storeChunked(epoch, messageId, chunks, options)),
    storeBatch: (epoch, requests) => fault("storeBatch", queue.storeBatch(epoch, requests)),
    accept: (epoch, messageId) => fault("accept", queue.accept(epoch, messageId)),
    acceptBatch: (epoch, messageIds) => fault("acceptBatch", queue.acceptBatch(epoch, messageIds)),
    confirm: (epoch, upToSeq) => fault("confirm", queue.confirm(epoch, upToSeq)),
    deadLetter: (epoch, request) => fault("deadLetter", queue.deadLetter(epoch, request)),
    ...(storeAccepted === undefined ? {} : {
      storeAccepted: (epoch: number, requests: ReadonlyArray<StoreRequest>) => fault("storeAccepted", storeAccepted(epoch, requests))
    })
  }
}

const wrapWorkQueue = (queue: DurableWorkQueueService, fault: Fault, failLoad: boolean): DurableWorkQueueService => {
  const storeAccepted = queue.storeAccepted
  return {
    ...wrapOperators(queue, fault),
    load: failLoad ? fault("load", queue.load) : queue.load,
    store: (epoch, request) => fault("store", queue.store(epoch, request)),
    storeBatch: (epoch, requests) => fault("storeBatch", queue.storeBatch(epoch, requests)),
    accept: (epoch, messageId) => fault("accept", queue.accept(epoch, messageId)),
    acceptBatch: (epoch, messageIds) => fault("acceptBatch", queue.acceptBatch(epoch, messageIds)),
    confirmMessage: (epoch, messageId) => fault("confirmMessage", queue.confirmMessage(epoch, messageId)),
    confirmBatch: (epoch, messageIds) => fault("confirmBatch", queue.confirmBatch(epoch, messageIds)),
    recordFailure: (epoch, request) => fault("recordFailure", queue.recordFailure(epoch, request)),
    recordFailureBatch: (epoch, requests) => fault("recordFailureBatch", queue.recordFailureBatch(epoch, requests)),
    deadLetter: (epoch, request) => fault("deadLetter", queue.deadLetter(epoch, request)),
    ...(storeAccepted === undefined ? {} : {
      storeAccepted: (epoch: number, requests: ReadonlyArray<StoreRequest>) => fault("storeAccepted", storeAccepted(epoch, requests))
    })
  }
}

/** Checks the options, then wraps the queue with a fault injector seeded from them. */
const flaky = <Q>(constructor: string, wrap: (queue: Q, fault: Fault, failLoad: boolean) => Q) =>
(queue: Q, options: FlakyOptions): Effect.Effect<Q, ReliableConfigError> =>
  Effect.map(checkOptions(constructor, options), (checked) => wrap(queue, makeFault(checked.seed, checked.failureRate), checked.failLoad))

/**
 * Wraps a producer queue so that a seeded share of its operations fail (see `FlakyOptions`).
 * Fails with `ReliableConfigError` on a bad option (e.g. `failureRate` outside [0, 1]).
 */
export const flakyProducerQueue: (
  queue: DurableProducerQueueService,
  options: FlakyOptions
) => Effect.Effect<DurableProducerQueueService, ReliableConfigError> = flaky("DurableQueue.flakyProducerQueue", wrapProducerQueue)

/**
 * Wraps a work queue so that a seeded share of its operations fail (see `FlakyOptions`).
 * Fails with `ReliableConfigError` on a bad option (e.g. `failureRate` outside [0, 1]).
 */
export const flakyWorkQueue: (
  queue: DurableWorkQueueService,
  options: FlakyOptions
) => Effect.Effect<DurableWorkQueueService, ReliableConfigError> = flaky("DurableQueue.flakyWorkQueue", wrapWorkQueue)
