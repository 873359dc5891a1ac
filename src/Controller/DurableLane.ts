/**
 * The durable lane of a producer controller: durable operations run one at a time, handshake
 * operations (load, store, accept) before confirmations, and confirmations coalesce to the
 * highest watermark. Backend errors are retried under the queue retry policy; `QueueFenced` and
 * `QueueConflict` are terminal; an exhausted retry asks the controller to restart and reload.
 */
import { Effect, Schedule } from "effect"
import type { Duration, Fiber } from "effect"
import type { ReliableDeliveryStage } from "../Protocol/Failure.js"
import type { DurableProducerQueueService, QueueEpoch, StoreResult } from "../DurableQueue/DurableProducerQueue.js"
import { isTerminal } from "../DurableQueue/QueueErrors.js"
import type { DurableQueueError } from "../DurableQueue/QueueErrors.js"
import type { ProducerAction, ProducerEvent } from "./ProducerMachine.js"

export interface QueueRetryPolicy {
  readonly attempts: number
  readonly interval: Duration.Duration
}

export type LaneAction = Extract<ProducerAction, { readonly _tag: "Load" | "Store" | "Accept" | "PersistConfirm" }>

export interface DurableLaneOptions {
  readonly queue: DurableProducerQueueService
  readonly retry: QueueRetryPolicy
  readonly runFork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>
  /** A durable operation finished; the event goes through the controller's machine. */
  readonly completed: (event: (now: number) => ProducerEvent) => void
  /** A durable operation failed for good: terminal, or to be healed by a controller restart. */
  readonly failed: (stage: ReliableDeliveryStage, cause: unknown, terminal: boolean) => void
}

export interface DurableLane {
  readonly submit: (action: LaneAction) => void
}

type StoreItem = Extract<ProducerAction, { readonly _tag: "Store" }>["items"][number]

export const make = (options: DurableLaneOptions): DurableLane => {
  const { queue } = options
  let epoch: QueueEpoch = 0
  const handshakeOps: Array<LaneAction> = []
  let confirmUpTo: number | undefined
  let busy = false
  let dead = false

  const retrying = <A>(effect: Effect.Effect<A, DurableQueueError>) =>
    Effect.retry(effect, {
      schedule: Schedule.spaced(options.retry.interval),
      times: options.retry.attempts - 1,
      while: (error) => !isTerminal(error) && error._tag !== "QueueChunkedBatch"
    })

  const storeOne = (item: StoreItem): Effect.Effect<StoreResult, DurableQueueError> =>
    item.chunks.length > 1
      ? queue.storeChunked(epoch, item.messageId, item.chunks)
      : Effect.catchTag(
        queue.store(epoch, { messageId: item.messageId, payload: item.chunks[0] }),
        "QueueChunkedBatch",
        // The first write of this id is a chunked batch: recover it instead of appending.
        () => queue.storeChunked(epoch, item.messageId, item.chunks)
      )

  const storeAll = (items: ReadonlyArray<StoreItem>): Effect.Effect<ReadonlyArray<StoreResult>, DurableQueueError> => {
    const oneByOne = Effect.forEach(items, (item) => retrying(storeOne(item)))
    if (items.length === 1 || items.some((item) => item.chunks.length > 1)) return oneByOne
    return Effect.catchTag(
      retrying(queue.storeBatch(epoch, items.map((item) => ({ messageId: item.messageId, payload: item.chunks[0] })))),
      "QueueChunkedBatch",
      () => oneByOne
    )
  }

  const guarded = <A>(stage: ReliableDeliveryStage, effect: Effect.Effect<A, DurableQueueError>, onDone: (a: A) => void) =>
    Effect.matchEffect(retrying(effect), {
      onSuccess: (value) => Effect.sync(() => onDone(value)),
      onFailure: (error) =>
        Effect.sync(() => {
          dead = true
          // A failed load cannot be healed by restarting into another load: it is reported.
          options.failed(stage, error, stage === "Load" || isTerminal(error))
        })
    })

  const run = (action: LaneAction): Effect.Effect<void> => {
    switch (action._tag) {
      case "Load":
        return guarded("Load", queue.load, (loaded) => {
          epoch = loaded.epoch
          options.completed((now) => ({ _tag: "Loaded", state: loaded.state, now }))
        })
      case "Store":
        return guarded("Store", storeAll(action.items), (results) =>
          options.completed((now) => ({ _tag: "StoreCompleted", token: action.token, results, now })))
      case "Accept":
        return guarded(
          "Accept",
          action.messageIds.length === 1 ? queue.accept(epoch, action.messageIds[0]) : queue.acceptBatch(epoch, action.messageIds),
          () => options.completed((now) => ({ _tag: "AcceptCompleted", token: action.token, now }))
        )
      case "PersistConfirm":
        return guarded("Confirm", queue.confirm(epoch, action.upToStoreSeq), () => undefined)
    }
  }

  const next = (): void => {
    if (busy || dead) return
    let action = handshakeOps.shift()
    if (action === undefined && confirmUpTo !== undefined) {
      action = { _tag: "PersistConfirm", upToStoreSeq: confirmUpTo }
      confirmUpTo = undefined
    }
    if (action === undefined) return
    busy = true
    options.runFork(Effect.ensuring(
      run(action),
      Effect.sync(() => {
        busy = false
        next()
      })
    ))
  }

  return {
    submit: (action) => {
      if (action._tag === "PersistConfirm") {
        confirmUpTo = Math.max(confirmUpTo ?? 0, action.upToStoreSeq)
      } else {
        handshakeOps.push(action)
      }
      next()
    }
  }
}
