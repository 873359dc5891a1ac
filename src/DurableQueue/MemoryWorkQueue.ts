/**
 * The in-memory reference `DurableWorkQueue`: the oracle for the work queue conformance suite.
 * Every operation is one synchronous state change, so operations are atomic and linearizable on
 * the JavaScript thread.
 *
 * Compaction: a job that is both accepted and confirmed leaves the pending set and drops its
 * payload, but its id is kept as a tombstone, so a repeated `confirmMessage` stays a no-op and a
 * resubmission answers `alreadyStored` with `confirmed: true` (and an empty payload) instead of
 * being dispatched again. The tombstone index grows with the number of distinct jobs stored.
 */
import { Effect, Either, Layer } from "effect"
import type { QueueEpoch, StoreRequest } from "./DurableProducerQueue.js"
import type { DurableWorkQueueService, WorkLoadResult, WorkStoreResult } from "./DurableWorkQueue.js"
import { DurableWorkQueue } from "./DurableWorkQueue.js"
import { checkEpoch, compactEntry } from "./internal/ProducerQueueRules.js"
import type { StoredJob } from "./internal/WorkQueueRules.js"
import * as Rules from "./internal/WorkQueueRules.js"
import type { QueueConflict, QueueFenced } from "./QueueErrors.js"

interface State {
  epoch: number
  currentSeq: number
  /** Every job ever stored, by message id. */
  readonly jobs: Map<string, StoredJob>
  /** Jobs not confirmed yet, by seq; a Map iterates in insertion order, which is seq order. */
  readonly open: Map<number, string>
}

const lookupIn = (state: State) => (messageId: string): StoredJob | undefined => state.jobs.get(messageId)

const load = (state: State): WorkLoadResult => {
  state.epoch += 1
  const pending = []
  for (const messageId of state.open.values()) {
    const job = state.jobs.get(messageId)!
    if (job.state === "Accepted") pending.push(job.entry)
  }
  return { state: { currentSeq: state.currentSeq, pending }, epoch: state.epoch }
}

/** Stores jobs (`store`, `storeBatch`), or stores and accepts them (`storeAccepted`). */
const store = (
  state: State,
  epoch: QueueEpoch,
  requests: ReadonlyArray<StoreRequest>,
  accept: boolean
): Either.Either<ReadonlyArray<WorkStoreResult>, QueueFenced | QueueConflict> => {
  const rejected = Rules.validateStore(requests) ?? checkEpoch(state.epoch, epoch)
  if (rejected !== undefined) return Either.left(rejected)
  // the queue keeps its own copy of every payload
  const copies = requests.map((request) => ({ messageId: request.messageId, payload: request.payload.slice() }))
  const plan = (accept ? Rules.planStoreAccepted : Rules.planStore)(state.currentSeq, lookupIn(state), copies)
  for (const job of plan.appended) {
    state.jobs.set(job.entry.messageId, job)
    state.open.set(job.entry.seq, job.entry.messageId)
  }
  for (const job of plan.accepts) state.jobs.set(job.entry.messageId, { ...job, state: "Accepted" })
  state.currentSeq = plan.currentSeq
  return Either.right(plan.results)
}

const accept = (
  state: State,
  epoch: QueueEpoch,
  messageIds: ReadonlyArray<string>
): Either.Either<void, QueueFenced | QueueConflict> => {
  const fenced = checkEpoch(state.epoch, epoch)
  if (fenced !== undefined) return Either.left(fenced)
  return Either.map(Rules.planAccept(lookupIn(state), messageIds), (toAccept) => {
    for (const messageId of toAccept) {
      const job = state.jobs.get(messageId)!
      state.jobs.set(messageId, { ...job, state: "Accepted" })
    }
  })
}

const confirm = (
  state: State,
  epoch: QueueEpoch,
  messageIds: ReadonlyArray<string>
): Either.Either<void, QueueFenced | QueueConflict> => {
  const fenced = checkEpoch(state.epoch, epoch)
  if (fenced !== undefined) return Either.left(fenced)
  return Either.map(Rules.planConfirm(lookupIn(state), messageIds), (toConfirm) => {
    for (const messageId of toConfirm) {
      const job = state.jobs.get(messageId)!
      state.jobs.set(messageId, { entry: compactEntry(job.entry), state: "Confirmed" })
      state.open.delete(job.entry.seq)
    }
  })
}

/** A fresh, empty in-memory work queue. */
export const makeWorkMemory: Effect.Effect<DurableWorkQueueService> = Effect.sync(() => {
  const state: State = { epoch: 0, currentSeq: 0, jobs: new Map(), open: new Map() }
  return {
    load: Effect.sync(() => load(state)),
    store: (epoch, request) => Effect.map(Effect.suspend(() => store(state, epoch, [request], false)), (results) => results[0]),
    storeBatch: (epoch, requests) => Effect.suspend(() => store(state, epoch, requests, false)),
    accept: (epoch, messageId) => Effect.suspend(() => accept(state, epoch, [messageId])),
    acceptBatch: (epoch, messageIds) => Effect.suspend(() => accept(state, epoch, messageIds)),
    confirmMessage: (epoch, messageId) => Effect.suspend(() => confirm(state, epoch, [messageId])),
    confirmBatch: (epoch, messageIds) => Effect.suspend(() => confirm(state, epoch, messageIds)),
    storeAccepted: (epoch, requests) => Effect.suspend(() => store(state, epoch, requests, true))
  }
})

/** A fresh in-memory work queue per layer build. */
export const layerWorkMemory: Layer.Layer<DurableWorkQueue> = Layer.effect(DurableWorkQueue, makeWorkMemory)
