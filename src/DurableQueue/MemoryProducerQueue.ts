/**
 * The in-memory reference `DurableProducerQueue`: the oracle the conformance suite and the SQL
 * queue are measured against. Every operation is one synchronous state change, so operations are
 * atomic and linearizable on the JavaScript thread.
 *
 * State survives a controller restart when the same instance is reused, like a real store, and is
 * lost with the process. Confirmed, accepted entries are compacted: their payloads are dropped,
 * but every business id ever stored keeps its seqs, shape and acceptance, so a resubmission of a
 * confirmed message still answers `alreadyStored` (with an empty payload). The id index
 * therefore grows with the number of distinct messages stored.
 */
import { Effect, Either, Layer } from "effect"
import type {
  DurableProducerQueueService,
  DurableQueueState,
  LoadResult,
  QueueEpoch,
  StoredEntry,
  StoreRequest,
  StoreResult
} from "./DurableProducerQueue.js"
import { DurableProducerQueue } from "./DurableProducerQueue.js"
import type { StoreCommand, StoredMessage, StorePlan } from "./internal/ProducerQueueRules.js"
import * as Rules from "./internal/ProducerQueueRules.js"
import type { QueueChunkedBatch, QueueConflict, QueueFenced } from "./QueueErrors.js"

interface State {
  epoch: number
  currentSeq: number
  confirmedSeq: number
  /** Every business message ever stored, by business id. */
  readonly messages: Map<string, StoredMessage>
  /** Entries above the watermark in seq order, with the business id that owns each. */
  readonly live: Array<{ readonly entry: StoredEntry; readonly owner: string }>
}

const load = (state: State): LoadResult => {
  state.epoch += 1
  const unconfirmed = state.live
    .filter(({ owner }) => state.messages.get(owner)?.accepted === true)
    .map(({ entry }) => entry)
  const queueState: DurableQueueState = {
    currentSeq: state.currentSeq,
    confirmedSeq: state.confirmedSeq,
    unconfirmed
  }
  return { state: queueState, epoch: state.epoch }
}

const lookupIn = (state: State) => (messageId: string): StoredMessage | undefined => state.messages.get(messageId)

const admit = (state: State, epoch: QueueEpoch, command: StoreCommand): QueueFenced | QueueConflict | undefined =>
  Rules.validateStore(command) ?? Rules.checkEpoch(state.epoch, epoch)

const append = (state: State, plan: StorePlan): ReadonlyArray<StoreResult> => {
  for (const message of plan.appended) {
    state.messages.set(message.messageId, message)
    for (const entry of message.entries) state.live.push({ entry, owner: message.messageId })
  }
  for (const message of plan.accepts) {
    state.messages.set(message.messageId, { ...state.messages.get(message.messageId)!, accepted: true })
  }
  state.currentSeq = plan.currentSeq
  return plan.results
}

/** Stores whole messages (`store`, `storeBatch`), or stores and accepts them (`storeAccepted`). */
const storeWhole = (
  state: State,
  epoch: QueueEpoch,
  requests: ReadonlyArray<StoreRequest>,
  accept: boolean
): Effect.Effect<ReadonlyArray<StoreResult>, QueueFenced | QueueConflict | QueueChunkedBatch> =>
  Effect.suspend((): Effect.Effect<ReadonlyArray<StoreResult>, QueueFenced | QueueConflict | QueueChunkedBatch> => {
    const rejected = admit(state, epoch, { _tag: "Whole", requests })
    if (rejected !== undefined) return Effect.fail(rejected)
    // the queue keeps its own copy of every payload
    const copies = requests.map((request) => ({ messageId: request.messageId, payload: request.payload.slice() }))
    const plan = (accept ? Rules.planWholeAccepted : Rules.planWhole)(state.currentSeq, lookupIn(state), copies)
    return Either.map(plan, (planned) => append(state, planned))
  })

const storeChunked = (
  state: State,
  epoch: QueueEpoch,
  messageId: string,
  chunks: ReadonlyArray<Uint8Array>
): Effect.Effect<StoreResult, QueueFenced | QueueConflict> =>
  Effect.suspend(() => {
    const rejected = admit(state, epoch, { _tag: "Chunked", messageId, chunks })
    if (rejected !== undefined) return Effect.fail(rejected)
    const copies = chunks.map((chunk) => chunk.slice())
    return Effect.succeed(append(state, Rules.planChunked(state.currentSeq, lookupIn(state), messageId, copies))[0])
  })

const accept = (
  state: State,
  epoch: QueueEpoch,
  messageIds: ReadonlyArray<string>
): Either.Either<void, QueueFenced | QueueConflict> => {
  const fenced = Rules.checkEpoch(state.epoch, epoch)
  if (fenced !== undefined) return Either.left(fenced)
  return Either.map(Rules.planAccept((id) => state.messages.get(id), messageIds), (toAccept) => {
    for (const messageId of toAccept) {
      const message = state.messages.get(messageId)!
      state.messages.set(messageId, { ...message, accepted: true })
    }
  })
}

/**
 * Drops the live entries at or below the new watermark and compacts the payloads of the accepted
 * ones. A message stored but never accepted keeps its payload: its producer stopped before
 * accepting it, and the resubmission that follows must get the first write back whole.
 */
const compactTo = (state: State, upToSeq: number): void => {
  let count = 0
  while (count < state.live.length && state.live[count].entry.seq <= upToSeq) count += 1
  const owners = new Set(state.live.splice(0, count).map(({ owner }) => owner))
  for (const owner of owners) {
    const message = state.messages.get(owner)!
    if (!message.accepted) continue
    const entries = message.entries.map((entry) => entry.seq <= upToSeq ? Rules.compactEntry(entry) : entry)
    state.messages.set(owner, { ...message, entries })
  }
}

const confirm = (
  state: State,
  epoch: QueueEpoch,
  upToSeq: number
): Either.Either<void, QueueFenced | QueueConflict> => {
  const fenced = Rules.checkEpoch(state.epoch, epoch)
  if (fenced !== undefined) return Either.left(fenced)
  return Either.map(Rules.planConfirm(state.currentSeq, state.confirmedSeq, upToSeq), (watermark) => {
    if (watermark === undefined) return
    state.confirmedSeq = watermark
    compactTo(state, watermark)
  })
}

/** A fresh, empty in-memory queue. */
export const makeMemory: Effect.Effect<DurableProducerQueueService> = Effect.sync(() => {
  const state: State = { epoch: 0, currentSeq: 0, confirmedSeq: 0, messages: new Map(), live: [] }
  return {
    load: Effect.sync(() => load(state)),
    store: (epoch, request) => Effect.map(storeWhole(state, epoch, [request], false), (results) => results[0]),
    storeChunked: (epoch, messageId, chunks) => storeChunked(state, epoch, messageId, chunks),
    storeBatch: (epoch, requests) => storeWhole(state, epoch, requests, false),
    accept: (epoch, messageId) => Effect.suspend(() => accept(state, epoch, [messageId])),
    acceptBatch: (epoch, messageIds) => Effect.suspend(() => accept(state, epoch, messageIds)),
    confirm: (epoch, upToSeq) => Effect.suspend(() => confirm(state, epoch, upToSeq)),
    storeAccepted: (epoch, requests) => storeWhole(state, epoch, requests, true)
  }
})

/** A fresh in-memory queue per layer build. */
export const layerMemory: Layer.Layer<DurableProducerQueue> = Layer.effect(DurableProducerQueue, makeMemory)
