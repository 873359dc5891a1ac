/**
 * Group commit for `enqueue`: callers' messages go to the durable queue's backlog together. Up to
 * `MaxEnqueueInFlight` transactions run at once (a pipeline: the next group's transaction starts
 * while earlier ones commit, so the database is never left idle while the process gathers the
 * next group); the messages of every caller who comes while every slot is busy wait and then go
 * as one transaction, each caller resolving with its own results in its own order, exactly as if
 * they had enqueued one by one (first write wins per message), and only once its own transaction
 * committed. Nothing waits for a batch to fill: a lone caller's transaction starts at once.
 *
 * Order: a caller's messages go in one transaction, in request order, and a caller's next call
 * comes after its last one committed, so one caller's backlog order is its call order. Callers
 * whose calls overlap have no order between them (which group each lands in is timing anyway).
 * A caller with a message id that a running transaction holds too waits (and those behind it)
 * until that transaction ended: two transactions never write the same id at once, so they never
 * wait on each other's rows, nor deadlock over them.
 *
 * Every transaction has the queue's timeout and is retried under its retry policy; a batch the
 * queue refuses for its content is split, so only the callers whose messages it refuses fail.
 */
import { Effect, Either, Exit } from "effect"
import type { Fiber } from "effect"
import type { QueueRetryPolicy } from "../Controller/internal/LaneRunner.js"
import * as CallTimeouts from "../Controller/internal/CallTimeouts.js"
import { retrying, timeoutError } from "../Controller/internal/LaneRunner.js"
import type { EnqueueRequest, EnqueueResult, QueueOperatorService } from "../DurableQueue/DurableProducerQueue.js"
import type { QueueBackendError, QueueConflict, QueueRejected } from "../DurableQueue/QueueErrors.js"
import { Enqueued } from "../Protocol/Contract.js"
import { EndpointClosed, MessageRejected } from "../Protocol/Errors.js"

/** Why an enqueue can fail once its messages reached the batcher. */
export type EnqueueQueueError = MessageRejected | QueueBackendError | EndpointClosed

/** The most messages one transaction carries. */
export const MaxEnqueueBatch = 1000

/** The most transactions running at once. */
export const MaxEnqueueInFlight = 2

type Resume = (exit: Exit.Exit<ReadonlyArray<Enqueued>, EnqueueQueueError>) => void

class Caller {
  results: Array<Enqueued> | undefined = undefined
  exit: Exit.Exit<ReadonlyArray<Enqueued>, EnqueueQueueError> | undefined = undefined
  resume: Resume | undefined = undefined
  /** `chosenIds`: some id came from the caller (a generated one is unique, so it cannot clash). */
  constructor(readonly requests: ReadonlyArray<EnqueueRequest>, readonly chosenIds: boolean) {}

  finish(exit: Exit.Exit<ReadonlyArray<Enqueued>, EnqueueQueueError>) {
    if (this.exit !== undefined) return
    this.exit = exit
    const resume = this.resume
    this.resume = undefined
    resume?.(exit)
  }
}

export interface EnqueueBatcherOptions {
  readonly endpoint: string
  readonly queue: QueueOperatorService
  readonly retry: QueueRetryPolicy & { readonly timeout: NonNullable<QueueRetryPolicy["timeout"]> }
  /** Runs the transactions, in the endpoint's scope. */
  readonly runFork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>
  /** Told after every transaction that added something: the backlog has news. */
  readonly committed: () => void
}

export interface EnqueueBatcher {
  /**
   * Commits the requests to the backlog; their results in order (an `Exit` when settled at once).
   * `chosenIds`: some of the ids were the caller's (not generated), so they may clash with
   * another caller's.
   */
  readonly enqueue: (requests: ReadonlyArray<EnqueueRequest>, chosenIds: boolean) => Effect.Effect<ReadonlyArray<Enqueued>, EnqueueQueueError>
  /** The endpoint closed: waiting callers fail with `EndpointClosed` (a transaction in flight still commits). */
  readonly close: () => void
}

type QueueError = QueueConflict | QueueRejected | QueueBackendError

/** A refusal of the content: the caller's own problem, not the backend's (its message named when it sent one). */
const refusal = (endpoint: string, caller: Caller, error: QueueConflict | QueueRejected) =>
  new MessageRejected({ endpointName: endpoint, messageId: caller.requests.length === 1 ? caller.requests[0].messageId : undefined, cause: error })

/** The caller-chosen message ids of the running transactions. */
class HeldIds {
  private readonly ids = new Set<string>()

  /** Whether any of the caller's ids is in a running transaction. */
  clashes(caller: Caller): boolean {
    if (!caller.chosenIds || this.ids.size === 0) return false
    for (const request of caller.requests) if (this.ids.has(request.messageId)) return true
    return false
  }

  hold(batch: ReadonlyArray<Caller>) {
    for (const caller of batch) if (caller.chosenIds) for (const request of caller.requests) this.ids.add(request.messageId)
  }

  release(batch: ReadonlyArray<Caller>) {
    for (const caller of batch) if (caller.chosenIds) for (const request of caller.requests) this.ids.delete(request.messageId)
  }
}

export const make = (options: EnqueueBatcherOptions): EnqueueBatcher => {
  const waiting: Array<Caller> = []
  const held = new HeldIds()
  let running = 0
  /** Messages waiting, and in the running transactions. */
  let waitingMessages = 0
  let runningMessages = 0
  let closed = false

  const timeouts = CallTimeouts.make(options.retry.timeout, options.runFork)
  const call = (requests: ReadonlyArray<EnqueueRequest>): Effect.Effect<ReadonlyArray<EnqueueResult>, QueueError> =>
    retrying(options.retry, timeouts.timed(options.queue.enqueue(requests), () => timeoutError(options.retry.timeout, "Store")))

  /** One transaction for the batch; a refused batch of several callers is tried caller by caller. */
  const commit = (batch: ReadonlyArray<Caller>): Effect.Effect<void> => {
    const requests = batch.length === 1 ? batch[0].requests : batch.flatMap((caller) => caller.requests)
    return Effect.flatMap(Effect.either(call(requests)), (answer) => {
      if (Either.isRight(answer)) return Effect.sync(() => settle(batch, answer.right))
      const error = answer.left
      if (error._tag === "QueueBackendError") return Effect.sync(() => batch.forEach((caller) => caller.finish(Exit.fail(error))))
      if (batch.length > 1) return Effect.forEach(batch, (caller) => commit([caller]), { discard: true })
      return Effect.sync(() => batch[0].finish(Exit.fail(refusal(options.endpoint, batch[0], error))))
    })
  }

  const settle = (batch: ReadonlyArray<Caller>, results: ReadonlyArray<EnqueueResult>) => {
    let offset = 0
    let added = false
    for (const caller of batch) {
      const own: Array<Enqueued> = []
      for (let index = 0; index < caller.requests.length; index++) {
        const result = results[offset + index]
        if (!result.alreadyStored) added = true
        own.push(new Enqueued({ endpoint: options.endpoint, messageId: result.messageId, alreadyStored: result.alreadyStored }))
      }
      offset += caller.requests.length
      caller.finish(Exit.succeed(own))
    }
    if (added) options.committed()
  }

  /**
   * Takes the waiting callers for one transaction: whole callers, at most `MaxEnqueueBatch`
   * messages unless one caller has more, stopping before a caller whose ids a running transaction
   * holds (none is taken when the first is such a caller).
   */
  const takeBatch = (): Array<Caller> => {
    let taken = 0
    let count = 0
    while (taken < waiting.length && (taken === 0 || count + waiting[taken].requests.length <= MaxEnqueueBatch) && !held.clashes(waiting[taken])) {
      count += waiting[taken].requests.length
      taken++
    }
    waitingMessages -= count
    return waiting.splice(0, taken)
  }

  /**
   * Starts transactions while a slot is free: at once when none runs; beside running ones only
   * once as many messages wait as they carry (or a full batch), so the pipeline runs two halves
   * of the load rather than a trickle of small transactions each paying a statement and a commit.
   */
  const next = (): void => {
    while (running < MaxEnqueueInFlight && waiting.length > 0) {
      if (running > 0 && waitingMessages < Math.min(runningMessages, MaxEnqueueBatch)) return
      const before = waitingMessages
      const batch = takeBatch()
      if (batch.length === 0) return
      const messages = before - waitingMessages
      running++
      runningMessages += messages
      held.hold(batch)
      options.runFork(Effect.ensuring(
        commit(batch),
        Effect.sync(() => {
          running--
          runningMessages -= messages
          held.release(batch)
          // Interrupted (the endpoint's scope closed mid-transaction): nobody may wait without an end.
          // The error is made only then: building one captures a stack, too dear for every batch.
          const unfinished = batch.filter((caller) => caller.exit === undefined)
          if (unfinished.length > 0) {
            const closedExit = Exit.fail(new EndpointClosed({ name: options.endpoint }))
            for (const caller of unfinished) caller.finish(closedExit)
          }
          next()
        })
      ))
    }
  }

  return {
    enqueue: (requests, chosenIds) => {
      if (closed) return Exit.fail(new EndpointClosed({ name: options.endpoint }))
      const caller = new Caller(requests, chosenIds)
      waiting.push(caller)
      waitingMessages += requests.length
      next()
      return Effect.async<ReadonlyArray<Enqueued>, EnqueueQueueError>((resume) => {
        if (caller.exit !== undefined) return resume(caller.exit)
        caller.resume = resume
      })
    },
    close: () => {
      closed = true
      const left = waiting.splice(0)
      waitingMessages = 0
      for (const caller of left) caller.finish(Exit.fail(new EndpointClosed({ name: options.endpoint })))
    }
  }
}
