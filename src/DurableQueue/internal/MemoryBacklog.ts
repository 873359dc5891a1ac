/**
 * The backlog of an in-memory queue (either kind): messages in enqueue order, a signal for each
 * enqueue, and the operations the queues share. A message whose id got stored meanwhile (by a
 * store that did not come from the backlog) is dropped when the backlog is next read: the stored
 * message won.
 */
import { Clock, Effect, Either, PubSub, Stream } from "effect"
import type { BacklogEntry, EnqueueRequest, EnqueueResult } from "../DurableProducerQueue.js"
import type { QueueConflict } from "../QueueErrors.js"
import { pageSize, planEnqueue, validateEnqueue } from "./BacklogRules.js"

export interface MemoryBacklog {
  /** By message id; a Map iterates in insertion order, which is backlog order. */
  readonly entries: Map<string, BacklogEntry>
  /** One signal per enqueue; a subscriber's buffer holds one, so signals coalesce. */
  readonly signal: PubSub.PubSub<void>
}

export const make: Effect.Effect<MemoryBacklog> = Effect.map(
  PubSub.sliding<void>(1),
  (signal) => ({ entries: new Map(), signal })
)

/** Enqueues: validation first (a failed batch writes nothing), then first write wins. */
export const enqueue = (
  backlog: MemoryBacklog,
  requests: ReadonlyArray<EnqueueRequest>,
  isStored: (messageId: string) => boolean
): Effect.Effect<ReadonlyArray<EnqueueResult>, QueueConflict> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) => {
    const invalid = validateEnqueue(requests)
    if (invalid !== undefined) return Either.left(invalid)
    const plan = planEnqueue(requests, (id) => backlog.entries.has(id) || isStored(id), now)
    // the queue keeps its own copy of every payload
    for (const entry of plan.added) backlog.entries.set(entry.messageId, { ...entry, payload: entry.payload.slice() })
    return plan.added.length === 0 ? Either.right(plan.results) : Effect.as(signal(backlog), plan.results)
  })

/** Tells subscribers that new backlog may be there. */
export const signal = (backlog: MemoryBacklog): Effect.Effect<void> => Effect.asVoid(PubSub.publish(backlog.signal, undefined))

/** The oldest `limit` messages whose ids are not stored; the ones stored meanwhile are dropped. */
export const read = (backlog: MemoryBacklog, limit: number, isStored: (messageId: string) => boolean): ReadonlyArray<BacklogEntry> => {
  const wanted = pageSize(limit)
  const page: Array<BacklogEntry> = []
  for (const [messageId, entry] of backlog.entries) {
    if (page.length >= wanted) break
    if (isStored(messageId)) backlog.entries.delete(messageId)
    else page.push(entry)
  }
  return page
}

/** Removes the messages a store took from the backlog. */
export const take = (backlog: MemoryBacklog, messageIds: ReadonlyArray<string>): void => {
  for (const messageId of messageIds) backlog.entries.delete(messageId)
}

/** Puts a message (a requeued dead letter) at the end of the backlog, replacing any entry of its id. */
export const append = (backlog: MemoryBacklog, entry: BacklogEntry): Effect.Effect<void> =>
  Effect.suspend(() => {
    backlog.entries.delete(entry.messageId)
    backlog.entries.set(entry.messageId, entry)
    return signal(backlog)
  })

/** The backlog's signal as a stream (each subscriber gets its own, coalescing buffer). */
export const signals = (backlog: MemoryBacklog): Stream.Stream<void> => Stream.fromPubSub(backlog.signal)

/** How many messages wait (ids stored meanwhile left out), and the first one's `enqueuedAt`. */
export const summary = (
  backlog: MemoryBacklog,
  isStored: (messageId: string) => boolean
): { readonly count: number; readonly oldestAt: number | undefined } => {
  let count = 0
  let oldestAt: number | undefined
  for (const [messageId, entry] of backlog.entries) {
    if (isStored(messageId)) continue
    count += 1
    oldestAt ??= entry.enqueuedAt
  }
  return { count, oldestAt }
}
