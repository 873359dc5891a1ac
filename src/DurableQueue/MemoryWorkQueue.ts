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
import type {
  DeadLetter,
  DeadLetterRequest,
  InspectedEntry,
  QueueEpoch,
  StoreRequest
} from "./DurableProducerQueue.js"
import type { DurableWorkQueueService, FailureRequest, WorkLoadResult, WorkStoreResult } from "./DurableWorkQueue.js"
import { DurableWorkQueue } from "./DurableWorkQueue.js"
import { makeDeadLetter } from "./internal/BacklogRules.js"
import * as Operators from "./internal/MemoryOperators.js"
import { checkEpoch, compactEntry, makeEntry } from "./internal/ProducerQueueRules.js"
import type { StoredJob } from "./internal/WorkQueueRules.js"
import * as Rules from "./internal/WorkQueueRules.js"
import type { QueueConflict, QueueFenced } from "./QueueErrors.js"

interface DeadLetterRecord {
  readonly lastError: string
  readonly deadAt: number
}

interface State {
  epoch: number
  currentSeq: number
  /** Every job stored and not requeued, by message id, in store (seq) order. */
  readonly jobs: Map<string, StoredJob>
  /** Jobs neither confirmed nor dead-lettered, by seq; a Map iterates in insertion order, which is seq order. */
  readonly open: Map<number, string>
  readonly deadLetters: Map<string, DeadLetterRecord>
  readonly backlog: Operators.MemoryBacklog
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
  const copies = requests.map((request) => ({ ...request, payload: request.payload.slice() }))
  const plan = (accept ? Rules.planStoreAccepted : Rules.planStore)(state.currentSeq, lookupIn(state), copies)
  for (const job of plan.appended) {
    state.jobs.set(job.entry.messageId, job)
    state.open.set(job.entry.seq, job.entry.messageId)
  }
  for (const job of plan.accepts) state.jobs.set(job.entry.messageId, { ...job, state: "Accepted" })
  state.currentSeq = plan.currentSeq
  Operators.take(state.backlog, requests.filter((request) => request.fromBacklog === true).map((request) => request.messageId))
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

const recordFailures = (
  state: State,
  epoch: QueueEpoch,
  requests: ReadonlyArray<FailureRequest>
): Either.Either<void, QueueFenced | QueueConflict> => {
  const fenced = checkEpoch(state.epoch, epoch)
  if (fenced !== undefined) return Either.left(fenced)
  return Either.map(Rules.planFailures(lookupIn(state), requests), (failures) => {
    for (const { attempts, messageId, notBefore } of failures) {
      const { entry } = state.jobs.get(messageId)!
      const updated = makeEntry(entry.seq, entry.messageId, entry.payload, undefined, { ...entry, attempts, notBefore })
      state.jobs.set(messageId, { entry: updated, state: "Accepted" })
    }
  })
}

const deadLetter = (
  state: State,
  epoch: QueueEpoch,
  request: DeadLetterRequest
): Either.Either<void, QueueFenced | QueueConflict> => {
  const fenced = checkEpoch(state.epoch, epoch)
  if (fenced !== undefined) return Either.left(fenced)
  return Either.map(Rules.planDeadLetter(lookupIn(state), request), (job) => {
    if (job === undefined) return
    const { entry } = job
    const updated = makeEntry(entry.seq, entry.messageId, entry.payload, undefined, { ...entry, attempts: request.attempts })
    state.jobs.set(request.messageId, { entry: updated, state: "DeadLettered" })
    state.open.delete(entry.seq)
    state.deadLetters.set(request.messageId, { lastError: request.lastError, deadAt: request.at })
  })
}

const deadLetterOf = ({ entry }: StoredJob, record: DeadLetterRecord): DeadLetter =>
  makeDeadLetter({
    messageId: entry.messageId,
    seq: entry.seq,
    payload: entry.payload,
    attempts: entry.attempts ?? 0,
    lastError: record.lastError,
    deadAt: record.deadAt
  }, entry.at, entry.trace)

const discardDeadLetter = (state: State, messageId: string): boolean => {
  if (!state.deadLetters.delete(messageId)) return false
  const job = state.jobs.get(messageId)!
  state.jobs.set(messageId, { entry: compactEntry(job.entry), state: "Confirmed" })
  return true
}

/** Each job in seq order, as inspection shows it. */
function* inspected(state: State): Generator<InspectedEntry> {
  for (const { entry, state: jobState } of state.jobs.values()) {
    yield { messageId: entry.messageId, seq: entry.seq, state: jobState, attempts: entry.attempts ?? 0, at: entry.at, payload: entry.payload }
  }
}

/** A fresh, empty in-memory work queue. */
export const makeWorkMemory: Effect.Effect<DurableWorkQueueService> = Effect.map(Operators.make, (backlog) => {
  const state: State = { epoch: 0, currentSeq: 0, jobs: new Map(), open: new Map(), deadLetters: new Map(), backlog }
  return {
    load: Effect.sync(() => load(state)),
    store: (epoch, request) => Effect.map(Effect.suspend(() => store(state, epoch, [request], false)), (results) => results[0]),
    storeBatch: (epoch, requests) => Effect.suspend(() => store(state, epoch, requests, false)),
    accept: (epoch, messageId) => Effect.suspend(() => accept(state, epoch, [messageId])),
    acceptBatch: (epoch, messageIds) => Effect.suspend(() => accept(state, epoch, messageIds)),
    confirmMessage: (epoch, messageId) => Effect.suspend(() => confirm(state, epoch, [messageId])),
    confirmBatch: (epoch, messageIds) => Effect.suspend(() => confirm(state, epoch, messageIds)),
    storeAccepted: (epoch, requests) => Effect.suspend(() => store(state, epoch, requests, true)),
    recordFailure: (epoch, request) => Effect.suspend(() => recordFailures(state, epoch, [request])),
    recordFailureBatch: (epoch, requests) => Effect.suspend(() => recordFailures(state, epoch, requests)),
    deadLetter: (epoch, request) => Effect.suspend(() => deadLetter(state, epoch, request)),
    ...Operators.operators({
      backlog: state.backlog,
      records: state.deadLetters,
      messages: state.jobs,
      letterOf: deadLetterOf,
      discard: (messageId) => discardDeadLetter(state, messageId),
      inspected: () => inspected(state)
    })
  }
})

/** A fresh in-memory work queue per layer build. */
export const layerWorkMemory: Layer.Layer<DurableWorkQueue> = Layer.effect(DurableWorkQueue, makeWorkMemory)
