/**
 * What the in-memory queues (both kinds) share around their entries: the backlog (messages in
 * enqueue order, a signal for each enqueue), dead-letter paging and requeueing, and inspection.
 * A backlog message whose id got stored meanwhile (by a store that did not come from the backlog)
 * is dropped when the backlog is next read: the stored message won.
 */
import { Clock, Effect, Either, PubSub, Stream } from "effect"
import type {
  BacklogEntry,
  DeadLetter,
  DeadLettersOptions,
  EnqueueRequest,
  EnqueueResult,
  InspectedEntry,
  InspectOptions,
  QueueInspection,
  QueueOperatorService
} from "../DurableProducerQueue.js"
import type { QueueConflict } from "../QueueErrors.js"
import { backlogEntry, pageSize, planEnqueue, validateEnqueue, wantedStates } from "./BacklogRules.js"

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

/** Dead letters in seq order after `afterSeq`, at most `limit`. */
export const pageDeadLetters = (letters: Iterable<DeadLetter>, options: DeadLettersOptions): ReadonlyArray<DeadLetter> => {
  const afterSeq = options.afterSeq ?? 0
  return [...letters].filter((letter) => letter.seq > afterSeq).sort((a, b) => a.seq - b.seq).slice(0, pageSize(options.limit))
}

/**
 * Requeues the dead letter `messageId`: drops its record and its stored message, and puts it at
 * the end of the backlog, keeping its send time. False when it is no dead letter.
 */
export const requeue = <R, M>(
  backlog: MemoryBacklog,
  records: Map<string, R>,
  messages: Map<string, M>,
  letterOf: (message: M, record: R) => DeadLetter,
  messageId: string
): Effect.Effect<boolean> =>
  Effect.suspend(() => {
    const record = records.get(messageId)
    if (record === undefined) return Effect.succeed(false)
    const letter = letterOf(messages.get(messageId)!, record)
    records.delete(messageId)
    messages.delete(messageId)
    return Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Effect.as(append(backlog, backlogEntry(messageId, letter.payload, letter.at ?? now, letter.trace)), true))
  })

/**
 * Inspects a queue from its stored messages (one entry each, in seq order) and its backlog:
 * counts by state, the head-of-line time, and the page the options ask for.
 */
export const inspect = (
  messages: Iterable<InspectedEntry>,
  backlog: MemoryBacklog,
  isStored: (messageId: string) => boolean,
  options: InspectOptions
): QueueInspection => {
  const wanted = wantedStates(options.states)
  const limit = pageSize(options.limit)
  const afterSeq = options.afterSeq ?? 0
  const counts = { Backlog: 0, Stored: 0, Accepted: 0, Confirmed: 0, DeadLettered: 0 }
  const entries: Array<InspectedEntry> = []
  let oldestAt: number | undefined
  for (const entry of messages) {
    counts[entry.state] += 1
    if (entry.state === "Accepted" && entry.at !== undefined) oldestAt = Math.min(oldestAt ?? entry.at, entry.at)
    if (entries.length < limit && wanted.has(entry.state) && entry.seq! > afterSeq) entries.push(entry)
  }
  const waiting = summary(backlog, isStored)
  if (waiting.oldestAt !== undefined) oldestAt = Math.min(oldestAt ?? waiting.oldestAt, waiting.oldestAt)
  if (wanted.has("Backlog") && entries.length < limit) {
    for (const entry of read(backlog, limit - entries.length, isStored)) {
      entries.push({ messageId: entry.messageId, seq: undefined, state: "Backlog", attempts: 0, at: entry.enqueuedAt, payload: entry.payload })
    }
  }
  return {
    backlog: waiting.count,
    stored: counts.Stored,
    unconfirmed: counts.Accepted,
    deadLettered: counts.DeadLettered,
    oldestAt,
    entries
  }
}

/** What a memory queue keeps that its operators read: the parts differ only in their entries. */
export interface MemoryOperatorParts<R, M> {
  readonly backlog: MemoryBacklog
  readonly records: Map<string, R>
  readonly messages: Map<string, M>
  readonly letterOf: (message: M, record: R) => DeadLetter
  readonly discard: (messageId: string) => boolean
  /** Every stored message as an inspection entry, in seq order. */
  readonly inspected: () => Iterable<InspectedEntry>
}

/** The operator functions of a memory queue (both kinds): backlog, dead letters, inspection. */
export const operators = <R, M>(parts: MemoryOperatorParts<R, M>): QueueOperatorService => {
  const isStored = (messageId: string): boolean => parts.messages.has(messageId)
  return {
    enqueue: (requests) => Effect.suspend(() => enqueue(parts.backlog, requests, isStored)),
    backlog: (limit) => Effect.sync(() => read(parts.backlog, limit, isStored)),
    backlogSignal: signals(parts.backlog),
    deadLetters: (options) =>
      Effect.sync(() =>
        pageDeadLetters(
          [...parts.records].map(([messageId, record]) => parts.letterOf(parts.messages.get(messageId)!, record)),
          options
        )
      ),
    requeueDeadLetter: (messageId) => requeue(parts.backlog, parts.records, parts.messages, parts.letterOf, messageId),
    discardDeadLetter: (messageId) => Effect.sync(() => parts.discard(messageId)),
    inspect: (options) => Effect.sync(() => inspect(parts.inspected(), parts.backlog, isStored, options))
  }
}
