/**
 * `DurableProducerQueue` on `@effect/sql`, for PostgreSQL (`@effect/sql-pg`) and SQLite
 * (`@effect/sql-sqlite-node`). One code path decides every request with the same rules as the
 * in-memory queue; only the statements differ per dialect.
 *
 * Storage: `<prefix>producer_queues` holds one row per queue (epoch, highest seq, watermark);
 * `<prefix>producer_entries` one row per stored entry (a whole message, or one chunk of a chunked
 * batch), keyed by queue name, so many queues share one database. The tables are created by
 * migrations when the layer is built.
 *
 * Concurrency: every write locks its queue's row first (`SELECT ... FOR UPDATE` in a READ
 * COMMITTED transaction on PostgreSQL; a writing first statement on SQLite, which takes the
 * database write lock) and checks the epoch in that transaction. On PostgreSQL the everyday
 * writes (storing new messages, accepting stored ones) run as single statements that check the
 * epoch and write atomically, one round trip each; anything they cannot settle (an id stored
 * before, a fenced writer, an unknown id) falls back to the locked transaction, which gives the
 * authoritative answer.
 *
 * Compaction: a confirm drops the payloads of the accepted entries it confirms; the rows stay,
 * so every business id keeps answering `alreadyStored` (with an empty payload) after it was
 * confirmed.
 *
 * SQLite: use one `SqliteClient` per database file in a process (it serializes its connection);
 * separate processes on one file are serialized by SQLite's write lock.
 */
import { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type { Identifier } from "@effect/sql/Statement"
import { Effect, Either, Layer, Option } from "effect"
import type {
  DurableProducerQueueService,
  LoadResult,
  QueueEpoch,
  QueueOperatorService,
  StoredEntry,
  StoreRequest,
  StoreResult
} from "./DurableProducerQueue.js"
import { DurableProducerQueue } from "./DurableProducerQueue.js"
import type { StoreCommand, StoredMessage } from "./internal/ProducerQueueRules.js"
import * as Rules from "./internal/ProducerQueueRules.js"
import { migrate, tables } from "./internal/SqlSchema.js"
import {
  dialectOf,
  inRuns,
  isFastPathMiss,
  mapSqlError,
  mapStoreError,
  toBytes,
  toNumber,
  toParam,
  transaction
} from "./internal/SqlSupport.js"
import type { QueueConflict, QueueFenced, QueueRejected } from "./QueueErrors.js"
import { QueueBackendError } from "./QueueErrors.js"
import * as Config from "../Protocol/Config.js"
import type { ReliableConfigError } from "../Protocol/Errors.js"

export interface SqlQueueOptions {
  /** The queue's name; every row of the queue is keyed by it. */
  readonly queueName: string
  /** The prefix of every table name (letters, digits, `_`); default `reliable_`. */
  readonly tablePrefix?: string | undefined
}

const sqlQueueKeys = Config.optionKeys<SqlQueueOptions>({ queueName: true, tablePrefix: true })

/** Checks the options of a SQL queue (producer or work queue) before it touches the database. */
export const checkSqlQueueOptions = (constructor: string, options: SqlQueueOptions): Effect.Effect<void, ReliableConfigError> =>
  Effect.all([
    Config.checkKeys(constructor, options, sqlQueueKeys),
    Config.checkName("queueName", options.queueName),
    Config.checkTablePrefix(options.tablePrefix)
  ], { discard: true })

// ---- rows ------------------------------------------------------------------------------------

interface Head {
  readonly epoch: number
  readonly currentSeq: number
  readonly confirmedSeq: number
}

interface HeadRow {
  readonly epoch: number | string
  readonly current_seq: number | string
  readonly confirmed_seq: number | string
}

interface EntryRow {
  readonly seq: number | string
  readonly business_id: string
  readonly part: number | string
  readonly part_count: number | string
  readonly payload: unknown
  readonly accepted: number | string
}

interface AcceptanceRow {
  readonly seq: number | string
  readonly business_id: string
  readonly accepted: number | string
}

/** One row to insert: `seq` absolute, or relative to the allocated base on the fast path. */
interface NewRow {
  readonly seq: number
  readonly businessId: string
  readonly part: number
  readonly partCount: number
  readonly payload: Uint8Array
  /** 1 when stored accepted (`storeAccepted`), else 0. */
  readonly accepted: number
}

const decodeHead = (rows: ReadonlyArray<HeadRow>): Head =>
  rows.length === 0 ? { epoch: 0, currentSeq: 0, confirmedSeq: 0 } : {
    epoch: toNumber(rows[0].epoch),
    currentSeq: toNumber(rows[0].current_seq),
    confirmedSeq: toNumber(rows[0].confirmed_seq)
  }

const decodeEntry = (row: EntryRow): StoredEntry => {
  const partCount = toNumber(row.part_count)
  const payload = toBytes(row.payload)
  return partCount === 0
    ? Rules.makeEntry(toNumber(row.seq), row.business_id, payload)
    : Rules.chunkEntry(toNumber(row.seq), row.business_id, toNumber(row.part), partCount, payload)
}

/** Groups entry rows (ascending seq) into the messages that own them. */
const decodeMessages = (rows: ReadonlyArray<EntryRow>): Map<string, StoredMessage> => {
  const messages = new Map<string, StoredMessage>()
  for (const row of rows) {
    const entry = decodeEntry(row)
    const found = messages.get(row.business_id)
    messages.set(
      row.business_id,
      found === undefined
        ? {
          messageId: row.business_id,
          entries: [entry],
          chunked: toNumber(row.part_count) > 0,
          accepted: toNumber(row.accepted) === 1,
          deadLettered: false,
          confirmed: false
        }
        : { ...found, entries: [...found.entries, entry] }
    )
  }
  return messages
}

/** What `planAccept` needs: which ids are stored, and whether each is accepted. */
const decodeAcceptance = (rows: ReadonlyArray<AcceptanceRow>): Map<string, StoredMessage> =>
  new Map(rows.map((row) => [
    row.business_id,
    { messageId: row.business_id, entries: [], chunked: false, accepted: toNumber(row.accepted) === 1, deadLettered: false, confirmed: false }
  ]))

/** The seqs of every entry of `ids` among `rows`. */
const seqsOf = (rows: ReadonlyArray<AcceptanceRow>, ids: ReadonlyArray<string>): ReadonlyArray<number> => {
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
      accepted: message.accepted ? 1 : 0
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
}

// ---- statements ------------------------------------------------------------------------------

/** Locks the queue's row for the rest of the transaction and reads it. */
const lockHead = ({ name, queues, sql }: Queue) =>
  Effect.map(
    sql.onDialectOrElse({
      pg: () => sql<HeadRow>`SELECT epoch, current_seq, confirmed_seq FROM ${queues} WHERE name = ${name} FOR UPDATE`,
      orElse: () =>
        sql<HeadRow>`UPDATE ${queues} SET epoch = epoch WHERE name = ${name}
          RETURNING epoch, current_seq, confirmed_seq`
    }),
    decodeHead
  )

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
      sql<EntryRow>`SELECT e.seq, e.business_id, e.part, e.part_count, e.payload, e.accepted
        FROM unnest(${all}::text[]) AS i(id)
        CROSS JOIN LATERAL (
          SELECT seq, business_id, part, part_count, payload, accepted FROM ${entries}
          WHERE queue = ${name} AND business_id = i.id OFFSET 0
        ) AS e`,
    (run) =>
      sql<EntryRow>`SELECT seq, business_id, part, part_count, payload, accepted FROM ${entries}
        WHERE queue = ${name} AND business_id IN ${sql.in(run)}`
  ).pipe(Effect.map((rows) => decodeMessages([...rows].sort(bySeq))))

/** The rows (seq, acceptance) of the stored messages among `ids`. */
const selectAcceptance = ({ entries, name, sql }: Queue, ids: ReadonlyArray<string>) =>
  inRuns(
    sql,
    ids,
    (all) =>
      sql<AcceptanceRow>`SELECT e.seq, e.business_id, e.accepted FROM unnest(${all}::text[]) AS i(id)
        CROSS JOIN LATERAL (
          SELECT seq, business_id, accepted FROM ${entries} WHERE queue = ${name} AND business_id = i.id OFFSET 0
        ) AS e`,
    (run) =>
      sql<AcceptanceRow>`SELECT seq, business_id, accepted FROM ${entries}
        WHERE queue = ${name} AND business_id IN ${sql.in(run)}`
  )

const insertRows = ({ entries, name, sql }: Queue, rows: ReadonlyArray<NewRow>) =>
  inRuns(
    sql,
    rows,
    (all) =>
      sql`INSERT INTO ${entries} (queue, seq, business_id, part, part_count, payload, accepted)
        SELECT ${name}, r.seq, r.business_id, r.part, r.part_count, r.payload, r.accepted
        FROM unnest(
          ${all.map((row) => row.seq)}::bigint[], ${all.map((row) => row.businessId)}::text[],
          ${all.map((row) => row.part)}::int[], ${all.map((row) => row.partCount)}::int[],
          ${all.map((row) => toParam(row.payload))}::bytea[], ${all.map((row) => row.accepted)}::smallint[]
        ) AS r(seq, business_id, part, part_count, payload, accepted)`,
    (run) =>
      sql`INSERT INTO ${entries} ${
        sql.insert(run.map((row) => ({
          queue: name,
          seq: row.seq,
          business_id: row.businessId,
          part: row.part,
          part_count: row.partCount,
          payload: toParam(row.payload),
          accepted: row.accepted
        })))
      }`
  )

/** Accepts entries by seq (the primary key). */
const setAccepted = ({ entries, name, sql }: Queue, seqs: ReadonlyArray<number>) =>
  inRuns(
    sql,
    seqs,
    (all) => sql`UPDATE ${entries} SET accepted = 1 WHERE queue = ${name} AND seq = ANY(${all}::bigint[])`,
    (run) => sql`UPDATE ${entries} SET accepted = 1 WHERE queue = ${name} AND seq IN ${sql.in(run)}`
  )

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

/** Takes the next epoch and reads the accepted entries above the watermark. */
const load = (queue: Queue): Effect.Effect<LoadResult, QueueBackendError> => {
  const { entries, name, queues, sql } = queue
  return transaction(
    sql,
    Effect.gen(function*() {
      const head = decodeHead(
        yield* sql<HeadRow>`INSERT INTO ${queues} (name, epoch, current_seq, confirmed_seq)
          VALUES (${name}, 1, 0, 0)
          ON CONFLICT (name) DO UPDATE SET epoch = ${queues}.epoch + 1
          RETURNING epoch, current_seq, confirmed_seq`
      )
      const rows = yield* sql<EntryRow>`SELECT seq, business_id, part, part_count, payload, accepted
        FROM ${entries} WHERE queue = ${name} AND seq > ${head.confirmedSeq} AND accepted = 1 ORDER BY seq`
      return {
        epoch: head.epoch,
        state: { currentSeq: head.currentSeq, confirmedSeq: head.confirmedSeq, unconfirmed: rows.map(decodeEntry) }
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
      if (planned.accepts.length > 0) {
        yield* setAccepted(queue, planned.accepts.flatMap((message) => message.entries.map((entry) => entry.seq)))
      }
      return planned.results
    }))

/**
 * PostgreSQL, one statement: assume every id is new, allocate the seqs and insert, all guarded by
 * the epoch. A stored id trips the unique index and the statement writes nothing; a stale epoch
 * matches no queue row. Either way `None` sends the request to the locked path.
 */
const storeFast = <E>(
  { entries, name, queues, sql }: Queue,
  epoch: QueueEpoch,
  plan: Planner<E>
): Effect.Effect<Option.Option<ReadonlyArray<StoreResult>>, SqlError> => {
  const draft = plan(0, () => undefined)
  if (Either.isLeft(draft) || draft.right.appended.length === 0) return Effect.succeedNone
  const rows = rowsOf(draft.right.appended)
  const count = draft.right.currentSeq
  // The rows take seqs base + 1..count in order (the draft planned them from 0).
  return sql<{ readonly base: number | string | null; readonly inserted: number | string }>`WITH q AS (
      UPDATE ${queues} SET current_seq = current_seq + ${count}
      WHERE name = ${name} AND epoch = ${epoch}
      RETURNING current_seq - ${count} AS base
    ), inserted AS (
      INSERT INTO ${entries} (queue, seq, business_id, part, part_count, payload, accepted)
      SELECT ${name}, q.base + r.seq, r.business_id, r.part, r.part_count, r.payload, r.accepted
      FROM q, unnest(
        ${rows.map((row) => row.businessId)}::text[], ${rows.map((row) => row.part)}::int[],
        ${rows.map((row) => row.partCount)}::int[], ${rows.map((row) => toParam(row.payload))}::bytea[],
        ${rows.map((row) => row.accepted)}::smallint[]
      ) WITH ORDINALITY AS r(business_id, part, part_count, payload, accepted, seq)
      RETURNING 1
    )
    SELECT (SELECT base FROM q) AS base, (SELECT count(*) FROM inserted) AS inserted`.pipe(
    Effect.map((result) => {
      const row = result[0]
      if (row === undefined || row.base === null || toNumber(row.inserted) !== rows.length) return Option.none()
      return Option.map(Option.getRight(plan(toNumber(row.base), () => undefined)), (planned) => planned.results)
    }),
    Effect.catchIf(isFastPathMiss, () => Effect.succeedNone)
  )
}

const store = <E>(
  queue: Queue,
  operation: string,
  epoch: QueueEpoch,
  command: StoreCommand,
  plan: Planner<E>
): Effect.Effect<ReadonlyArray<StoreResult>, E | QueueFenced | QueueConflict | QueueRejected | QueueBackendError> => {
  const invalid = Rules.validateStore(command)
  if (invalid !== undefined) return Effect.fail(invalid)
  const run = queue.sql.onDialectOrElse({
    pg: () =>
      Effect.flatMap(storeFast(queue, epoch, plan), (fast) =>
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
  store(queue, operation, epoch, { _tag: "Whole", requests }, (currentSeq, lookup) =>
    (accept ? Rules.planWholeAccepted : Rules.planWhole)(currentSeq, lookup, requests))

const storeChunked = (queue: Queue, epoch: QueueEpoch, messageId: string, chunks: ReadonlyArray<Uint8Array>) =>
  store(
    queue,
    "storeChunked",
    epoch,
    { _tag: "Chunked", messageId, chunks },
    (currentSeq, lookup) => Either.right(Rules.planChunked(currentSeq, lookup, messageId, chunks))
  )

// ---- accept ----------------------------------------------------------------------------------

const acceptLocked = (queue: Queue, epoch: QueueEpoch, ids: ReadonlyArray<string>) =>
  locked(queue, epoch, () =>
    Effect.gen(function*() {
      const rows = yield* selectAcceptance(queue, ids)
      const found = decodeAcceptance(rows)
      const toAccept = yield* Rules.planAccept((id) => found.get(id), ids)
      yield* setAccepted(queue, seqsOf(rows, toAccept))
    }))

/**
 * PostgreSQL, one statement: accept one message when the epoch holds. The shared lock on the queue
 * row orders it against `load`, which updates that row. No row updated (unknown id, already
 * accepted, stale epoch) sends the request to the locked path.
 */
const acceptOneFast = ({ entries, name, queues, sql }: Queue, epoch: QueueEpoch, id: string) =>
  sql`UPDATE ${entries} AS e SET accepted = 1
    FROM (SELECT epoch FROM ${queues} WHERE name = ${name} FOR SHARE) AS q
    WHERE e.queue = ${name} AND e.business_id = ${id} AND e.accepted = 0 AND q.epoch = ${epoch}
    RETURNING e.seq`.pipe(Effect.map((rows) => rows.length > 0))

/**
 * PostgreSQL, one statement: accept several messages when the epoch holds and every id is stored
 * (a failed batch must write nothing); otherwise write nothing and return false. The entries are
 * found id by id (a lateral join) and updated by seq, so the plan never scans the queue.
 */
const acceptManyFast = ({ entries, name, queues, sql }: Queue, epoch: QueueEpoch, ids: ReadonlyArray<string>) =>
  sql<{ readonly epoch: number | string | null; readonly found: number | string }>`WITH q AS (
      SELECT epoch FROM ${queues} WHERE name = ${name} FOR SHARE
    ), found AS (
      SELECT e.seq, e.business_id, e.accepted FROM unnest(${ids}::text[]) AS i(id)
      CROSS JOIN LATERAL (
        SELECT seq, business_id, accepted FROM ${entries} WHERE queue = ${name} AND business_id = i.id OFFSET 0
      ) AS e
    ), counted AS (
      SELECT count(DISTINCT business_id) AS n FROM found
    ), updated AS (
      UPDATE ${entries} SET accepted = 1
      WHERE queue = ${name} AND seq = ANY(ARRAY(SELECT seq FROM found WHERE accepted = 0)) AND accepted = 0
        AND (SELECT epoch FROM q) = ${epoch} AND (SELECT n FROM counted) = ${ids.length}
      RETURNING 1
    )
    SELECT (SELECT epoch FROM q) AS epoch, (SELECT n FROM counted) AS found, (SELECT count(*) FROM updated) AS updated`
    .pipe(
      Effect.map((rows) =>
        rows.length === 1 && rows[0].epoch !== null && toNumber(rows[0].epoch) === epoch &&
        toNumber(rows[0].found) === ids.length
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

/**
 * Raises the watermark and compacts the payloads of the accepted entries it confirms (a stored,
 * never-accepted message keeps its payload for the resubmission that follows).
 */
const confirm = (
  queue: Queue,
  epoch: QueueEpoch,
  upToSeq: number
): Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError> => {
  const { entries, name, queues, sql } = queue
  return locked(queue, epoch, (head) =>
    Effect.gen(function*() {
      const watermark = yield* Rules.planConfirm(head.currentSeq, head.confirmedSeq, upToSeq)
      if (watermark === undefined) return
      yield* sql`UPDATE ${queues} SET confirmed_seq = ${watermark} WHERE name = ${name}`
      yield* sql`UPDATE ${entries} SET payload = ${toParam(emptyBytes)}
        WHERE queue = ${name} AND seq > ${head.confirmedSeq} AND seq <= ${watermark} AND accepted = 1`
    })).pipe(mapSqlError("confirm"))
}

// ---- the service -----------------------------------------------------------------------------

/** Builds a SQL producer queue named `options.queueName`, running the migrations first. */
export const makeSql = (
  options: SqlQueueOptions
): Effect.Effect<DurableProducerQueueService, QueueBackendError | ReliableConfigError, SqlClient> =>
  Effect.gen(function*() {
    yield* checkSqlQueueOptions("DurableQueue.makeSql", options)
    const sql = (yield* SqlClient).withoutTransforms()
    yield* dialectOf(sql)
    const t = yield* tables(options.tablePrefix)
    yield* Effect.mapError(migrate(sql, t), (cause) => new QueueBackendError({ operation: "migrate", cause }))
    const queue: Queue = {
      sql,
      name: options.queueName,
      queues: sql(t.producerQueues),
      entries: sql(t.producerEntries)
    }
    return {
      load: load(queue),
      store: (epoch, request) => Effect.map(storeWhole(queue, "store", epoch, [request], false), (results) => results[0]),
      storeChunked: (epoch, messageId, chunks) =>
        Effect.map(storeChunked(queue, epoch, messageId, chunks), (results) => results[0]),
      storeBatch: (epoch, requests) => storeWhole(queue, "storeBatch", epoch, requests, false),
      accept: (epoch, messageId) => accept(queue, "accept", epoch, [messageId]),
      acceptBatch: (epoch, messageIds) => accept(queue, "acceptBatch", epoch, messageIds),
      confirm: (epoch, upToSeq) => confirm(queue, epoch, upToSeq),
      storeAccepted: (epoch, requests) => storeWhole(queue, "storeAccepted", epoch, requests, true),
      deadLetter: () => notYet("deadLetter"),
      ...pendingOperators
    }
  })

/** Until the SQL queues implement them (the next commit): every new operation fails. */
const notYet = (operation: string) =>
  Effect.fail(new QueueBackendError({ operation, cause: new Error(`${operation} is not implemented on SQL yet`) }))

export const pendingOperators: QueueOperatorService = {
  enqueue: () => notYet("enqueue"),
  backlog: () => notYet("backlog"),
  deadLetters: () => notYet("deadLetters"),
  requeueDeadLetter: () => notYet("requeueDeadLetter"),
  discardDeadLetter: () => notYet("discardDeadLetter"),
  inspect: () => notYet("inspect")
}

/** The SQL producer queue as a layer; the tables are created (if missing) when it is built. */
export const layerSql = (
  options: SqlQueueOptions
): Layer.Layer<DurableProducerQueue, QueueBackendError | ReliableConfigError, SqlClient> =>
  Layer.effect(DurableProducerQueue, makeSql(options))
