/**
 * The backlog, dead-letter and inspection operations of the SQL queues, one code path for both
 * kinds: their tables differ only in the id column (`business_id` with chunk parts for producer
 * entries, `message_id` for jobs) and in the column below which every entry is finished (the
 * producer queue's low mark, the work queue's settled seq). None takes an epoch or locks a queue
 * row, so none waits for the controller or fences it.
 *
 * The backlog: `<prefix>producer_backlog` / `<prefix>work_backlog`, one row per message, ordered
 * by an id drawn at insert (an identity column on PostgreSQL, the rowid on SQLite). An enqueue
 * adds only ids neither in the backlog nor stored, in one statement per run of rows, and on
 * PostgreSQL notifies `<prefix>backlog` (payload: the queue's name) in the same transaction. A
 * backlog row whose id got stored by a store that did not come from the backlog stays until a
 * store from the backlog sweeps the rows before the ones it takes; reads never return it.
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type { Fragment, Identifier } from "@effect/sql/Statement"
import { Clock, Effect, Stream } from "effect"
import type {
  BacklogEntry,
  DeadLetter,
  DeadLettersOptions,
  EnqueueRequest,
  EnqueueResult,
  InspectedEntry,
  InspectedState,
  InspectOptions,
  QueueInspection,
  QueueOperatorService
} from "../DurableProducerQueue.js"
import type { QueueConflict, QueueRejected } from "../QueueErrors.js"
import { QueueBackendError } from "../QueueErrors.js"
import type { PgListener } from "./PgNotifications.js"
import { Missed, notifications } from "./PgNotifications.js"
import { backlogEntry, enqueueResults, makeDeadLetter, pageSize, validateEnqueue, wantedStates } from "./BacklogRules.js"
import type { Tables } from "./SqlSchema.js"
import { joinOrTransaction, mapStoreError, pgByteaArray, pgInt8Array, pgTextArray, readSnapshot, toBytes, toNumber, toParam } from "./SqlSupport.js"

/** The `state` column of both entry tables. */
export const StateCode = { Stored: 0, Accepted: 1, Confirmed: 2, DeadLettered: 3 } as const

const stateNames: ReadonlyArray<Exclude<InspectedState, "Backlog">> = ["Stored", "Accepted", "Confirmed", "DeadLettered"]

/** One queue's tables, as the operators see them. */
export interface OperatorTables {
  readonly sql: SqlClient
  /** The queue's name. */
  readonly name: string
  readonly queues: Identifier
  readonly entries: Identifier
  readonly backlog: Identifier
  /** The entries' id column. */
  readonly idColumn: "business_id" | "message_id"
  /** Entries are chunk parts (point-to-point): one row per chunk, `part` 0 first. */
  readonly chunked: boolean
  /** The queue row's column at or below which every entry is confirmed or dead-lettered. */
  readonly finishedColumn: "confirmed_seq" | "settled_seq"
  /** PostgreSQL's notification channel of the table prefix's backlogs. */
  readonly channel: string
}

/** The channel new backlog is announced on: one per table prefix, the payload names the queue. */
export const backlogChannel = (tablePrefix: string): string => `${tablePrefix}backlog`

/** The tables of the queue `name` of a kind: a point-to-point producer's, or a work queue's. */
export const operatorTables = (sql: SqlClient, t: Tables, name: string, kind: "producer" | "work"): OperatorTables => {
  const producer = kind === "producer"
  return {
    sql,
    name,
    queues: sql(producer ? t.producerQueues : t.workQueues),
    entries: sql(producer ? t.producerEntries : t.workEntries),
    backlog: sql(producer ? t.producerBacklog : t.workBacklog),
    idColumn: producer ? "business_id" : "message_id",
    chunked: producer,
    finishedColumn: producer ? "confirmed_seq" : "settled_seq",
    channel: backlogChannel(t.prefix)
  }
}

const emptyBytes = new Uint8Array(0)

const backendError = (operation: string) => (cause: unknown) => new QueueBackendError({ operation, cause })

// ---- the backlog -------------------------------------------------------------------------------

/** Rows per SQLite statement (five parameters each, far below SQLite's limit). */
const sqliteEnqueueRun = 100

/**
 * Inserts new backlog rows, skipping ids in the backlog or stored; says which ids it added.
 * PostgreSQL does it in one statement that also notifies and answers with one row: how many it
 * added, and their ids only when it skipped some (the common case, all added, parses no ids).
 * SQLite does it in one statement per run of rows.
 */
const insertBacklog = (t: OperatorTables, rows: ReadonlyArray<BacklogEntry>): Effect.Effect<(id: string) => boolean, SqlError> => {
  const { backlog, entries, name, sql } = t
  const id = sql(t.idColumn)
  return sql.onDialectOrElse({
    pg: () =>
      Effect.map(
        sql<{ readonly added: number | string; readonly ids: ReadonlyArray<string> | null }>`WITH r AS (
            SELECT * FROM unnest(
              ${pgTextArray(rows.map((row) => row.messageId))}::text[], ${pgByteaArray(rows.map((row) => row.payload))}::bytea[],
              ${pgInt8Array(rows.map((row) => row.enqueuedAt))}::bigint[], ${pgTextArray(rows.map((row) => row.trace))}::text[]
            ) WITH ORDINALITY AS r(message_id, payload, enqueued_at, trace, n)
          ), added AS (
            INSERT INTO ${backlog} (queue, message_id, payload, enqueued_at, trace)
            SELECT ${name}, r.message_id, r.payload, r.enqueued_at, r.trace FROM r
            WHERE NOT EXISTS (SELECT 1 FROM ${entries} e WHERE e.queue = ${name} AND e.${id} = r.message_id)
            ORDER BY r.n
            ON CONFLICT (queue, message_id) DO NOTHING
            RETURNING message_id
          ), notified AS (
            SELECT pg_notify(${t.channel}, ${name}) FROM (SELECT 1 FROM added LIMIT 1) AS any_added
          )
          SELECT count(*) AS added, CASE WHEN count(*) < ${rows.length} THEN array_agg(added.message_id) END AS ids
          FROM added CROSS JOIN (SELECT count(*) FROM notified) AS n`,
        ([answer]) => {
          if (toNumber(answer.added) === rows.length) return () => true
          const added = new Set(answer.ids ?? [])
          return (messageId: string) => added.has(messageId)
        }
      ),
    orElse: () =>
      Effect.map(
        Effect.forEach(chunks(rows, sqliteEnqueueRun), (run) =>
          sql<{ readonly message_id: string }>`INSERT INTO ${backlog} (queue, message_id, payload, enqueued_at, trace)
            SELECT v.column1, v.column2, v.column3, v.column4, v.column5 FROM (VALUES ${
            sql.csv(run.map((row) => sql`(${name}, ${row.messageId}, ${toParam(row.payload)}, ${row.enqueuedAt}, ${row.trace ?? null})`))
          }) AS v
            WHERE NOT EXISTS (SELECT 1 FROM ${entries} e WHERE e.queue = v.column1 AND e.${id} = v.column2)
            ON CONFLICT (queue, message_id) DO NOTHING
            RETURNING message_id`),
        (runs) => {
          const added = new Set(runs.flat().map((row) => row.message_id))
          return (messageId: string) => added.has(messageId)
        }
      )
  })
}

const chunks = <A>(items: ReadonlyArray<A>, size: number): ReadonlyArray<ReadonlyArray<A>> =>
  Array.from({ length: Math.ceil(items.length / size) }, (_, i) => items.slice(i * size, (i + 1) * size))

/**
 * Adds messages to the backlog in request order, in the caller's transaction or one of its own
 * (several statements on SQLite must commit together).
 */
export const enqueue = (
  t: OperatorTables,
  requests: ReadonlyArray<EnqueueRequest>
): Effect.Effect<ReadonlyArray<EnqueueResult>, QueueConflict | QueueRejected | QueueBackendError> =>
  Effect.suspend(() => {
    const invalid = validateEnqueue(requests)
    if (invalid !== undefined) return Effect.fail(invalid)
    if (requests.length === 0) return Effect.succeed([])
    return Effect.flatMap(Clock.currentTimeMillis, (now) => {
      // first occurrences only: a repeated id in one request answers alreadyStored
      const rows = new Map<string, BacklogEntry>()
      for (const request of requests) {
        if (!rows.has(request.messageId)) {
          rows.set(request.messageId, backlogEntry(request.messageId, request.payload, request.at ?? now, request.trace))
        }
      }
      const insert = insertBacklog(t, [...rows.values()])
      const run = t.sql.onDialectOrElse({
        pg: () => insert,
        orElse: () => rows.size <= sqliteEnqueueRun ? insert : joinOrTransaction(t.sql, insert)
      })
      return Effect.map(mapStoreError("enqueue")(run), (added) => enqueueResults(requests, added))
    })
  })

interface BacklogRow {
  readonly message_id: string
  readonly payload: unknown
  readonly enqueued_at: number | string
  readonly trace: string | null
}

const decodeBacklog = (row: BacklogRow): BacklogEntry =>
  backlogEntry(row.message_id, toBytes(row.payload), toNumber(row.enqueued_at), row.trace ?? undefined)

/** The oldest `limit` backlog rows whose ids are not stored. */
const selectBacklog = (t: OperatorTables, limit: number) => {
  const { backlog, entries, name, sql } = t
  return Effect.map(
    sql<BacklogRow>`SELECT b.message_id, b.payload, b.enqueued_at, b.trace FROM ${backlog} b
      WHERE b.queue = ${name}
        AND NOT EXISTS (SELECT 1 FROM ${entries} e WHERE e.queue = ${name} AND e.${sql(t.idColumn)} = b.message_id)
      ORDER BY b.id LIMIT ${limit}`,
    (rows) => rows.map(decodeBacklog)
  )
}

export const backlog = (t: OperatorTables, limit: number): Effect.Effect<ReadonlyArray<BacklogEntry>, QueueBackendError> => {
  const size = pageSize(limit)
  return size === 0 ? Effect.succeed([]) : Effect.mapError(selectBacklog(t, size), backendError("backlog"))
}

/**
 * Removes the backlog rows of ids a store took, and the rows before them whose ids got stored
 * meanwhile by other stores (so reads need not skip them again). Runs in the store's transaction.
 */
export const takeFromBacklog = (t: OperatorTables, messageIds: ReadonlyArray<string>): Effect.Effect<void, SqlError> => {
  if (messageIds.length === 0) return Effect.void
  const { backlog, entries, name, sql } = t
  return Effect.flatMap(
    sql<{ readonly id: number | string }>`DELETE FROM ${backlog} WHERE queue = ${name} AND message_id IN ${sql.in(messageIds)}
      RETURNING id`,
    (taken) =>
      taken.length === 0 ? Effect.void : Effect.asVoid(
        sql`DELETE FROM ${backlog} WHERE queue = ${name} AND id < ${Math.min(...taken.map((row) => toNumber(row.id)))}
          AND EXISTS (SELECT 1 FROM ${entries} e WHERE e.queue = ${name} AND e.${sql(t.idColumn)} = ${backlog}.message_id)`
      )
  )
}

/**
 * The same as a part of a PostgreSQL fast-path statement (after its `q` CTE, which holds a row
 * only when the epoch held): removes the taken rows and sweeps the stored ones before them.
 */
export const takeFromBacklogCte = (t: OperatorTables, messageIds: ReadonlyArray<string>): Fragment => {
  const { backlog, entries, name, sql } = t
  if (messageIds.length === 0) return sql.literal("")
  return sql`, taken AS (
      DELETE FROM ${backlog} WHERE queue = ${name} AND message_id = ANY(${pgTextArray(messageIds)}::text[])
        AND EXISTS (SELECT 1 FROM q)
      RETURNING id
    ), swept AS (
      DELETE FROM ${backlog} b WHERE b.queue = ${name} AND b.id < (SELECT min(id) FROM taken)
        AND EXISTS (SELECT 1 FROM ${entries} e WHERE e.queue = ${name} AND e.${sql(t.idColumn)} = b.message_id)
    )`
}

/**
 * PostgreSQL: the queue's backlog notifications, through `LISTEN` on the client's listener
 * connection (shared by every queue of the prefix: see `PgNotifications`). The stream never fails.
 */
export const backlogSignal = (t: OperatorTables, listener: PgListener): Stream.Stream<void> =>
  notifications(listener, t.channel).pipe(
    Stream.filter((notification) => notification === Missed || notification === t.name),
    Stream.as(undefined)
  )

// ---- dead letters ------------------------------------------------------------------------------

interface DeadRow {
  readonly seq: number | string
  readonly message_id: string
  readonly part: number | string
  readonly payload: unknown
  readonly attempts: number | string
  readonly last_error: string | null
  readonly dead_at: number | string | null
  readonly enqueued_at: number | string | null
  readonly trace: string | null
}

/** The id column, and the chunk part (0 for jobs), under the names the decoders read. */
const idAndPart = (t: OperatorTables) =>
  t.chunked ? t.sql`business_id AS message_id, part` : t.sql`message_id, 0 AS part`

/** The first-part row of each message (one row per message). */
const firstPart = (t: OperatorTables) => t.chunked ? t.sql`AND part = 0` : t.sql``

/**
 * The payloads of messages whose first rows are `firsts`, chunks joined: the other parts of
 * chunked messages are read in one more statement.
 */
const wholePayloads = (t: OperatorTables, firsts: ReadonlyArray<{ readonly message_id: string; readonly payload: unknown }>) =>
  Effect.gen(function*() {
    const payloads = new Map(firsts.map((row) => [row.message_id, [toBytes(row.payload)]]))
    if (!t.chunked || firsts.length === 0) return new Map([...payloads].map(([id, parts]) => [id, parts[0]]))
    const { entries, name, sql } = t
    const rest = yield* sql<{ readonly message_id: string; readonly payload: unknown }>`SELECT business_id AS message_id, payload
      FROM ${entries} WHERE queue = ${name} AND business_id IN ${sql.in([...payloads.keys()])} AND part > 0 ORDER BY seq`
    for (const row of rest) payloads.get(row.message_id)!.push(toBytes(row.payload))
    return new Map([...payloads].map(([id, parts]) => [id, joined(parts)]))
  })

const joined = (parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  if (parts.length === 1) return parts[0]
  const whole = new Uint8Array(parts.reduce((total, part) => total + part.byteLength, 0))
  let offset = 0
  for (const part of parts) {
    whole.set(part, offset)
    offset += part.byteLength
  }
  return whole
}

const decodeDeadLetter = (row: DeadRow, payload: Uint8Array): DeadLetter =>
  makeDeadLetter({
    messageId: row.message_id,
    seq: toNumber(row.seq),
    payload,
    attempts: toNumber(row.attempts),
    lastError: row.last_error ?? "",
    deadAt: toNumber(row.dead_at ?? 0)
  }, row.enqueued_at === null ? undefined : toNumber(row.enqueued_at), row.trace ?? undefined)

export const deadLetters = (t: OperatorTables, options: DeadLettersOptions): Effect.Effect<ReadonlyArray<DeadLetter>, QueueBackendError> => {
  const limit = pageSize(options.limit)
  if (limit === 0) return Effect.succeed([])
  const { entries, name, sql } = t
  return readSnapshot(
    sql,
    Effect.gen(function*() {
      const rows = yield* sql<DeadRow>`SELECT seq, ${idAndPart(t)}, payload, attempts, last_error, dead_at, enqueued_at, trace
        FROM ${entries} WHERE queue = ${name} AND dead_at IS NOT NULL AND seq > ${options.afterSeq ?? 0} ${firstPart(t)}
        ORDER BY seq LIMIT ${limit}`
      const payloads = yield* wholePayloads(t, rows)
      return rows.map((row) => decodeDeadLetter(row, payloads.get(row.message_id)!))
    })
  ).pipe(Effect.mapError(backendError("deadLetters")))
}

/** Removes a dead letter's entries and enqueues it again, in the caller's transaction or its own. */
export const requeueDeadLetter = (t: OperatorTables, messageId: string): Effect.Effect<boolean, QueueBackendError> => {
  const { backlog, entries, name, sql } = t
  return joinOrTransaction(
    sql,
    Effect.gen(function*() {
      const rows = yield* sql<DeadRow>`DELETE FROM ${entries}
        WHERE queue = ${name} AND ${sql(t.idColumn)} = ${messageId} AND state = ${StateCode.DeadLettered}
        RETURNING seq, ${idAndPart(t)}, payload, attempts, last_error, dead_at, enqueued_at, trace`
      if (rows.length === 0) return false
      const parts = [...rows].sort((a, b) => toNumber(a.part) - toNumber(b.part))
      const first = parts[0]
      const at = first.enqueued_at === null ? yield* Clock.currentTimeMillis : toNumber(first.enqueued_at)
      yield* sql`DELETE FROM ${backlog} WHERE queue = ${name} AND message_id = ${messageId}`
      yield* insertBacklog(t, [backlogEntry(messageId, joined(parts.map((row) => toBytes(row.payload))), at, first.trace ?? undefined)])
      return true
    })
  ).pipe(Effect.mapError(backendError("requeueDeadLetter")))
}

/** Marks a dead letter confirmed (its payload compacted, its id still owned). */
export const discardDeadLetter = (t: OperatorTables, messageId: string): Effect.Effect<boolean, QueueBackendError> => {
  const { entries, name, sql } = t
  return sql<{ readonly seq: number | string }>`UPDATE ${entries}
      SET state = ${StateCode.Confirmed}, payload = ${toParam(emptyBytes)}, dead_at = NULL
      WHERE queue = ${name} AND ${sql(t.idColumn)} = ${messageId} AND state = ${StateCode.DeadLettered}
      RETURNING seq`.pipe(
    Effect.map((rows) => rows.length > 0),
    Effect.mapError(backendError("discardDeadLetter"))
  )
}

// ---- inspection --------------------------------------------------------------------------------

interface InspectRow {
  readonly seq: number | string
  readonly message_id: string
  readonly part: number | string
  readonly state: number | string
  readonly attempts: number | string
  readonly enqueued_at: number | string | null
  readonly payload: unknown
}

/**
 * Each state's condition, in a form an index serves: stored and accepted entries all lie above
 * the finished mark (a range of the primary key), dead letters are in their partial index.
 */
const statePredicate = (t: OperatorTables, wanted: ReadonlySet<InspectedState>, finished: number): Fragment => {
  const { sql } = t
  if (stateNames.every((state) => wanted.has(state))) return sql.literal("1 = 1")
  const clauses: Array<Fragment> = []
  if (wanted.has("Stored")) clauses.push(sql`(state = ${StateCode.Stored} AND seq > ${finished})`)
  if (wanted.has("Accepted")) clauses.push(sql`(state = ${StateCode.Accepted} AND seq > ${finished})`)
  if (wanted.has("Confirmed")) clauses.push(sql`state = ${StateCode.Confirmed}`)
  if (wanted.has("DeadLettered")) clauses.push(sql`dead_at IS NOT NULL`)
  return clauses.length === 0 ? sql`1 = 0` : sql.or(clauses)
}

/** Counts by state, the oldest waiting `at`, and the finished mark. */
const inspectCounts = (t: OperatorTables) =>
  Effect.gen(function*() {
    const { backlog, entries, name, queues, sql } = t
    const id = sql(t.idColumn)
    const head = yield* sql<{ readonly finished: number | string }>`SELECT ${sql(t.finishedColumn)} AS finished FROM ${queues}
      WHERE name = ${name}`
    const finished = head.length === 0 ? 0 : toNumber(head[0].finished)
    const open = yield* sql<{ readonly state: number | string; readonly n: number | string; readonly oldest: number | string | null }>`
      SELECT state, count(DISTINCT ${id}) AS n, min(enqueued_at) AS oldest FROM ${entries}
      WHERE queue = ${name} AND seq > ${finished} AND state IN (${StateCode.Stored}, ${StateCode.Accepted}) GROUP BY state`
    const [dead] = yield* sql<{ readonly n: number | string }>`SELECT count(DISTINCT ${id}) AS n FROM ${entries}
      WHERE queue = ${name} AND dead_at IS NOT NULL`
    const [waiting] = yield* sql<{ readonly n: number | string }>`SELECT count(*) AS n FROM ${backlog} WHERE queue = ${name}`
    const first = yield* sql<{ readonly enqueued_at: number | string }>`SELECT enqueued_at FROM ${backlog}
      WHERE queue = ${name} ORDER BY id LIMIT 1`
    const count = (code: number) => toNumber(open.find((row) => toNumber(row.state) === code)?.n ?? 0)
    const accepted = open.find((row) => toNumber(row.state) === StateCode.Accepted)?.oldest ?? null
    const candidates = [accepted, first[0]?.enqueued_at ?? null].filter((at) => at !== null).map(toNumber)
    return {
      finished,
      counts: {
        backlog: toNumber(waiting.n),
        stored: count(StateCode.Stored),
        unconfirmed: count(StateCode.Accepted),
        deadLettered: toNumber(dead.n),
        oldestAt: candidates.length === 0 ? undefined : Math.min(...candidates)
      }
    }
  })

const inspectEntries = (t: OperatorTables, options: InspectOptions, finished: number) =>
  Effect.gen(function*() {
    const limit = pageSize(options.limit)
    const wanted = wantedStates(options.states)
    const { entries, name, sql } = t
    const rows = limit === 0 ? [] : yield* sql<InspectRow>`SELECT seq, ${idAndPart(t)}, state, attempts, enqueued_at, payload
      FROM ${entries} WHERE queue = ${name} AND seq > ${options.afterSeq ?? 0} ${firstPart(t)}
        AND ${statePredicate(t, wanted, finished)}
      ORDER BY seq LIMIT ${limit}`
    const payloads = yield* wholePayloads(t, rows.filter((row) => toNumber(row.state) !== StateCode.Confirmed))
    const page: Array<InspectedEntry> = rows.map((row) => ({
      messageId: row.message_id,
      seq: toNumber(row.seq),
      state: stateNames[toNumber(row.state)],
      attempts: toNumber(row.attempts),
      at: row.enqueued_at === null ? undefined : toNumber(row.enqueued_at),
      payload: payloads.get(row.message_id) ?? emptyBytes
    }))
    if (wanted.has("Backlog") && page.length < limit) {
      for (const entry of yield* selectBacklog(t, limit - page.length)) {
        page.push({ messageId: entry.messageId, seq: undefined, state: "Backlog", attempts: 0, at: entry.enqueuedAt, payload: entry.payload })
      }
    }
    return page
  })

export const inspect = (t: OperatorTables, options: InspectOptions): Effect.Effect<QueueInspection, QueueBackendError> =>
  readSnapshot(
    t.sql,
    Effect.gen(function*() {
      const { counts, finished } = yield* inspectCounts(t)
      return { ...counts, entries: yield* inspectEntries(t, options, finished) }
    })
  ).pipe(Effect.mapError(backendError("inspect")))

/** Every operator of one queue; `listener` is the PostgreSQL client's, when there is one. */
export const makeOperators = (
  t: OperatorTables,
  listener: PgListener | undefined
): QueueOperatorService => ({
  enqueue: (requests) => enqueue(t, requests),
  backlog: (limit) => backlog(t, limit),
  ...(listener === undefined ? {} : { backlogSignal: backlogSignal(t, listener) }),
  deadLetters: (options) => deadLetters(t, options),
  requeueDeadLetter: (messageId) => requeueDeadLetter(t, messageId),
  discardDeadLetter: (messageId) => discardDeadLetter(t, messageId),
  inspect: (options) => inspect(t, options)
})
