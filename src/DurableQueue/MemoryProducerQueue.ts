/**
 * The in-memory reference `DurableProducerQueue`: the oracle the conformance suite and the SQL
 * queue are measured against. Every operation is one synchronous state change, so operations are
 * atomic and linearizable on the JavaScript thread.
 *
 * State survives a controller restart when the same instance is reused, like a real store, and is
 * lost with the process. Confirmed entries are compacted: their payloads are dropped, but every
 * business id ever stored keeps its seqs, shape and acceptance, so a resubmission of a confirmed
 * message still answers `alreadyStored` (with an empty payload). The id index therefore grows
 * with the number of distinct messages stored.
 */
import { Effect, Either, Layer } from "effect"
import type {
  DeadLetter,
  DeadLetterRequest,
  DurableProducerQueueService,
  InspectedEntry,
  InspectedState,
  LoadResult,
  QueueEpoch,
  StoredEntry,
  StoreOptions,
  StoreRequest,
  StoreResult
} from "./DurableProducerQueue.js"
import { DurableProducerQueue } from "./DurableProducerQueue.js"
import { makeDeadLetter } from "./internal/BacklogRules.js"
import * as Operators from "./internal/MemoryOperators.js"
import type { StoreCommand, StoredMessage, StorePlan } from "./internal/ProducerQueueRules.js"
import * as Rules from "./internal/ProducerQueueRules.js"
import type { QueueChunkedBatch, QueueConflict, QueueFenced } from "./QueueErrors.js"

interface DeadLetterRecord {
  readonly attempts: number
  readonly lastError: string
  readonly deadAt: number
}

interface State {
  epoch: number
  currentSeq: number
  /** Every business message stored and not requeued, by business id, in store (seq) order. */
  readonly messages: Map<string, StoredMessage>
  /** The entries neither confirmed nor dead-lettered, by seq (insertion order is seq order), with their owner. */
  readonly open: Map<number, string>
  readonly deadLetters: Map<string, DeadLetterRecord>
  readonly backlog: Operators.MemoryBacklog
}

/** The highest seq h such that no entry with seq <= h is stored or accepted. */
const lowMark = (state: State): number => {
  const first = state.open.keys().next()
  return first.done === true ? state.currentSeq : first.value - 1
}

const load = (state: State): LoadResult => {
  state.epoch += 1
  const unconfirmed: Array<StoredEntry> = []
  for (const [seq, owner] of state.open) {
    const message = state.messages.get(owner)!
    if (message.accepted) unconfirmed.push(message.entries.find((entry) => entry.seq === seq)!)
  }
  return { state: { currentSeq: state.currentSeq, confirmedSeq: lowMark(state), unconfirmed }, epoch: state.epoch }
}


const lookupIn = (state: State): Rules.Lookup => (messageId) => state.messages.get(messageId)

const admit = (state: State, epoch: QueueEpoch, command: StoreCommand): QueueFenced | QueueConflict | undefined =>
  Rules.validateStore(command) ?? Rules.checkEpoch(state.epoch, epoch)

const append = (state: State, command: StoreCommand, plan: StorePlan): ReadonlyArray<StoreResult> => {
  for (const message of plan.appended) {
    state.messages.set(message.messageId, message)
    for (const entry of message.entries) state.open.set(entry.seq, message.messageId)
  }
  for (const message of plan.accepts) {
    state.messages.set(message.messageId, { ...state.messages.get(message.messageId)!, accepted: true })
  }
  state.currentSeq = plan.currentSeq
  Operators.take(state.backlog, Rules.backlogIds(command))
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
    const command: StoreCommand = { _tag: "Whole", requests }
    const rejected = admit(state, epoch, command)
    if (rejected !== undefined) return Effect.fail(rejected)
    // the queue keeps its own copy of every payload
    const copies = requests.map((request) => ({ ...request, payload: request.payload.slice() }))
    const plan = (accept ? Rules.planWholeAccepted : Rules.planWhole)(state.currentSeq, lookupIn(state), copies)
    return Either.map(plan, (planned) => append(state, command, planned))
  })

const storeChunked = (
  state: State,
  epoch: QueueEpoch,
  messageId: string,
  chunks: ReadonlyArray<Uint8Array>,
  options: StoreOptions = {}
): Effect.Effect<StoreResult, QueueFenced | QueueConflict> =>
  Effect.suspend(() => {
    const command: StoreCommand = { _tag: "Chunked", messageId, chunks, options }
    const rejected = admit(state, epoch, command)
    if (rejected !== undefined) return Effect.fail(rejected)
    const copies = chunks.map((chunk) => chunk.slice())
    return Effect.succeed(append(state, command, Rules.planChunked(state.currentSeq, lookupIn(state), messageId, copies, options))[0])
  })

const accept = (
  state: State,
  epoch: QueueEpoch,
  messageIds: ReadonlyArray<string>
): Either.Either<void, QueueFenced | QueueConflict> => {
  const fenced = Rules.checkEpoch(state.epoch, epoch)
  if (fenced !== undefined) return Either.left(fenced)
  return Either.map(Rules.planAccept(lookupIn(state), messageIds), (toAccept) => {
    for (const messageId of toAccept) {
      const message = state.messages.get(messageId)!
      state.messages.set(messageId, { ...message, accepted: true })
    }
  })
}

/**
 * Confirms the accepted entries up to `upToSeq` and compacts their payloads. A message stored but
 * not accepted keeps its entries open and its payload: its producer may accept it later (then a
 * later confirm covers it), or a resubmission must get the first write back whole.
 */
const confirmUpTo = (state: State, upToSeq: number): void => {
  const confirmed = new Map<string, Set<number>>()
  for (const [seq, owner] of state.open) {
    if (seq > upToSeq) break
    if (!state.messages.get(owner)!.accepted) continue
    state.open.delete(seq)
    const seqs = confirmed.get(owner) ?? new Set()
    confirmed.set(owner, seqs.add(seq))
  }
  for (const [owner, seqs] of confirmed) {
    const message = state.messages.get(owner)!
    const entries = message.entries.map((entry) => seqs.has(entry.seq) ? Rules.compactEntry(entry) : entry)
    state.messages.set(owner, { ...message, entries, confirmed: true })
  }
}

const confirm = (
  state: State,
  epoch: QueueEpoch,
  upToSeq: number
): Either.Either<void, QueueFenced | QueueConflict> => {
  const fenced = Rules.checkEpoch(state.epoch, epoch)
  if (fenced !== undefined) return Either.left(fenced)
  return Either.map(Rules.planConfirm(state.currentSeq, lowMark(state), upToSeq), (upTo) => {
    if (upTo !== undefined) confirmUpTo(state, upTo)
  })
}

const deadLetter = (
  state: State,
  epoch: QueueEpoch,
  request: DeadLetterRequest
): Either.Either<void, QueueFenced | QueueConflict> => {
  const fenced = Rules.checkEpoch(state.epoch, epoch)
  if (fenced !== undefined) return Either.left(fenced)
  return Either.map(Rules.planDeadLetter(lookupIn(state), request), (message) => {
    if (message === undefined) return
    state.messages.set(message.messageId, { ...message, accepted: true, deadLettered: true })
    for (const entry of message.entries) state.open.delete(entry.seq)
    state.deadLetters.set(message.messageId, { attempts: request.attempts, lastError: request.lastError, deadAt: request.at })
  })
}

const deadLetterOf = (message: StoredMessage, record: DeadLetterRecord): DeadLetter => {
  const first = message.entries[0]
  return makeDeadLetter({
    messageId: message.messageId,
    seq: first.seq,
    payload: Rules.joinedPayload(message.entries),
    attempts: record.attempts,
    lastError: record.lastError,
    deadAt: record.deadAt
  }, first.at, first.trace)
}

const discardDeadLetter = (state: State, messageId: string): boolean => {
  if (!state.deadLetters.delete(messageId)) return false
  const message = state.messages.get(messageId)!
  state.messages.set(messageId, {
    ...message,
    entries: message.entries.map(Rules.compactEntry),
    deadLettered: false,
    confirmed: true
  })
  return true
}

const inspectedState = (state: State, message: StoredMessage): Exclude<InspectedState, "Backlog"> => {
  if (message.deadLettered) return "DeadLettered"
  if (!message.entries.some((entry) => state.open.has(entry.seq))) return "Confirmed"
  return message.accepted ? "Accepted" : "Stored"
}

/** Each stored message once, in seq order, as inspection shows it (chunks joined). */
function* inspected(state: State): Generator<InspectedEntry> {
  for (const message of state.messages.values()) {
    const first = message.entries[0]
    yield {
      messageId: message.messageId,
      seq: first.seq,
      state: inspectedState(state, message),
      attempts: state.deadLetters.get(message.messageId)?.attempts ?? 0,
      at: first.at,
      payload: Rules.joinedPayload(message.entries)
    }
  }
}

/** A fresh, empty in-memory queue. */
export const makeMemory: Effect.Effect<DurableProducerQueueService> = Effect.map(Operators.make, (backlog) => {
  const state: State = { epoch: 0, currentSeq: 0, messages: new Map(), open: new Map(), deadLetters: new Map(), backlog }
  return {
    load: Effect.sync(() => load(state)),
    store: (epoch, request) => Effect.map(storeWhole(state, epoch, [request], false), (results) => results[0]),
    storeChunked: (epoch, messageId, chunks, options) => storeChunked(state, epoch, messageId, chunks, options),
    storeBatch: (epoch, requests) => storeWhole(state, epoch, requests, false),
    accept: (epoch, messageId) => Effect.suspend(() => accept(state, epoch, [messageId])),
    acceptBatch: (epoch, messageIds) => Effect.suspend(() => accept(state, epoch, messageIds)),
    confirm: (epoch, upToSeq) => Effect.suspend(() => confirm(state, epoch, upToSeq)),
    storeAccepted: (epoch, requests) => storeWhole(state, epoch, requests, true),
    deadLetter: (epoch, request) => Effect.suspend(() => deadLetter(state, epoch, request)),
    ...Operators.operators({
      backlog: state.backlog,
      records: state.deadLetters,
      messages: state.messages,
      letterOf: deadLetterOf,
      discard: (messageId) => discardDeadLetter(state, messageId),
      inspected: () => inspected(state)
    })
  }
})

/** A fresh in-memory queue per layer build. */
export const layerMemory: Layer.Layer<DurableProducerQueue> = Layer.effect(DurableProducerQueue, makeMemory)
