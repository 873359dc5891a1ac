/**
 * The rules of the point-to-point durable queue as pure functions over plain data, shared by the
 * in-memory queue and the SQL queue so both decide every request the same way: fencing,
 * first-write-wins, chunked batches, acceptance, confirmation and dead letters.
 */
import { Either } from "effect"
import { chunkMessageId, isReservedMessageId } from "../../Protocol/ChunkId.js"
import type { ChunkMark } from "../../Protocol/WireMessage.js"
import type { DeadLetterRequest, StoredEntry, StoreOptions, StoreRequest, StoreResult } from "../DurableProducerQueue.js"
import { QueueChunkedBatch, QueueConflict, QueueFenced } from "../QueueErrors.js"

/** Everything the queue keeps about one business message. */
export interface StoredMessage {
  /** The business message id. */
  readonly messageId: string
  /** One entry for a whole message, one per chunk (ascending seq) for a chunked batch. */
  readonly entries: ReadonlyArray<StoredEntry>
  readonly chunked: boolean
  /** Accepted (or dead-lettered): a store answers `accepted`, an accept does nothing. */
  readonly accepted: boolean
  readonly deadLettered: boolean
  /** At least one entry is confirmed (its payload may be compacted). */
  readonly confirmed: boolean
}

/** What to store: whole messages (one `store` or a `storeBatch`), or one chunked batch. */
export type StoreCommand =
  | { readonly _tag: "Whole"; readonly requests: ReadonlyArray<StoreRequest> }
  | {
    readonly _tag: "Chunked"
    readonly messageId: string
    readonly chunks: ReadonlyArray<Uint8Array>
    readonly options?: StoreOptions | undefined
  }

export interface StorePlan {
  /** One result per request, in request order (one for a chunked batch). */
  readonly results: ReadonlyArray<StoreResult>
  /** The messages to append, in seq order. */
  readonly appended: ReadonlyArray<StoredMessage>
  /** The highest seq once the messages are appended. */
  readonly currentSeq: number
  /** Messages stored before, not accepted yet, that this plan accepts (`storeAccepted`). */
  readonly accepts: ReadonlyArray<StoredMessage>
}

export type Lookup = (messageId: string) => StoredMessage | undefined

const emptyPayload = new Uint8Array(0)

/** What an entry may carry beside its seq, id, payload and chunk mark. */
export interface EntryDetails {
  readonly at?: number | undefined
  readonly trace?: string | undefined
  readonly attempts?: number | undefined
  readonly notBefore?: number | undefined
}

/**
 * Builds an entry. Absent details (and a whole message's chunk mark) get no key at all, so
 * entries compare structurally whatever backend built them.
 */
export const makeEntry = (
  seq: number,
  messageId: string,
  payload: Uint8Array,
  chunk?: ChunkMark | undefined,
  details?: EntryDetails | undefined
): StoredEntry => {
  const entry: { -readonly [K in keyof StoredEntry]: StoredEntry[K] } = { seq, messageId, payload }
  if (chunk !== undefined) entry.chunk = chunk
  if (details === undefined) return entry
  if (details.at !== undefined) entry.at = details.at
  if (details.trace !== undefined) entry.trace = details.trace
  if (details.attempts !== undefined && details.attempts > 0) entry.attempts = details.attempts
  if (details.notBefore !== undefined) entry.notBefore = details.notBefore
  return entry
}

/** The entry of chunk `index` of `count` of a business message. */
export const chunkEntry = (
  seq: number,
  messageId: string,
  index: number,
  count: number,
  payload: Uint8Array,
  details?: EntryDetails | undefined
) => makeEntry(seq, chunkMessageId(messageId, index, count), payload, { first: index === 0, last: index === count - 1 }, details)

/** The same entry with its payload dropped (compaction of confirmed entries). */
export const compactEntry = (entry: StoredEntry): StoredEntry => ({ ...entry, payload: emptyPayload })

/** The whole payload of a message: its one entry's, or its chunks' joined in order. */
export const joinedPayload = (entries: ReadonlyArray<StoredEntry>): Uint8Array => {
  if (entries.length === 1) return entries[0].payload
  const joined = new Uint8Array(entries.reduce((total, entry) => total + entry.payload.byteLength, 0))
  let offset = 0
  for (const entry of entries) {
    joined.set(entry.payload, offset)
    offset += entry.payload.byteLength
  }
  return joined
}

/**
 * Fencing: an epoch older than the queue's is fenced; one newer than any `load` returned was
 * never issued, which is an integrity violation.
 */
export const checkEpoch = (currentEpoch: number, epoch: number): QueueFenced | QueueConflict | undefined => {
  if (epoch === currentEpoch && currentEpoch > 0) return undefined
  if (epoch < currentEpoch) return new QueueFenced({ epoch, currentEpoch })
  return new QueueConflict({ message: `epoch ${epoch} was never issued (current epoch ${currentEpoch})` })
}

const checkMessageId = (messageId: string): QueueConflict | undefined => {
  if (messageId.length === 0) return new QueueConflict({ message: "message id must not be empty" })
  if (isReservedMessageId(messageId)) {
    return new QueueConflict({ message: `message id ${messageId} uses the reserved chunk id prefix` })
  }
  return undefined
}

/** A time in milliseconds since the Unix epoch, as the queues keep it: a non-negative safe integer. */
export const isTime = (value: number): boolean => Number.isSafeInteger(value) && value >= 0

/** Checks a request's `at` and `trace`. */
export const checkDetails = (messageId: string, options: StoreOptions): QueueConflict | undefined => {
  if (options.at !== undefined && !isTime(options.at)) {
    return new QueueConflict({ message: `message ${messageId}: at must be milliseconds since the Unix epoch, got ${options.at}` })
  }
  if (options.trace !== undefined && typeof options.trace !== "string") {
    return new QueueConflict({ message: `message ${messageId}: trace must be a string` })
  }
  return undefined
}

/** Input checks that do not depend on the queue's state. */
export const validateStore = (command: StoreCommand): QueueConflict | undefined => {
  if (command._tag === "Chunked") {
    if (command.chunks.length === 0) {
      return new QueueConflict({ message: `chunked batch ${command.messageId} has no chunks` })
    }
    return checkMessageId(command.messageId) ?? checkDetails(command.messageId, command.options ?? {})
  }
  for (const request of command.requests) {
    const error = checkMessageId(request.messageId) ?? checkDetails(request.messageId, request)
    if (error !== undefined) return error
  }
  return undefined
}

/** The ids a store command takes out of the backlog (its `fromBacklog` requests'). */
export const backlogIds = (command: StoreCommand): ReadonlyArray<string> =>
  command._tag === "Chunked"
    ? (command.options?.fromBacklog === true ? [command.messageId] : [])
    : distinct(command.requests.filter((request) => request.fromBacklog === true).map((request) => request.messageId))

/** The business ids a store command touches, without duplicates. */
export const commandIds = (command: StoreCommand): ReadonlyArray<string> =>
  command._tag === "Chunked" ? [command.messageId] : distinct(command.requests.map((request) => request.messageId))

export const distinct = (ids: ReadonlyArray<string>): ReadonlyArray<string> => Array.from(new Set(ids))

const existingResult = (message: StoredMessage): StoreResult => ({
  messageId: message.messageId,
  entries: message.entries,
  alreadyStored: true,
  accepted: message.accepted,
  deadLettered: message.deadLettered
})

const newResult = (message: StoredMessage): StoreResult => ({
  messageId: message.messageId,
  entries: message.entries,
  alreadyStored: false,
  accepted: false,
  deadLettered: false
})

const newMessage = (messageId: string, entries: ReadonlyArray<StoredEntry>, chunked: boolean, accepted: boolean): StoredMessage => ({
  messageId,
  entries,
  chunked,
  accepted,
  deadLettered: false,
  confirmed: false
})

const detailsOf = (options: StoreOptions): EntryDetails | undefined =>
  options.at === undefined && options.trace === undefined ? undefined : { at: options.at, trace: options.trace }

/** Plans whole-message stores (`store`, `storeBatch`). */
export const planWhole = (
  currentSeq: number,
  lookup: Lookup,
  requests: ReadonlyArray<StoreRequest>
): Either.Either<StorePlan, QueueChunkedBatch> => {
  const pending = new Map<string, StoredMessage>()
  const results: Array<StoreResult> = []
  const appended: Array<StoredMessage> = []
  let seq = currentSeq
  for (const request of requests) {
    const found = pending.get(request.messageId) ?? lookup(request.messageId)
    if (found !== undefined) {
      if (found.chunked) return Either.left(new QueueChunkedBatch({ messageId: request.messageId }))
      results.push(existingResult(found))
      continue
    }
    seq += 1
    const message = newMessage(
      request.messageId,
      [makeEntry(seq, request.messageId, request.payload, undefined, detailsOf(request))],
      false,
      false
    )
    pending.set(request.messageId, message)
    appended.push(message)
    results.push(newResult(message))
  }
  return Either.right({ results, appended, currentSeq: seq, accepts: [] })
}

/**
 * Plans `storeAccepted`: each request as `store` then `accept`, one after the other. A result is
 * the store's (so `accepted` says whether the message was accepted before); new messages are
 * appended accepted, stored but unaccepted ones are accepted, and a chunked batch's id fails the
 * whole call with `QueueChunkedBatch`.
 */
export const planWholeAccepted = (
  currentSeq: number,
  lookup: Lookup,
  requests: ReadonlyArray<StoreRequest>
): Either.Either<StorePlan, QueueChunkedBatch> => {
  const seen = new Map<string, StoredMessage>()
  const results: Array<StoreResult> = []
  const appended: Array<StoredMessage> = []
  const accepts: Array<StoredMessage> = []
  let seq = currentSeq
  for (const request of requests) {
    const found = seen.get(request.messageId) ?? lookup(request.messageId)
    if (found !== undefined) {
      if (found.chunked) return Either.left(new QueueChunkedBatch({ messageId: request.messageId }))
      results.push(existingResult(found))
      if (!found.accepted) {
        accepts.push(found)
        seen.set(request.messageId, { ...found, accepted: true })
      }
      continue
    }
    seq += 1
    const entries = [makeEntry(seq, request.messageId, request.payload, undefined, detailsOf(request))]
    results.push(newResult(newMessage(request.messageId, entries, false, false)))
    const message = newMessage(request.messageId, entries, false, true)
    seen.set(request.messageId, message)
    appended.push(message)
  }
  return Either.right({ results, appended, currentSeq: seq, accepts })
}

/**
 * The results `planWhole` and `planWholeAccepted` give when every request's id is new and no two
 * are the same: each appended at the next seq from `currentSeq`. For a store that wrote its rows
 * without a plan.
 */
export const newWholeResults = (currentSeq: number, requests: ReadonlyArray<StoreRequest>): ReadonlyArray<StoreResult> => {
  const results = new Array<StoreResult>(requests.length)
  for (let index = 0; index < requests.length; index++) {
    const request = requests[index]
    // What makeEntry builds from detailsOf(request), without that object.
    const entry: { -readonly [K in keyof StoredEntry]: StoredEntry[K] } = {
      seq: currentSeq + index + 1,
      messageId: request.messageId,
      payload: request.payload
    }
    if (request.at !== undefined) entry.at = request.at
    if (request.trace !== undefined) entry.trace = request.trace
    results[index] = {
      messageId: request.messageId,
      entries: [entry],
      alreadyStored: false,
      accepted: false,
      deadLettered: false
    }
  }
  return results
}

/** Plans one chunked batch (`storeChunked`): an id stored before returns its first write. */
export const planChunked = (
  currentSeq: number,
  lookup: Lookup,
  messageId: string,
  chunks: ReadonlyArray<Uint8Array>,
  options: StoreOptions = {}
): StorePlan => {
  const found = lookup(messageId)
  if (found !== undefined) return { results: [existingResult(found)], appended: [], currentSeq, accepts: [] }
  const count = chunks.length
  const details = detailsOf(options)
  const message = newMessage(
    messageId,
    chunks.map((payload, index) => chunkEntry(currentSeq + 1 + index, messageId, index, count, payload, details)),
    true,
    false
  )
  return { results: [newResult(message)], appended: [message], currentSeq: currentSeq + count, accepts: [] }
}

/**
 * Decides a store against the messages already stored: the first write of a business id wins, a
 * plain store of a chunked batch's id is `QueueChunkedBatch` (for the whole command, before
 * anything is appended), and new messages take the next seqs in request order.
 */
export const planStore = (
  currentSeq: number,
  lookup: Lookup,
  command: StoreCommand
): Either.Either<StorePlan, QueueChunkedBatch> =>
  command._tag === "Chunked"
    ? Either.right(planChunked(currentSeq, lookup, command.messageId, command.chunks, command.options))
    : planWhole(currentSeq, lookup, command.requests)

/** Decides an accept: every id must be stored; returns the ids not accepted yet. */
export const planAccept = (
  lookup: Lookup,
  messageIds: ReadonlyArray<string>
): Either.Either<ReadonlyArray<string>, QueueConflict> => {
  const toAccept: Array<string> = []
  for (const messageId of distinct(messageIds)) {
    const found = lookup(messageId)
    if (found === undefined) {
      return Either.left(new QueueConflict({ message: `cannot accept unknown message ${messageId}` }))
    }
    if (!found.accepted) toAccept.push(messageId)
  }
  return Either.right(toAccept)
}

/**
 * Decides a confirm: returns `upToSeq` when it may confirm something, undefined when it cannot
 * (every entry at or below the low mark is finished already).
 */
export const planConfirm = (
  currentSeq: number,
  lowMark: number,
  upToSeq: number
): Either.Either<number | undefined, QueueConflict> => {
  if (!Number.isSafeInteger(upToSeq) || upToSeq < 0) {
    return Either.left(new QueueConflict({ message: `cannot confirm up to invalid seq ${upToSeq}` }))
  }
  if (upToSeq > currentSeq) {
    return Either.left(
      new QueueConflict({ message: `cannot confirm up to seq ${upToSeq}: the highest stored seq is ${currentSeq}` })
    )
  }
  return Either.right(upToSeq > lowMark ? upToSeq : undefined)
}

/** Checks a dead-letter request's fields. */
export const checkDeadLetterRequest = (request: DeadLetterRequest): QueueConflict | undefined => {
  const problem = !Number.isSafeInteger(request.attempts) || request.attempts < 0
    ? `attempts must be a non-negative integer, got ${request.attempts}`
    : typeof request.lastError !== "string"
    ? "lastError must be a string"
    : !isTime(request.at)
    ? `at must be milliseconds since the Unix epoch, got ${request.at}`
    : undefined
  return problem === undefined ? undefined : new QueueConflict({ message: `dead letter ${request.messageId}: ${problem}` })
}

/**
 * Decides a dead letter: the stored message to mark, or undefined when it is one already. An
 * unknown id, or a message with a confirmed entry (whose payload may be gone), is a conflict.
 */
export const planDeadLetter = (
  lookup: Lookup,
  request: DeadLetterRequest
): Either.Either<StoredMessage | undefined, QueueConflict> => {
  const invalid = checkDeadLetterRequest(request)
  if (invalid !== undefined) return Either.left(invalid)
  const found = lookup(request.messageId)
  if (found === undefined) {
    return Either.left(new QueueConflict({ message: `cannot dead-letter unknown message ${request.messageId}` }))
  }
  if (found.deadLettered) return Either.right(undefined)
  if (found.confirmed) {
    return Either.left(new QueueConflict({ message: `cannot dead-letter message ${request.messageId}: it is confirmed` }))
  }
  return Either.right(found)
}
