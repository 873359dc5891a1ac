/**
 * The rules of the point-to-point durable queue as pure functions over plain data, shared by the
 * in-memory queue and the SQL queue so both decide every request the same way: fencing,
 * first-write-wins, chunked batches, acceptance and the confirmed watermark.
 */
import { Either } from "effect"
import { chunkMessageId, isReservedMessageId } from "../../Protocol/ChunkId.js"
import type { ChunkMark } from "../../Protocol/WireMessage.js"
import type { StoredEntry, StoreRequest, StoreResult } from "../DurableProducerQueue.js"
import { QueueChunkedBatch, QueueConflict, QueueFenced } from "../QueueErrors.js"

/** Everything the queue keeps about one business message. */
export interface StoredMessage {
  /** The business message id. */
  readonly messageId: string
  /** One entry for a whole message, one per chunk (ascending seq) for a chunked batch. */
  readonly entries: ReadonlyArray<StoredEntry>
  readonly chunked: boolean
  readonly accepted: boolean
}

/** What to store: whole messages (one `store` or a `storeBatch`), or one chunked batch. */
export type StoreCommand =
  | { readonly _tag: "Whole"; readonly requests: ReadonlyArray<StoreRequest> }
  | { readonly _tag: "Chunked"; readonly messageId: string; readonly chunks: ReadonlyArray<Uint8Array> }

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

/** Builds an entry; whole messages carry no `chunk` key at all, so entries compare structurally. */
export const makeEntry = (
  seq: number,
  messageId: string,
  payload: Uint8Array,
  chunk?: ChunkMark | undefined
): StoredEntry => chunk === undefined ? { seq, messageId, payload } : { seq, messageId, payload, chunk }

/** The entry of chunk `index` of `count` of a business message. */
export const chunkEntry = (seq: number, messageId: string, index: number, count: number, payload: Uint8Array) =>
  makeEntry(seq, chunkMessageId(messageId, index, count), payload, { first: index === 0, last: index === count - 1 })

/** The same entry with its payload dropped (compaction of confirmed entries). */
export const compactEntry = (entry: StoredEntry): StoredEntry =>
  makeEntry(entry.seq, entry.messageId, emptyPayload, entry.chunk)

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

/** Input checks that do not depend on the queue's state. */
export const validateStore = (command: StoreCommand): QueueConflict | undefined => {
  if (command._tag === "Chunked") {
    if (command.chunks.length === 0) {
      return new QueueConflict({ message: `chunked batch ${command.messageId} has no chunks` })
    }
    return checkMessageId(command.messageId)
  }
  for (const request of command.requests) {
    const error = checkMessageId(request.messageId)
    if (error !== undefined) return error
  }
  return undefined
}

/** The business ids a store command touches, without duplicates. */
export const commandIds = (command: StoreCommand): ReadonlyArray<string> =>
  command._tag === "Chunked" ? [command.messageId] : distinct(command.requests.map((request) => request.messageId))

export const distinct = (ids: ReadonlyArray<string>): ReadonlyArray<string> => Array.from(new Set(ids))

const existingResult = (message: StoredMessage): StoreResult => ({
  messageId: message.messageId,
  entries: message.entries,
  alreadyStored: true,
  accepted: message.accepted
})

const newResult = (message: StoredMessage): StoreResult => ({
  messageId: message.messageId,
  entries: message.entries,
  alreadyStored: false,
  accepted: false
})

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
    const message: StoredMessage = {
      messageId: request.messageId,
      entries: [makeEntry(seq, request.messageId, request.payload)],
      chunked: false,
      accepted: false
    }
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
    const entries = [makeEntry(seq, request.messageId, request.payload)]
    results.push(newResult({ messageId: request.messageId, entries, chunked: false, accepted: false }))
    const message: StoredMessage = { messageId: request.messageId, entries, chunked: false, accepted: true }
    seen.set(request.messageId, message)
    appended.push(message)
  }
  return Either.right({ results, appended, currentSeq: seq, accepts })
}

/** Plans one chunked batch (`storeChunked`): an id stored before returns its first write. */
export const planChunked = (
  currentSeq: number,
  lookup: Lookup,
  messageId: string,
  chunks: ReadonlyArray<Uint8Array>
): StorePlan => {
  const found = lookup(messageId)
  if (found !== undefined) return { results: [existingResult(found)], appended: [], currentSeq, accepts: [] }
  const count = chunks.length
  const message: StoredMessage = {
    messageId,
    entries: chunks.map((payload, index) => chunkEntry(currentSeq + 1 + index, messageId, index, count, payload)),
    chunked: true,
    accepted: false
  }
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
    ? Either.right(planChunked(currentSeq, lookup, command.messageId, command.chunks))
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

/** Decides a confirm: returns the new watermark, or undefined when nothing changes. */
export const planConfirm = (
  currentSeq: number,
  confirmedSeq: number,
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
  return Either.right(upToSeq > confirmedSeq ? upToSeq : undefined)
}
