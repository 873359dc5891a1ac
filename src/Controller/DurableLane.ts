/**
 * The durable lane of a point-to-point producer controller: handshake operations (load, store,
 * accept, dead letter) run one at a time, and confirmations coalesce to the highest watermark
 * and run beside them, one at a time, so a confirm of thousands of entries never holds up the
 * next store (a queue keeps its own writes consistent when they overlap). Backend errors are
 * retried under the queue retry policy; `QueueFenced` and `QueueConflict` are terminal; an
 * exhausted retry asks the controller to restart and reload (see `internal/LaneRunner`).
 *
 * A store the producer acknowledged with its produce (`accept`) runs as the queue's
 * `storeAccepted`, one transaction, when the queue has it and no message is chunked; otherwise
 * as a store and then an accept, each retried on its own.
 */
import { Effect } from "effect"
import type { Fiber } from "effect"
import type { ReliableDeliveryStage } from "../Protocol/Failure.js"
import type { DurableProducerQueueService, QueueEpoch, StoreOptions, StoreRequest, StoreResult } from "../DurableQueue/DurableProducerQueue.js"
import type { DurableQueueError } from "../DurableQueue/QueueErrors.js"
import type { HealthReporter } from "../internal/EndpointHealth.js"
import * as LaneRunner from "./internal/LaneRunner.js"
import * as LaneStores from "./internal/LaneStores.js"
import type { ProducerAction, ProducerEvent } from "./ProducerMachine.js"
import type { QueueMetrics } from "../Observability/Metrics.js"

export type QueueRetryPolicy = LaneRunner.QueueRetryPolicy

export type LaneAction = Extract<ProducerAction, { readonly _tag: "Load" | "Store" | "Accept" | "PersistConfirm" | "DeadLetter" }>

export interface DurableLaneOptions {
  readonly queue: DurableProducerQueueService
  readonly retry: QueueRetryPolicy
  readonly runFork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>
  /** Told when the queue stops and starts answering. */
  readonly health?: HealthReporter | undefined
  /** Counts the queue calls' attempts and failures. */
  readonly metrics?: QueueMetrics | undefined
  /** A durable operation finished; the event goes through the controller's machine. */
  readonly completed: (event: (now: number) => ProducerEvent) => void
  /** A durable operation failed for good: terminal, or to be healed by a controller restart. */
  readonly failed: (stage: ReliableDeliveryStage, cause: unknown, terminal: boolean) => void
  /** The controller's clock (TestClock in tests). */
  readonly now: () => number
}

/**
 * Confirmation watermarks are persisted once the lane pauses this long (at the latest after
 * `ConfirmMaxWaitMs`): a lost watermark only means redelivery after a crash, while a watermark
 * write between every store and accept would cost a third transaction per message.
 */
export const ConfirmIdleMs = 5
export const ConfirmMaxWaitMs = 250

export interface DurableLane {
  readonly submit: (action: LaneAction) => void
  /** Graceful shutdown: writes the pending watermark and lets the running call finish. */
  readonly drain: Effect.Effect<void>
}

type StoreAction = Extract<ProducerAction, { readonly _tag: "Store" }>
type StoreItem = StoreAction["items"][number]

/** What comes with a message's store: where it came from, its send time and trace. */
const storeOptions = (item: StoreItem): StoreOptions => ({ fromBacklog: item.fromBacklog, at: item.at, trace: item.trace })

/** A whole message's store request (one object per message: no options object spread into it). */
const wholeRequest = (item: StoreItem): StoreRequest => ({
  messageId: item.messageId,
  payload: item.chunks[0],
  fromBacklog: item.fromBacklog,
  at: item.at,
  trace: item.trace
})

export const make = (options: DurableLaneOptions): DurableLane => {
  const { queue } = options
  let epoch: QueueEpoch = 0
  let confirmUpTo: number | undefined

  const storeOne = (item: StoreItem): Effect.Effect<StoreResult, DurableQueueError> =>
    item.chunks.length > 1
      ? queue.storeChunked(epoch, item.messageId, item.chunks, storeOptions(item))
      : Effect.catchTag(
        queue.store(epoch, wholeRequest(item)),
        "QueueChunkedBatch",
        // The first write of this id is a chunked batch: recover it instead of appending.
        () => queue.storeChunked(epoch, item.messageId, item.chunks, storeOptions(item))
      )

  // No retries in here: the lane's guard retries the whole store, which first-write-wins makes safe.
  const storeAll = (items: ReadonlyArray<StoreItem>): Effect.Effect<ReadonlyArray<StoreResult>, DurableQueueError> => {
    const oneByOne = Effect.forEach(items, storeOne)
    if (items.length === 1 || items.some((item) => item.chunks.length > 1)) return oneByOne
    return Effect.catchTag(
      queue.storeBatch(epoch, items.map(wholeRequest)),
      "QueueChunkedBatch",
      () => oneByOne
    )
  }

  const acceptAll = (messageIds: ReadonlyArray<string>) =>
    messageIds.length === 1 ? queue.accept(epoch, messageIds[0]) : queue.acceptBatch(epoch, messageIds)

  const stores = LaneStores.make<StoreItem, StoreResult>({ storeAll, acceptAll, completed: options.completed })

  /** One transaction, unless a message is chunked or an id was first stored as a chunked batch. */
  const storeAccepted = (action: StoreAction, guard: LaneRunner.Guard): Effect.Effect<void> => {
    const fused = queue.storeAccepted
    if (fused === undefined || action.items.some((item) => item.chunks.length > 1)) return stores.storeThenAccept(action, guard)
    const attempt = Effect.catchTag(fused(epoch, action.items.map(wholeRequest)), "QueueChunkedBatch", () => Effect.succeed(undefined))
    return stores.storeAccepted(action, attempt, guard)
  }

  const run = (action: LaneAction, guard: LaneRunner.Guard): Effect.Effect<void> => {
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
      case "PersistConfirm":
        return guard("Confirm", queue.confirm(epoch, action.upToStoreSeq), () => undefined)
      case "DeadLetter":
        return guard(
          "Store",
          queue.deadLetter(epoch, { messageId: action.messageId, attempts: action.attempts, lastError: action.lastError, at: action.at }),
          () => options.completed((now) => ({ _tag: "DeadLetterRecorded", seq: action.seq, now }))
        )
    }
  }

  const runner = LaneRunner.make<LaneAction>({
    retry: options.retry,
    runFork: options.runFork,
    metrics: options.metrics,
    failed: options.failed,
    health: options.health,
    run,
    concurrentDeferred: true,
    deferredIdleMs: ConfirmIdleMs,
    deferredMaxWaitMs: ConfirmMaxWaitMs,
    hasDeferred: () => confirmUpTo !== undefined,
    now: options.now,
    takeDeferred: () => {
      if (confirmUpTo === undefined) return undefined
      const action: LaneAction = { _tag: "PersistConfirm", upToStoreSeq: confirmUpTo }
      confirmUpTo = undefined
      return action
    }
  })

  return {
    submit: (action) => {
      if (action._tag === "PersistConfirm") {
        confirmUpTo = Math.max(confirmUpTo ?? 0, action.upToStoreSeq)
        runner.kick()
      } else {
        runner.enqueue(action)
      }
    },
    drain: runner.drain
  }
}
