/**
 * The durable lane of a work-pulling controller: handshake operations (load, store, accept) one at
 * a time, in order, and confirmations beside them. Workers confirm out of order, so
 * confirmations are per job; those that pile up while one runs go out together in one
 * `confirmBatch`. Nothing waits on a confirmation, and a job is confirmed only after its accept
 * completed, so a confirmation need not wait for the store of newer jobs (the SQL work queue
 * lets the two overlap). Failed attempts (`recordFailure`) are written the same way, in batches
 * beside the stores; the retries of those jobs wait for them (`FailuresRecorded`), so once one is
 * due they go before the confirmations waiting, which nothing waits for. Dead letters are handshake operations: the
 * worker's settle is answered only once its dead letter is written. Retries, terminal errors and
 * restarts as in `internal/LaneRunner`.
 *
 * A store the producer acknowledged with its produce (`accept`) runs as the queue's
 * `storeAccepted`, one transaction, when the queue has it; otherwise as a store and then an
 * accept, each retried on its own (see `DurableLane`).
 */
import { Effect } from "effect"
import type { Fiber } from "effect"
import type { ReliableDeliveryStage } from "../Protocol/Failure.js"
import type { QueueEpoch, StoreRequest } from "../DurableQueue/DurableProducerQueue.js"
import type { DurableWorkQueueService, FailureRequest, WorkStoreResult } from "../DurableQueue/DurableWorkQueue.js"
import type { HealthReporter } from "../internal/EndpointHealth.js"
import * as LaneRunner from "./internal/LaneRunner.js"
import * as LaneStores from "./internal/LaneStores.js"
import type { WorkAction, WorkEvent } from "./WorkPullingMachine.js"
import type { QueueMetrics } from "../Observability/Metrics.js"

export type LaneAction = Extract<WorkAction, { readonly _tag: "Load" | "Store" | "Accept" | "ConfirmJobs" | "RecordFailure" | "DeadLetter" }>
type StoreAction = Extract<WorkAction, { readonly _tag: "Store" }>
/** What the lane runs: the machine's actions, and failed attempts written together. */
type LaneOp = LaneAction | { readonly _tag: "RecordFailures"; readonly requests: ReadonlyArray<FailureRequest> }

export interface WorkLaneOptions {
  readonly queue: DurableWorkQueueService
  readonly retry: LaneRunner.QueueRetryPolicy
  readonly runFork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>
  /** Told when the queue stops and starts answering. */
  readonly health?: HealthReporter | undefined
  /** Counts the queue calls' attempts and failures. */
  readonly metrics?: QueueMetrics | undefined
  /** A durable operation finished; the event goes through the controller's machine. */
  readonly completed: (event: (now: number) => WorkEvent) => void
  /** The controller's clock (failed attempts whose retry is due are written first). */
  readonly now: () => number
  /** A durable operation failed for good: terminal, or to be healed by a controller restart. */
  readonly failed: (stage: ReliableDeliveryStage, cause: unknown, terminal: boolean) => void
}

export interface WorkLane {
  readonly submit: (action: LaneAction) => void
  /** Graceful shutdown: writes the pending confirmations and lets the running call finish. */
  readonly drain: Effect.Effect<void>
}

const failureRequest = (action: Extract<LaneAction, { readonly _tag: "RecordFailure" }>): FailureRequest => ({
  messageId: action.messageId,
  attempts: action.attempts,
  lastError: action.lastError,
  notBefore: action.notBefore
})

/**
 * A busy flow always has confirmations waiting: a retry whose failure was written after them
 * waited a confirmation round trip or more (in the bench, 170 ms for a 10 ms retry). Written
 * first whenever any waited, failures went out a few at a time (about 120 transactions per 100k
 * jobs in the bench, against 15-35); so they go first once a retry is due, and are batched
 * behind the confirmations until then.
 */
const retryDue = (failures: ReadonlyArray<FailureRequest>, now: number): boolean => failures.some((failure) => failure.notBefore <= now)

export const make = (options: WorkLaneOptions): WorkLane => {
  const { queue } = options
  let epoch: QueueEpoch = 0
  // Confirmations and failed attempts are deferred work, written in batches beside the stores:
  // no store waits for them, and their order does not matter (a failure reported for a job
  // confirmed meanwhile is ignored by the queue).
  let confirmations: Array<string> = []
  let failures: Array<FailureRequest> = []
  // One transaction stays bounded however much piled up.
  const maxBatch = 1000

  const takeBatch = <A>(pending: Array<A>): [batch: Array<A>, rest: Array<A>] =>
    pending.length <= maxBatch ? [pending, []] : [pending.slice(0, maxBatch), pending.slice(maxBatch)]

  const storeAll = (items: ReadonlyArray<StoreRequest>) =>
    items.length === 1 ? Effect.map(queue.store(epoch, items[0]), (result) => [result]) : queue.storeBatch(epoch, items)

  const acceptAll = (messageIds: ReadonlyArray<string>) =>
    messageIds.length === 1 ? queue.accept(epoch, messageIds[0]) : queue.acceptBatch(epoch, messageIds)

  const stores = LaneStores.make<StoreRequest, WorkStoreResult>({ storeAll, acceptAll, completed: options.completed })

  const storeAccepted = (action: StoreAction, guard: LaneRunner.Guard): Effect.Effect<void> => {
    const fused = queue.storeAccepted
    return fused === undefined ? stores.storeThenAccept(action, guard) : stores.storeAccepted(action, fused(epoch, action.items), guard)
  }

  // The retries of these jobs wait for this write (see `WorkPullingMachine.DelayedJob`).
  const recordFailures = (requests: ReadonlyArray<FailureRequest>, guard: LaneRunner.Guard): Effect.Effect<void> =>
    guard(
      "Store",
      requests.length === 1 ? queue.recordFailure(epoch, requests[0]) : queue.recordFailureBatch(epoch, requests),
      () =>
        options.completed((now) => ({
          _tag: "FailuresRecorded",
          failures: requests.map((request) => ({ messageId: request.messageId, attempts: request.attempts })),
          now
        }))
    )

  const run = (action: LaneOp, guard: LaneRunner.Guard): Effect.Effect<void> => {
    switch (action._tag) {
      case "Load":
        return guard("Load", queue.load, (loaded) => {
          epoch = loaded.epoch
          options.completed((now) => ({ _tag: "Loaded", state: loaded.state, now }))
        })
      case "Store":
        return action.accept ? storeAccepted(action, guard) : stores.store(action, guard)
      case "Accept":
        return guard(
          "Accept",
          acceptAll(action.messageIds),
          () => options.completed((now) => ({ _tag: "AcceptCompleted", token: action.token, now }))
        )
      case "RecordFailure":
        return recordFailures([failureRequest(action)], guard)
      case "RecordFailures":
        return recordFailures(action.requests, guard)
      case "DeadLetter":
        return guard(
          "Store",
          queue.deadLetter(epoch, { messageId: action.messageId, attempts: action.attempts, lastError: action.lastError, at: action.at }),
          () =>
            options.completed((now) => ({ _tag: "DeadLetterRecorded", worker: action.worker, sessionId: action.sessionId, seq: action.seq, now }))
        )
      case "ConfirmJobs":
        return guard(
          "Confirm",
          action.messageIds.length === 1 ? queue.confirmMessage(epoch, action.messageIds[0]) : queue.confirmBatch(epoch, action.messageIds),
          () => undefined
        )
    }
  }

  const takeDeferred = (): LaneOp | undefined => {
    if (failures.length > 0 && (confirmations.length === 0 || retryDue(failures, options.now()))) {
      const [requests, rest] = takeBatch(failures)
      failures = rest
      return { _tag: "RecordFailures", requests }
    }
    if (confirmations.length === 0) return undefined
    const [messageIds, rest] = takeBatch(confirmations)
    confirmations = rest
    return { _tag: "ConfirmJobs", messageIds }
  }

  const runner = LaneRunner.make<LaneOp>({
    retry: options.retry,
    runFork: options.runFork,
    metrics: options.metrics,
    failed: options.failed,
    health: options.health,
    run,
    concurrentDeferred: true,
    hasDeferred: () => confirmations.length > 0 || failures.length > 0,
    takeDeferred
  })

  return {
    submit: (action) => {
      switch (action._tag) {
        case "ConfirmJobs":
          for (const messageId of action.messageIds) confirmations.push(messageId)
          return runner.kick()
        case "RecordFailure":
          failures.push(failureRequest(action))
          return runner.kick()
        default:
          return runner.enqueue(action)
      }
    },
    drain: runner.drain
  }
}
