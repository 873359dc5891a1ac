/**
 * The rules of a queue's backlog and of its read-only operations, shared by both queue kinds and
 * every backend: which ids may be enqueued, first write wins across the backlog and the stored
 * entries, and how page sizes are read.
 */
import { isReservedMessageId } from "../../Protocol/ChunkId.js"
import type { BacklogEntry, DeadLetter, EnqueueRequest, EnqueueResult, InspectedState } from "../DurableProducerQueue.js"
import { QueueConflict } from "../QueueErrors.js"
import { isTime } from "./ProducerQueueRules.js"

/** Checks every request of an enqueue before anything is written (a failed batch writes nothing). */
export const validateEnqueue = (requests: ReadonlyArray<EnqueueRequest>): QueueConflict | undefined => {
  for (const { at, messageId, trace } of requests) {
    if (typeof messageId !== "string" || messageId.trim().length === 0) {
      return new QueueConflict({ message: "message id must not be blank" })
    }
    if (isReservedMessageId(messageId)) {
      return new QueueConflict({ message: `message id ${messageId} uses the reserved chunk id prefix` })
    }
    if (at !== undefined && !isTime(at)) {
      return new QueueConflict({ message: `message ${messageId}: at must be milliseconds since the Unix epoch, got ${at}` })
    }
    if (trace !== undefined && typeof trace !== "string") {
      return new QueueConflict({ message: `message ${messageId}: trace must be a string` })
    }
  }
  return undefined
}

export interface EnqueuePlan {
  readonly results: ReadonlyArray<EnqueueResult>
  /** The messages to add to the backlog, in request order. */
  readonly added: ReadonlyArray<BacklogEntry>
}

/**
 * Plans an enqueue: an id in the backlog or stored (`taken`), or earlier in the same request,
 * answers `alreadyStored` and adds nothing; the others are added in request order, stamped
 * with their `at` or `now`.
 */
export const planEnqueue = (
  requests: ReadonlyArray<EnqueueRequest>,
  taken: (messageId: string) => boolean,
  now: number
): EnqueuePlan => {
  const seen = new Set<string>()
  const results: Array<EnqueueResult> = []
  const added: Array<BacklogEntry> = []
  for (const request of requests) {
    const alreadyStored = seen.has(request.messageId) || taken(request.messageId)
    seen.add(request.messageId)
    results.push({ messageId: request.messageId, alreadyStored })
    if (!alreadyStored) added.push(backlogEntry(request.messageId, request.payload, request.at ?? now, request.trace))
  }
  return { results, added }
}

/** Builds a backlog entry; an absent trace gets no key, so entries compare structurally. */
export const backlogEntry = (messageId: string, payload: Uint8Array, enqueuedAt: number, trace: string | undefined): BacklogEntry =>
  trace === undefined ? { messageId, payload, enqueuedAt } : { messageId, payload, enqueuedAt, trace }

/** Builds a dead letter; an absent send time or trace gets no key, so letters compare structurally. */
export const makeDeadLetter = (
  letter: Omit<DeadLetter, "at" | "trace">,
  at: number | undefined,
  trace: string | undefined
): DeadLetter => ({ ...letter, ...(at === undefined ? {} : { at }), ...(trace === undefined ? {} : { trace }) })

/** Results from the ids an enqueue actually added (first occurrences only). */
export const enqueueResults = (
  requests: ReadonlyArray<EnqueueRequest>,
  added: (messageId: string) => boolean
): ReadonlyArray<EnqueueResult> => {
  if (requests.length === 1) return [{ messageId: requests[0].messageId, alreadyStored: !added(requests[0].messageId) }]
  const answered = new Set<string>()
  return requests.map(({ messageId }) => {
    const first = !answered.has(messageId)
    answered.add(messageId)
    return { messageId, alreadyStored: !(first && added(messageId)) }
  })
}

/**
 * A page size as the reads take it: a non-negative integer. Anything else (negative, NaN,
 * infinite) reads nothing; the public operators refuse it with a typed error before it gets here.
 */
export const pageSize = (limit: number): number => {
  const floored = Math.floor(limit)
  return Number.isSafeInteger(floored) && floored > 0 ? floored : 0
}

/** The states an inspection asks for (all when absent). */
export const wantedStates = (states: ReadonlyArray<InspectedState> | undefined): ReadonlySet<InspectedState> =>
  new Set(states ?? ["Backlog", "Stored", "Accepted", "Confirmed", "DeadLettered"])
