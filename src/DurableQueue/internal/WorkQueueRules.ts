/**
 * The rules of the work-pulling durable queue as pure functions over plain data, shared by the
 * in-memory queue and the SQL queue: first-write-wins stores, acceptance, per-message
 * confirmation, failed attempts and dead letters. Fencing is `checkEpoch` from the producer rules.
 */
import { Either } from "effect"
import type { DeadLetterRequest, StoredEntry, StoreRequest } from "../DurableProducerQueue.js"
import type { FailureRequest, WorkStoreResult } from "../DurableWorkQueue.js"
import { QueueConflict } from "../QueueErrors.js"
import { checkDeadLetterRequest, checkDetails, distinct, isTime, makeEntry } from "./ProducerQueueRules.js"

/**
 * A job's life: stored, then accepted, then confirmed (its payload may then be compacted away),
 * or dead-lettered instead of confirmed (its payload kept).
 */
export type JobState = "Stored" | "Accepted" | "Confirmed" | "DeadLettered"

export interface StoredJob {
  readonly entry: StoredEntry
  readonly state: JobState
}

export interface WorkStorePlan {
  readonly results: ReadonlyArray<WorkStoreResult>
  /** The jobs to append, in seq order. */
  readonly appended: ReadonlyArray<StoredJob>
  readonly currentSeq: number
  /** Jobs stored before, not accepted yet, that this plan accepts (`storeAccepted`). */
  readonly accepts: ReadonlyArray<StoredJob>
}

export type JobLookup = (messageId: string) => StoredJob | undefined

export const validateStore = (requests: ReadonlyArray<StoreRequest>): QueueConflict | undefined => {
  for (const request of requests) {
    if (request.messageId.length === 0) return new QueueConflict({ message: "message id must not be empty" })
    const invalid = checkDetails(request.messageId, request)
    if (invalid !== undefined) return invalid
  }
  return undefined
}

export const storeResult = (job: StoredJob, alreadyStored: boolean): WorkStoreResult => ({
  entry: job.entry,
  alreadyStored,
  accepted: job.state !== "Stored",
  confirmed: job.state === "Confirmed",
  deadLettered: job.state === "DeadLettered"
})

const newEntry = (seq: number, request: StoreRequest): StoredEntry =>
  makeEntry(seq, request.messageId, request.payload, undefined, { at: request.at, trace: request.trace })

/** First write wins; new jobs take the next seqs in request order. */
export const planStore = (
  currentSeq: number,
  lookup: JobLookup,
  requests: ReadonlyArray<StoreRequest>
): WorkStorePlan => {
  const pending = new Map<string, StoredJob>()
  const results: Array<WorkStoreResult> = []
  const appended: Array<StoredJob> = []
  let seq = currentSeq
  for (const request of requests) {
    const found = pending.get(request.messageId) ?? lookup(request.messageId)
    if (found !== undefined) {
      results.push(storeResult(found, true))
      continue
    }
    seq += 1
    const job: StoredJob = { entry: newEntry(seq, request), state: "Stored" }
    pending.set(request.messageId, job)
    appended.push(job)
    results.push(storeResult(job, false))
  }
  return { results, appended, currentSeq: seq, accepts: [] }
}

/**
 * Plans `storeAccepted`: each request as `store` then `accept`, one after the other. A result is
 * the store's (so `accepted` says whether the job was accepted before); new jobs are appended
 * accepted, and stored but unaccepted ones are accepted.
 */
export const planStoreAccepted = (
  currentSeq: number,
  lookup: JobLookup,
  requests: ReadonlyArray<StoreRequest>
): WorkStorePlan => {
  const seen = new Map<string, StoredJob>()
  const results: Array<WorkStoreResult> = []
  const appended: Array<StoredJob> = []
  const accepts: Array<StoredJob> = []
  let seq = currentSeq
  for (const request of requests) {
    const found = seen.get(request.messageId) ?? lookup(request.messageId)
    if (found !== undefined) {
      results.push(storeResult(found, true))
      if (found.state === "Stored") {
        accepts.push(found)
        seen.set(request.messageId, { ...found, state: "Accepted" })
      }
      continue
    }
    seq += 1
    const entry = newEntry(seq, request)
    results.push(storeResult({ entry, state: "Stored" }, false))
    const job: StoredJob = { entry, state: "Accepted" }
    seen.set(request.messageId, job)
    appended.push(job)
  }
  return { results, appended, currentSeq: seq, accepts }
}

/** Every id must be stored; returns the ids still to accept. */
export const planAccept = (
  lookup: JobLookup,
  messageIds: ReadonlyArray<string>
): Either.Either<ReadonlyArray<string>, QueueConflict> => {
  const toAccept: Array<string> = []
  for (const messageId of distinct(messageIds)) {
    const found = lookup(messageId)
    if (found === undefined) {
      return Either.left(new QueueConflict({ message: `cannot accept unknown job ${messageId}` }))
    }
    if (found.state === "Stored") toAccept.push(messageId)
  }
  return Either.right(toAccept)
}

/** Every id must be stored and accepted; returns the ids still to confirm (not dead letters). */
export const planConfirm = (
  lookup: JobLookup,
  messageIds: ReadonlyArray<string>
): Either.Either<ReadonlyArray<string>, QueueConflict> => {
  const toConfirm: Array<string> = []
  for (const messageId of distinct(messageIds)) {
    const found = lookup(messageId)
    if (found === undefined) {
      return Either.left(new QueueConflict({ message: `cannot confirm unknown job ${messageId}` }))
    }
    if (found.state === "Stored") {
      return Either.left(new QueueConflict({ message: `cannot confirm job ${messageId}: it was never accepted` }))
    }
    if (found.state === "Accepted") toConfirm.push(messageId)
  }
  return Either.right(toConfirm)
}

/** Checks a failure report's fields. */
const checkFailure = (request: FailureRequest): QueueConflict | undefined => {
  const problem = !Number.isSafeInteger(request.attempts) || request.attempts < 1
    ? `attempts must be a positive integer, got ${request.attempts}`
    : typeof request.lastError !== "string"
    ? "lastError must be a string"
    : !isTime(request.notBefore)
    ? `notBefore must be milliseconds since the Unix epoch, got ${request.notBefore}`
    : undefined
  return problem === undefined ? undefined : new QueueConflict({ message: `failure of job ${request.messageId}: ${problem}` })
}

/**
 * Decides failure reports: every job must be stored and accepted; returns the reports to keep
 * (the last one per job), leaving out jobs that finished (confirmed or dead-lettered) meanwhile.
 */
export const planFailures = (
  lookup: JobLookup,
  requests: ReadonlyArray<FailureRequest>
): Either.Either<ReadonlyArray<FailureRequest>, QueueConflict> => {
  const kept = new Map<string, FailureRequest>()
  for (const request of requests) {
    const invalid = checkFailure(request)
    if (invalid !== undefined) return Either.left(invalid)
    const found = lookup(request.messageId)
    if (found === undefined) {
      return Either.left(new QueueConflict({ message: `cannot record a failure of unknown job ${request.messageId}` }))
    }
    if (found.state === "Stored") {
      return Either.left(new QueueConflict({ message: `cannot record a failure of job ${request.messageId}: it was never accepted` }))
    }
    if (found.state === "Accepted") {
      kept.delete(request.messageId)
      kept.set(request.messageId, request)
    }
  }
  return Either.right([...kept.values()])
}

/**
 * Decides a dead letter: the job to mark, or undefined when it is one already. An unknown or
 * confirmed job (whose payload may be gone) is a conflict.
 */
export const planDeadLetter = (
  lookup: JobLookup,
  request: DeadLetterRequest
): Either.Either<StoredJob | undefined, QueueConflict> => {
  const invalid = checkDeadLetterRequest(request)
  if (invalid !== undefined) return Either.left(invalid)
  const found = lookup(request.messageId)
  if (found === undefined) {
    return Either.left(new QueueConflict({ message: `cannot dead-letter unknown job ${request.messageId}` }))
  }
  if (found.state === "DeadLettered") return Either.right(undefined)
  if (found.state === "Confirmed") {
    return Either.left(new QueueConflict({ message: `cannot dead-letter job ${request.messageId}: it is confirmed` }))
  }
  return Either.right(found)
}
