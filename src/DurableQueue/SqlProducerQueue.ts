/**
 * `DurableProducerQueue` on `@effect/sql`, for PostgreSQL (`@effect/sql-pg`) and SQLite
 * (`@effect/sql-sqlite-node`). One code path decides every request with the same rules as the
 * in-memory queue; only the statements differ per dialect.
 *
 * Storage: `<prefix>producer_queues` holds one row per queue: its epoch, highest seq, low mark
 * (`confirmed_seq`: every entry at or below it is confirmed or dead-lettered), confirm cursor
 * (the highest seq a confirm reached) and `late_seq` (at or below the lowest entry accepted after
 * the cursor had passed it, when there is one); `<prefix>producer_entries` one row per stored
 * entry (a whole message, or one chunk of a chunked batch) with its state (0 stored, 1 accepted,
 * 2 confirmed, 3 dead-lettered), keyed by queue name, so many queues share one database. The
 * backlog, dead letters and inspection are `internal/SqlOperators`. The tables are created by
 * migrations when the layer is built.
 *
 * Confirmation stays a range over recent rows: a confirm updates the accepted entries between the
 * cursor and its seq, plus (rarely) the late ones from `late_seq`; the low mark moves up from where
 * it was to the first entry still stored or accepted. A load reads the accepted entries from
 * `late_seq`, or from above the cursor and the low mark: a range scan of the primary key, however
 * long a stored, never accepted entry holds the low mark back.
 *
 * Concurrency: every write locks its queue's row first (`SELECT ... FOR UPDATE` in a READ
 * COMMITTED transaction on PostgreSQL; a writing first statement on SQLite, which takes the
 * database write lock) and checks the epoch in that transaction. On PostgreSQL the everyday
 * writes (storing new messages, accepting stored ones above the cursor) run as single statements
 * that check the epoch and write atomically, one round trip each; anything they cannot settle (an
 * id stored before, a fenced writer, an unknown id, a late accept) falls back to the locked
 * transaction, which gives the authoritative answer. The everyday confirm changes its entries
 * holding the queue row only `FOR KEY SHARE`, so those single statements go on meanwhile
 * (`confirmShared`).
 *
 * Compaction: a confirm drops the payloads of the accepted entries it confirms; the rows stay,
 * so every business id keeps answering `alreadyStored` (with an empty payload) after it was
 * confirmed.
 *
 * SQLite: use one `SqliteClient` per database file in a process (it serializes its connection);
 * separate processes on one file are serialized by SQLite's write lock.
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type { Fragment, Identifier } from "@effect/sql/Statement"
import { Config, Effect, Either, Layer, Option } from "effect"
import type { ConfigError } from "effect"
import type {
  DeadLetterRequest,
  DurableProducerQueueService,
  LoadResult,
  QueueEpoch,
  StoredEntry,
  StoreOptions,
  StoreRequest,
  StoreResult
} from "./DurableProducerQueue.js"
import { DurableProducerQueue } from "./DurableProducerQueue.js"
import type { StoreCommand, StoredMessage } from "./internal/ProducerQueueRules.js"
import * as Rules from "./internal/ProducerQueueRules.js"
import type { OperatorTables } from "./internal/SqlOperators.js"
import { makeOperators, operatorTables, StateCode, takeFromBacklog, takeFromBacklogCte } from "./internal/SqlOperators.js"
import type { SqlQueueOptions } from "./internal/SqlQueueSetup.js"
import { setUp } from "./internal/SqlQueueSetup.js"
import {
  inRuns,
  isFastPathMiss,
  mapSqlError,
  mapStoreError,
  pgByteaArray,
  pgInt2Array,
  pgInt8Array,
  pgTextArray,
  toBytes,
  toNumber,
  toParam,
  transaction
} from "./internal/SqlSupport.js"
import type { QueueConflict, QueueFenced, QueueRejected } from "./QueueErrors.js"
import { QueueBackendError } from "./QueueErrors.js"
import type { ReliableConfigError } from "../Protocol/Errors.js"

export type { SqlQueueOptions } from "./internal/SqlQueueSetup.js"
export { checkSqlQueueOptions } from "./internal/SqlQueueSetup.js"

// ---- rows ------------------------------------------------------------------------------------

interface Head {
  readonly epoch: number
  readonly currentSeq: number
  /** Every entry at or below it is confirmed or dead-lettered. */
  readonly lowMark: number
  /** The highest seq a confirm reached. */
  readonly cursor: number
  /** At or below the lowest entry accepted after the cursor passed it; undefined when none is. */
  readonly lateSeq: number | undefined
}

interface HeadRow {
  readonly epoch: number | string
  readonly current_seq: number | string
  readonly confirmed_seq: number | string
  readonly confirm_cursor: number | string
  readonly late_seq: number | string | null
}

interface EntryRow {
  readonly seq: number | string
  readonly business_id: string
  readonly part: number | string
  readonly part_count: number | string
  readonly payload: unknown
  readonly state: number | string
  readonly enqueued_at: number | string | null
  readonly trace: string | null
}

interface StateRow {
  readonly seq: number | string
  readonly business_id: string
  readonly state: number | string
}

/** One row to insert: `seq` absolute, or relative to the allocated base on the fast path. */
interface NewRow {
  readonly seq: number
  readonly businessId: string
  readonly part: number
  readonly partCount: number
  readonly payload: Uint8Array
  /** Stored, or accepted (`storeAccepted`). */
  readonly state: number
  readonly at: number | undefined
  readonly trace: string | undefined
}

const headColumns = "epoch, current_seq, confirmed_seq, confirm_cursor, late_seq"

const decodeHead = (rows: ReadonlyArray<HeadRow>): Head =>
  rows.length === 0 ? { epoch: 0, currentSeq: 0, lowMark: 0, cursor: 0, lateSeq: undefined } : {
    epoch: toNumber(rows[0].epoch),
    currentSeq: toNumber(rows[0].current_seq),
    lowMark: toNumber(rows[0].confirmed_seq),
    cursor: toNumber(rows[0].confirm_cursor),
    lateSeq: rows[0].late_seq === null ? undefined : toNumber(rows[0].late_seq)
  }

const decodeEntry = (row: EntryRow): StoredEntry => {
  const partCount = toNumber(row.part_count)
  const payload = toBytes(row.payload)
  const details = { at: row.enqueued_at === null ? undefined : toNumber(row.enqueued_at), trace: row.trace ?? undefined }
  return partCount === 0
    ? Rules.makeEntry(toNumber(row.seq), row.business_id, payload, undefined, details)
    : Rules.chunkEntry(toNumber(row.seq), row.business_id, toNumber(row.part), partCount, payload, details)
}

/** Groups entry rows (ascending seq) into the messages that own them. */
const decodeMessages = (rows: ReadonlyArray<EntryRow>): Map<string, StoredMessage> => {
  const messages = new Map<string, StoredMessage>()
  for (const row of rows) {
    const entry = decodeEntry(row)
    const state = toNumber(row.state)
    const found = messages.get(row.business_id) ?? {
      messageId: row.business_id,
      entries: [],
      chunked: toNumber(row.part_count) > 0,
      accepted: false,
      deadLettered: false,
      confirmed: false
    }
    messages.set(row.business_id, {
      ...found,
      entries: [...found.entries, entry],
      accepted: found.accepted || state !== StateCode.Stored,
      deadLettered: found.deadLettered || state === StateCode.DeadLettered,
      confirmed: found.confirmed || state === StateCode.Confirmed
    })
  }
  return messages
}

/** What `planAccept` needs: which ids are stored, and whether each is accepted. */
const decodeAcceptance = (rows: ReadonlyArray<StateRow>): Map<string, StoredMessage> =>
  new Map(rows.map((row) => [
    row.business_id,
    {
      messageId: row.business_id,
      entries: [],
      chunked: false,
      accepted: toNumber(row.state) !== StateCode.Stored,
      deadLettered: false,
      confirmed: false
    }
  ]))

/** The seqs of every entry of `ids` among `rows`. */
const seqsOf = (rows: ReadonlyArray<StateRow>, ids: ReadonlyArray<string>): ReadonlyArray<number> => {
  const wanted = new Set(ids)
  return rows.filter((row) => wanted.has(row.business_id)).map((row) => toNumber(row.seq))
}

const rowsOf = (messages: ReadonlyArray<StoredMessage>): ReadonlyArray<NewRow> =>
  messages.flatMap((message) =>
    message.entries.map((entry, index) => ({
      seq: entry.seq,
      businessId: message.messageId,
      part: message.chunked ? index : 0,
      partCount: message.chunked ? message.entries.length : 0,
      payload: entry.payload,
      state: message.accepted ? StateCode.Accepted : StateCode.Stored,
      at: entry.at,
      trace: entry.trace
    }))
  )

const bySeq = (a: EntryRow, b: EntryRow) => toNumber(a.seq) - toNumber(b.seq)

const emptyBytes = new Uint8Array(0)

/** Plans a store against the queue's highest seq and what is stored (see the rules). */
type Planner<E> = (currentSeq: number, lookup: Rules.Lookup) => Either.Either<Rules.StorePlan, E>

/** One queue's statements: the client, the queue's name and its tables. */
interface Queue {
  readonly sql: SqlClient
  readonly name: string
  readonly queues: Identifier
  readonly entries: Identifier
  readonly operators: OperatorTables
}

// ---- statements ------------------------------------------------------------------------------

/** Locks the queue's row for the rest of the transaction and reads it. */
const lockHead = ({ name, queues, sql }: Queue) =>
  Effect.map(
    sql.onDialectOrElse({
      pg: () => sql<HeadRow>`SELECT ${sql.literal(headColumns)} FROM ${queues} WHERE name = ${name} FOR UPDATE`,
      orElse: () => sql<HeadRow>`UPDATE ${queues} SET epoch = epoch WHERE name = ${name} RETURNING ${sql.literal(headColumns)}`
    }),
    decodeHead
  )

const entryColumns = "seq, business_id, part, part_count, payload, state, enqueued_at, trace"

/**
 * The stored messages among `ids`, with their entries. On PostgreSQL each id is looked up on its
 * own (a lateral subquery that `OFFSET 0` keeps from being flattened into a join), so the plan is
 * an index probe per id even when the table's statistics are stale, as they are for a new or
 * fast-growing queue; a scan of the queue by its primary key would grow with the queue. No ORDER
 * BY: SQLite would then walk the whole queue by its primary key.
 */
const selectMessages = ({ entries, name, sql }: Queue, ids: ReadonlyArray<string>) =>
  inRuns(
    sql,
    ids,
    (all) =>
      sql<EntryRow>`SELECT e.* FROM unnest(${pgTextArray(all)}::text[]) AS i(id)
        CROSS JOIN LATERAL (
          SELECT ${sql.literal(entryColumns)} FROM ${entries} WHERE queue = ${name} AND business_id = i.id OFFSET 0
        ) AS e`,
    (run) => sql<EntryRow>`SELECT ${sql.literal(entryColumns)} FROM ${entries} WHERE queue = ${name} AND business_id IN ${sql.in(run)}`
  ).pipe(Effect.map((rows) => decodeMessages([...rows].sort(bySeq))))

/** The rows (seq, state) of the stored messages among `ids`. */
const selectStates = ({ entries, name, sql }: Queue, ids: ReadonlyArray<string>) =>
  inRuns(
    sql,
    ids,
    (all) =>
      sql<StateRow>`SELECT e.seq, e.business_id, e.state FROM unnest(${pgTextArray(all)}::text[]) AS i(id)
        CROSS JOIN LATERAL (
          SELECT seq, business_id, state FROM ${entries} WHERE queue = ${name} AND business_id = i.id OFFSET 0
        ) AS e`,
    (run) => sql<StateRow>`SELECT seq, business_id, state FROM ${entries} WHERE queue = ${name} AND business_id IN ${sql.in(run)}`
  )

/** The rows as `unnest` arguments of a PostgreSQL statement, seqs first when `withSeq`. */
const pgRows = (sql: SqlClient, rows: ReadonlyArray<NewRow>, withSeq: boolean) =>
  sql`${withSeq ? sql`${pgInt8Array(rows.map((row) => row.seq))}::bigint[], ` : sql``}${
    pgTextArray(rows.map((row) => row.businessId))
  }::text[], ${pgInt8Array(rows.map((row) => row.part))}::bigint[], ${pgInt8Array(rows.map((row) => row.partCount))}::bigint[], ${
    pgByteaArray(rows.map((row) => row.payload))
  }::bytea[], ${pgInt2Array(rows.map((row) => row.state))}::smallint[], ${pgInt8Array(rows.map((row) => row.at))}::bigint[], ${
    pgTextArray(rows.map((row) => row.trace))
  }::text[]`

const insertRows = ({ entries, name, sql }: Queue, rows: ReadonlyArray<NewRow>) =>
  inRuns(
    sql,
    rows,
    (all) =>
      sql`INSERT INTO ${entries} (queue, seq, business_id, part, part_count, payload, state, enqueued_at, trace)
        SELECT ${name}, r.seq, r.business_id, r.part, r.part_count, r.payload, r.state, r.enqueued_at, r.trace
        FROM unnest(${pgRows(sql, all, true)}) AS r(seq, business_id, part, part_count, payload, state, enqueued_at, trace)`,
    (run) =>
      sql`INSERT INTO ${entries} ${
        sql.insert(run.map((row) => ({
          queue: name,
          seq: row.seq,
          business_id: row.businessId,
          part: row.part,
          part_count: row.partCount,
          payload: toParam(row.payload),
          state: row.state,
          enqueued_at: row.at ?? null,
          trace: row.trace ?? null
        })))
      }`
  )

/** Accepts stored entries by seq (the primary key). */
const setAccepted = ({ entries, name, sql }: Queue, seqs: ReadonlyArray<number>) =>
  inRuns(
    sql,
    seqs,
    (all) =>
      sql`UPDATE ${entries} SET state = ${StateCode.Accepted}
        WHERE queue = ${name} AND seq = ANY(${pgInt8Array(all)}::bigint[]) AND state = ${StateCode.Stored}`,
    (run) =>
      sql`UPDATE ${entries} SET state = ${StateCode.Accepted} WHERE queue = ${name} AND seq IN ${sql.in(run)} AND state = ${StateCode.Stored}`
  )

/**
 * Accepts entries (locked path) and remembers the lowest one the confirm cursor passed already,
 * so a later confirm and every load find it.
 */
const acceptSeqs = (queue: Queue, head: Head, seqs: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    if (seqs.length === 0) return
    yield* setAccepted(queue, seqs)
    const late = Math.min(...seqs)
    if (late > head.cursor || (head.lateSeq !== undefined && head.lateSeq <= late)) return
    yield* queue.sql`UPDATE ${queue.queues} SET late_seq = ${late} WHERE name = ${queue.name}`
  })

/**
 * The low mark after a change: from where it was, up to just below the first entry still stored
 * or accepted (or the highest seq when there is none). The walk covers only entries finished
 * since, so it stays short.
 */
const lowMarkFrom = (queue: Queue, lowMark: number) => queue.sql`COALESCE(${firstOpenAbove(queue, lowMark)} - 1, current_seq)`

/** A subquery: the seq of the first entry above `after` still stored or accepted (NULL when none). */
const firstOpenAbove = ({ entries, name, sql }: Queue, after: number) =>
  sql`(SELECT seq FROM ${entries} WHERE queue = ${name} AND seq > ${after}
    AND state IN (${StateCode.Stored}, ${StateCode.Accepted}) ORDER BY seq LIMIT 1)`

/** Locks the queue, checks the epoch, then runs `body` in the same transaction. */
const locked = <A, E>(queue: Queue, epoch: QueueEpoch, body: (head: Head) => Effect.Effect<A, E | SqlError>) =>
  transaction(
    queue.sql,
    Effect.gen(function*() {
      const head = yield* lockHead(queue)
      const fenced = Rules.checkEpoch(head.epoch, epoch)
      if (fenced !== undefined) return yield* fenced
      return yield* body(head)
    })
  )

// ---- load ------------------------------------------------------------------------------------

/**
 * Takes the next epoch and reads every accepted entry: the late ones from `late_seq`, the rest
 * above the cursor and the low mark.
 */
const load = (queue: Queue): Effect.Effect<LoadResult, QueueBackendError> => {
  const { entries, name, queues, sql } = queue
  return transaction(
    sql,
    Effect.gen(function*() {
      const head = decodeHead(
        yield* sql<HeadRow>`INSERT INTO ${queues} (name, epoch, current_seq, confirmed_seq)
          VALUES (${name}, 1, 0, 0)
          ON CONFLICT (name) DO UPDATE SET epoch = ${queues}.epoch + 1
          RETURNING ${sql.literal(headColumns)}`
      )
      const from = Math.min(head.lateSeq ?? Infinity, Math.max(head.cursor, head.lowMark) + 1)
      const rows = yield* sql<EntryRow>`SELECT ${sql.literal(entryColumns)} FROM ${entries}
        WHERE queue = ${name} AND seq >= ${from} AND state = ${StateCode.Accepted} ORDER BY seq`
      return {
        epoch: head.epoch,
        state: { currentSeq: head.currentSeq, confirmedSeq: head.lowMark, unconfirmed: rows.map(decodeEntry) }
      }
    })
  ).pipe(Effect.mapError((cause) => new QueueBackendError({ operation: "load", cause })))
}

// ---- store -----------------------------------------------------------------------------------

/** The authoritative store: lock the queue, read what is stored, plan, append. */
const storeLocked = <E>(queue: Queue, epoch: QueueEpoch, command: StoreCommand, plan: Planner<E>) =>
  locked(queue, epoch, (head) =>
    Effect.gen(function*() {
      const existing = yield* selectMessages(queue, Rules.commandIds(command))
      const planned = yield* plan(head.currentSeq, (id) => existing.get(id))
      if (planned.appended.length > 0) {
        yield* insertRows(queue, rowsOf(planned.appended))
        yield* queue.sql`UPDATE ${queue.queues} SET current_seq = ${planned.currentSeq} WHERE name = ${queue.name}`
      }
      yield* acceptSeqs(queue, head, planned.accepts.flatMap((message) => message.entries.map((entry) => entry.seq)))
      yield* takeFromBacklog(queue.operators, Rules.backlogIds(command))
      return planned.results
    }))

/** Rows for the single-statement store: `unnest(...) AS r(..., seq)` with seqs from 1, and the values to insert. */
interface FastRows {
  readonly count: number
  readonly unnest: Fragment
  readonly values: Fragment
}

/** The rows of a draft plan (any store): every column from its own array. */
const plannedRows = (sql: SqlClient, appended: ReadonlyArray<StoredMessage>): FastRows => {
  const rows = rowsOf(appended)
  return {
    count: rows.length,
    unnest: sql`unnest(${pgRows(sql, rows, false)}) WITH ORDINALITY
      AS r(business_id, part, part_count, payload, state, enqueued_at, trace, seq)`,
    values: sql`r.business_id, r.part, r.part_count, r.payload, r.state, r.enqueued_at, r.trace`
  }
}

/**
 * The rows of whole messages with distinct ids (the everyday store), straight from the requests:
 * no plan, no row objects, and what every row shares (part, part count, state, and the trace
 * when none has one) is a constant of the statement. Undefined when two requests share an id.
 */
const wholeRows = (sql: SqlClient, requests: ReadonlyArray<StoreRequest>, state: number): FastRows | undefined => {
  const count = requests.length
  const ids = new Array<string>(count)
  const payloads = new Array<Uint8Array>(count)
  const ats = new Array<number | undefined>(count)
  let traces: Array<string | undefined> | undefined
  for (let index = 0; index < count; index++) {
    const request = requests[index]
    ids[index] = request.messageId
    payloads[index] = request.payload
    ats[index] = request.at
    if (request.trace !== undefined) (traces ??= new Array<string | undefined>(count))[index] = request.trace
  }
  if (new Set(ids).size !== count) return undefined
  const columns = sql`${pgTextArray(ids)}::text[], ${pgByteaArray(payloads)}::bytea[], ${pgInt8Array(ats)}::bigint[]`
  return traces === undefined
    ? {
      count,
      unnest: sql`unnest(${columns}) WITH ORDINALITY AS r(business_id, payload, enqueued_at, seq)`,
      values: sql`r.business_id, 0, 0, r.payload, ${sql.literal(String(state))}, r.enqueued_at, NULL`
    }
    : {
      count,
      unnest: sql`unnest(${columns}, ${pgTextArray(Array.from(traces))}::text[]) WITH ORDINALITY
        AS r(business_id, payload, enqueued_at, trace, seq)`,
      values: sql`r.business_id, 0, 0, r.payload, ${sql.literal(String(state))}, r.enqueued_at, r.trace`
    }
}

/**
 * PostgreSQL, one statement: assume every id is new, allocate the seqs and insert (and take the
 * ids out of the backlog), all guarded by the epoch. A stored id trips the unique index and the
 * statement writes nothing; a stale epoch matches no queue row. Either way `None` sends the
 * request to the locked path. Whole messages with distinct ids (`whole`, stored in `state`) skip
 * the draft plan: their answers are `newWholeResults`, which is what the plan would say.
 */
const storeFast = <E>(
  queue: Queue,
  epoch: QueueEpoch,
  command: StoreCommand,
  plan: Planner<E>,
  whole: { readonly state: number } | undefined
): Effect.Effect<Option.Option<ReadonlyArray<StoreResult>>, SqlError> => {
  if (whole !== undefined && command._tag === "Whole") {
    const rows = wholeRows(queue.sql, command.requests, whole.state)
    if (rows !== undefined) return insertFast(queue, epoch, command, rows, (base) => Option.some(Rules.newWholeResults(base, command.requests)))
  }
  const draft = plan(0, () => undefined)
  if (Either.isLeft(draft) || draft.right.appended.length === 0) return Effect.succeedNone
  return insertFast(queue, epoch, command, plannedRows(queue.sql, draft.right.appended), (base) =>
    Option.map(Option.getRight(plan(base, () => undefined)), (planned) => planned.results))
}

/** The single statement of `storeFast`: the rows take seqs base + 1..count in order; `answer` gives the results from `base`. */
const insertFast = (
  queue: Queue,
  epoch: QueueEpoch,
  command: StoreCommand,
  rows: FastRows,
  answer: (base: number) => Option.Option<ReadonlyArray<StoreResult>>
): Effect.Effect<Option.Option<ReadonlyArray<StoreResult>>, SqlError> => {
  const { entries, name, queues, sql } = queue
  const count = rows.count
  if (count === 0) return Effect.succeedNone
  return sql<{ readonly base: number | string | null; readonly inserted: number | string }>`WITH q AS (
      UPDATE ${queues} SET current_seq = current_seq + ${count}
      WHERE name = ${name} AND epoch = ${epoch}
      RETURNING current_seq - ${count} AS base
    ), inserted AS (
      INSERT INTO ${entries} (queue, seq, business_id, part, part_count, payload, state, enqueued_at, trace)
      SELECT ${name}, q.base + r.seq, ${rows.values}
      FROM q, ${rows.unnest}
      RETURNING 1
    )${takeFromBacklogCte(queue.operators, Rules.backlogIds(command))}
    SELECT (SELECT base FROM q) AS base, (SELECT count(*) FROM inserted) AS inserted`.pipe(
    Effect.map((result) => {
      const row = result[0]
      if (row === undefined || row.base === null || toNumber(row.inserted) !== count) return Option.none()
      return answer(toNumber(row.base))
    }),
    Effect.catchIf(isFastPathMiss, () => Effect.succeedNone)
  )
}

const store = <E>(
  queue: Queue,
  operation: string,
  epoch: QueueEpoch,
  command: StoreCommand,
  plan: Planner<E>,
  whole?: { readonly state: number }
): Effect.Effect<ReadonlyArray<StoreResult>, E | QueueFenced | QueueConflict | QueueRejected | QueueBackendError> => {
  const invalid = Rules.validateStore(command)
  if (invalid !== undefined) return Effect.fail(invalid)
  const run = queue.sql.onDialectOrElse({
    pg: () =>
      Effect.flatMap(storeFast(queue, epoch, command, plan, whole), (fast) =>
        Option.isSome(fast) ? Effect.succeed(fast.value) : storeLocked(queue, epoch, command, plan)),
    orElse: () => storeLocked(queue, epoch, command, plan)
  })
  return mapStoreError(operation)(run)
}

/** Stores whole messages (`store`, `storeBatch`), or stores and accepts them (`storeAccepted`). */
const storeWhole = (
  queue: Queue,
  operation: string,
  epoch: QueueEpoch,
  requests: ReadonlyArray<StoreRequest>,
  accept: boolean
) =>
  store(
    queue,
    operation,
    epoch,
    { _tag: "Whole", requests },
    (currentSeq, lookup) => (accept ? Rules.planWholeAccepted : Rules.planWhole)(currentSeq, lookup, requests),
    { state: accept ? StateCode.Accepted : StateCode.Stored }
  )

const storeChunked = (
  queue: Queue,
  epoch: QueueEpoch,
  messageId: string,
  chunks: ReadonlyArray<Uint8Array>,
  options: StoreOptions | undefined
) =>
  store(
    queue,
    "storeChunked",
    epoch,
    { _tag: "Chunked", messageId, chunks, options },
    (currentSeq, lookup) => Either.right(Rules.planChunked(currentSeq, lookup, messageId, chunks, options))
  )

// ---- accept ----------------------------------------------------------------------------------

const acceptLocked = (queue: Queue, epoch: QueueEpoch, ids: ReadonlyArray<string>) =>
  locked(queue, epoch, (head) =>
    Effect.gen(function*() {
      const rows = yield* selectStates(queue, ids)
      const found = decodeAcceptance(rows)
      const toAccept = yield* Rules.planAccept((id) => found.get(id), ids)
      yield* acceptSeqs(queue, head, seqsOf(rows, toAccept))
    }))

/**
 * PostgreSQL, one statement: accept one message above the confirm cursor when the epoch holds.
 * The shared lock on the queue row orders it against `load` and `confirm`, which update that row.
 * No row updated (unknown id, already accepted, stale epoch, a late accept) sends the request to
 * the locked path.
 */
const acceptOneFast = ({ entries, name, queues, sql }: Queue, epoch: QueueEpoch, id: string) =>
  sql`UPDATE ${entries} AS e SET state = ${StateCode.Accepted}
    FROM (SELECT epoch, confirm_cursor FROM ${queues} WHERE name = ${name} FOR SHARE) AS q
    WHERE e.queue = ${name} AND e.business_id = ${id} AND e.state = ${StateCode.Stored} AND q.epoch = ${epoch}
      AND e.seq > q.confirm_cursor
    RETURNING e.seq`.pipe(Effect.map((rows) => rows.length > 0))

/**
 * PostgreSQL, one statement: accept several messages when the epoch holds, every id is stored and
 * none is late (a failed batch must write nothing); otherwise write nothing and return false. The
 * entries are found id by id (a lateral join) and updated by seq, so the plan never scans the
 * queue.
 */
const acceptManyFast = ({ entries, name, queues, sql }: Queue, epoch: QueueEpoch, ids: ReadonlyArray<string>) =>
  sql<{ readonly epoch: number | string | null; readonly found: number | string; readonly late: number | string }>`WITH q AS (
      SELECT epoch, confirm_cursor FROM ${queues} WHERE name = ${name} FOR SHARE
    ), found AS (
      SELECT e.seq, e.business_id, e.state FROM unnest(${pgTextArray(ids)}::text[]) AS i(id)
      CROSS JOIN LATERAL (
        SELECT seq, business_id, state FROM ${entries} WHERE queue = ${name} AND business_id = i.id OFFSET 0
      ) AS e
    ), counted AS (
      SELECT count(DISTINCT business_id) AS n,
        count(*) FILTER (WHERE state = ${StateCode.Stored} AND seq <= (SELECT confirm_cursor FROM q)) AS late
      FROM found
    ), updated AS (
      UPDATE ${entries} SET state = ${StateCode.Accepted}
      WHERE queue = ${name} AND seq = ANY(ARRAY(SELECT seq FROM found WHERE state = ${StateCode.Stored}))
        AND state = ${StateCode.Stored}
        AND (SELECT epoch FROM q) = ${epoch} AND (SELECT n FROM counted) = ${ids.length} AND (SELECT late FROM counted) = 0
      RETURNING 1
    )
    SELECT (SELECT epoch FROM q) AS epoch, (SELECT n FROM counted) AS found, (SELECT late FROM counted) AS late,
      (SELECT count(*) FROM updated) AS updated`
    .pipe(
      Effect.map((rows) =>
        rows.length === 1 && rows[0].epoch !== null && toNumber(rows[0].epoch) === epoch &&
        toNumber(rows[0].found) === ids.length && toNumber(rows[0].late) === 0
      )
    )

const accept = (
  queue: Queue,
  operation: string,
  epoch: QueueEpoch,
  messageIds: ReadonlyArray<string>
): Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError> => {
  const ids = Rules.distinct(messageIds)
  const fast = ids.length === 0
    ? Effect.succeed(false)
    : (ids.length === 1 ? acceptOneFast(queue, epoch, ids[0]) : acceptManyFast(queue, epoch, ids)).pipe(
      Effect.catchIf(isFastPathMiss, () => Effect.succeed(false))
    )
  const run = queue.sql.onDialectOrElse({
    pg: () => Effect.flatMap(fast, (done) => done ? Effect.void : acceptLocked(queue, epoch, ids)),
    orElse: () => acceptLocked(queue, epoch, ids)
  })
  return mapSqlError(operation)(run)
}

// ---- confirm ---------------------------------------------------------------------------------

/** Marks the accepted entries in [from, to] confirmed, dropping their payloads. */
const confirmRange = ({ entries, name, sql }: Queue, from: number, to: number) =>
  from > to ? Effect.void : Effect.asVoid(
    sql`UPDATE ${entries} SET state = ${StateCode.Confirmed}, payload = ${toParam(emptyBytes)}
      WHERE queue = ${name} AND seq >= ${from} AND seq <= ${to} AND state = ${StateCode.Accepted}`
  )

/**
 * Confirms the accepted entries up to `upToSeq`: those above the cursor (the everyday run of
 * recent entries), and the late ones when `late_seq` says there are some. Then the low mark moves
 * up, and the cursor with the confirm.
 */
const confirmLocked = (queue: Queue, epoch: QueueEpoch, upToSeq: number) => {
  const { entries, name, queues, sql } = queue
  return locked(queue, epoch, (head) =>
    Effect.gen(function*() {
      const upTo = yield* Rules.planConfirm(head.currentSeq, head.lowMark, upToSeq)
      if (upTo === undefined) return
      yield* confirmRange(queue, Math.max(head.cursor, head.lowMark) + 1, upTo)
      let lateSeq = head.lateSeq
      if (lateSeq !== undefined && lateSeq <= upTo) {
        yield* confirmRange(queue, lateSeq, Math.min(upTo, head.cursor))
        const left = upTo >= head.cursor ? [] : yield* sql<{ readonly seq: number | string }>`SELECT seq FROM ${entries}
          WHERE queue = ${name} AND seq > ${upTo} AND seq <= ${head.cursor} AND state = ${StateCode.Accepted}
          ORDER BY seq LIMIT 1`
        lateSeq = left.length === 0 ? undefined : toNumber(left[0].seq)
      }
      yield* sql`UPDATE ${queues} SET confirmed_seq = ${lowMarkFrom(queue, head.lowMark)},
        confirm_cursor = ${Math.max(head.cursor, upTo)}, late_seq = ${lateSeq ?? null}
        WHERE name = ${name}`
    }))
}

/**
 * Confirms the accepted entries in [from, to] (see `confirmRange`) and counts them; `above` is
 * the first stored or accepted entry above `to` (the statement's snapshot: none of those change).
 */
const confirmRun = (queue: Queue, from: number, to: number) => {
  const { entries, name, sql } = queue
  return Effect.map(
    sql<{ readonly confirmed: number | string; readonly above: number | string | null }>`WITH c AS (
        UPDATE ${entries} SET state = ${StateCode.Confirmed}, payload = ${toParam(emptyBytes)}
        WHERE queue = ${name} AND seq >= ${from} AND seq <= ${to} AND state = ${StateCode.Accepted}
        RETURNING 1
      )
      SELECT (SELECT count(*) FROM c) AS confirmed, ${firstOpenAbove(queue, to)} AS above`,
    (rows) => ({ confirmed: toNumber(rows[0].confirmed), above: rows[0].above === null ? undefined : toNumber(rows[0].above) })
  )
}

/** The first stored or accepted entry above `after`, if any. */
const firstOpen = (queue: Queue, after: number) =>
  Effect.map(
    queue.sql<{ readonly seq: number | string | null }>`SELECT ${firstOpenAbove(queue, after)} AS seq`,
    (rows) => rows[0].seq === null ? undefined : toNumber(rows[0].seq)
  )

/** The shared confirm met what only the locked one settles: a late entry, or a changed epoch. */
const useLocked = { _tag: "UseLocked" } as const

/**
 * PostgreSQL, the everyday confirm, without keeping the queue's stores waiting while thousands of
 * entries change: the queue row is only `FOR KEY SHARE` locked, which keeps out every writer that
 * locks it `FOR UPDATE` (the locked paths, a dead letter, another confirm) but not the
 * single-statement stores and accepts, nor a `load`. Those can only append entries above the
 * highest seq read here, accept stored entries, or take the next epoch; so the low mark is taken
 * from what was read, an entry still open in the confirmed range (stored, or accepted meanwhile)
 * makes it lock the row and confirm the range again, and the cursor moves only if the epoch still
 * holds. Late entries, or a new epoch, roll it back to `confirmLocked`.
 */
const confirmShared = (queue: Queue, epoch: QueueEpoch, upToSeq: number) => {
  const { name, queues, sql } = queue
  return transaction(
    sql,
    Effect.gen(function*() {
      const head = decodeHead(yield* sql<HeadRow>`SELECT ${sql.literal(headColumns)} FROM ${queues} WHERE name = ${name} FOR KEY SHARE`)
      const fenced = Rules.checkEpoch(head.epoch, epoch)
      if (fenced !== undefined) return yield* fenced
      const upTo = yield* Rules.planConfirm(head.currentSeq, head.lowMark, upToSeq)
      if (upTo === undefined) return
      if (head.lateSeq !== undefined && head.lateSeq <= upTo) return yield* Effect.fail(useLocked)
      const from = Math.max(head.cursor, head.lowMark) + 1
      const ran = yield* confirmRun(queue, from, upTo)
      // Everyday: the range starts right above the low mark and every entry in it was accepted,
      // so all below `upTo` is finished and the first open entry is the one found above it.
      const open = from === head.lowMark + 1 && ran.confirmed === upTo - from + 1 ? ran.above : yield* firstOpen(queue, head.lowMark)
      const lowMark = open === undefined ? head.currentSeq : Math.min(open - 1, head.currentSeq)
      if (lowMark < upTo) {
        // An entry of the range may be accepted right now: with the row locked no accept can be.
        yield* sql`SELECT 1 FROM ${queues} WHERE name = ${name} FOR UPDATE`
        yield* confirmRange(queue, from, upTo)
      }
      const moved = yield* sql`UPDATE ${queues} SET confirmed_seq = ${lowMark}, confirm_cursor = ${Math.max(head.cursor, upTo)}
        WHERE name = ${name} AND epoch = ${epoch} RETURNING 1`
      if (moved.length === 0) return yield* Effect.fail(useLocked)
    })
  )
}

const confirm = (
  queue: Queue,
  epoch: QueueEpoch,
  upToSeq: number
): Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError> =>
  queue.sql.onDialectOrElse({
    pg: () =>
      Effect.catchAll(confirmShared(queue, epoch, upToSeq), (error) =>
        error._tag === "UseLocked" || (error._tag === "SqlError" && isFastPathMiss(error))
          ? confirmLocked(queue, epoch, upToSeq)
          : Effect.fail(error)),
    orElse: () => confirmLocked(queue, epoch, upToSeq)
  }).pipe(mapSqlError("confirm"))

// ---- dead letters ----------------------------------------------------------------------------

/** Marks a message dead-lettered (every chunk), keeping its payload; the low mark moves past it. */
const deadLetter = (
  queue: Queue,
  epoch: QueueEpoch,
  request: DeadLetterRequest
): Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError> => {
  const { entries, name, queues, sql } = queue
  return locked(queue, epoch, (head) =>
    Effect.gen(function*() {
      const found = yield* selectMessages(queue, [request.messageId])
      const message = yield* Rules.planDeadLetter((id) => found.get(id), request)
      if (message === undefined) return
      yield* sql`UPDATE ${entries} SET state = ${StateCode.DeadLettered}, attempts = ${request.attempts},
        last_error = ${request.lastError}, dead_at = ${request.at}
        WHERE queue = ${name} AND business_id = ${request.messageId}`
      yield* sql`UPDATE ${queues} SET confirmed_seq = ${lowMarkFrom(queue, head.lowMark)} WHERE name = ${name}`
    })).pipe(mapSqlError("deadLetter"))
}

// ---- the service -----------------------------------------------------------------------------

/** Builds a SQL producer queue named `options.queueName`, running the migrations first. */
export const makeSql = (
  options: SqlQueueOptions
): Effect.Effect<DurableProducerQueueService, QueueBackendError | ReliableConfigError, SqlClient> =>
  Effect.gen(function*() {
    const { listener, sql, tables: t } = yield* setUp("DurableQueue.makeSql", options)
    const operators = operatorTables(sql, t, options.queueName, "producer")
    const queue: Queue = { sql, name: options.queueName, queues: operators.queues, entries: operators.entries, operators }
    return {
      ...makeOperators(operators, listener),
      load: load(queue),
      store: (epoch, request) => Effect.map(storeWhole(queue, "store", epoch, [request], false), (results) => results[0]),
      storeChunked: (epoch, messageId, chunks, storeOptions) =>
        Effect.map(storeChunked(queue, epoch, messageId, chunks, storeOptions), (results) => results[0]),
      storeBatch: (epoch, requests) => storeWhole(queue, "storeBatch", epoch, requests, false),
      accept: (epoch, messageId) => accept(queue, "accept", epoch, [messageId]),
      acceptBatch: (epoch, messageIds) => accept(queue, "acceptBatch", epoch, messageIds),
      confirm: (epoch, upToSeq) => confirm(queue, epoch, upToSeq),
      storeAccepted: (epoch, requests) => storeWhole(queue, "storeAccepted", epoch, requests, true),
      deadLetter: (epoch, request) => deadLetter(queue, epoch, request)
    }
  })

/** The SQL producer queue as a layer; the tables are created (if missing) when it is built. */
export const layerSql = (
  options: SqlQueueOptions
): Layer.Layer<DurableProducerQueue, QueueBackendError | ReliableConfigError, SqlClient> =>
  Layer.effect(DurableProducerQueue, makeSql(options))

/**
 * `layerSql` with its options read from Effect `Config` (e.g. the environment), as
 * `PgClient.layerConfig` reads its own: `layerSqlConfig({ queueName: Config.string("QUEUE_NAME") })`.
 * A value `Config` cannot read is a `ConfigError`; a value it reads but the queue refuses (a bad
 * table prefix, a blank name) is a `ReliableConfigError`.
 */
export const layerSqlConfig = (
  config: Config.Config.Wrap<SqlQueueOptions>
): Layer.Layer<DurableProducerQueue, ConfigError.ConfigError | QueueBackendError | ReliableConfigError, SqlClient> =>
  Layer.unwrapEffect(Effect.map(Config.unwrap(config), layerSql))
