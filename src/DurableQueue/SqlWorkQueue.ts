/**
 * `DurableWorkQueue` on `@effect/sql`, for PostgreSQL (`@effect/sql-pg`) and SQLite
 * (`@effect/sql-sqlite-node`). One code path decides every request with the same rules as the
 * in-memory work queue; only the statements differ per dialect.
 *
 * Storage: `<prefix>work_queues` holds one row per queue (epoch, highest seq, and `settled_seq`:
 * every job at or below it is confirmed); `<prefix>work_entries` one row per job with its state
 * (stored, accepted, confirmed), keyed by queue name. No index depends on the state, so a
 * confirmation updates its row in place (a PostgreSQL HOT update); a load reads the jobs above
 * `settled_seq` and moves it up to just below the oldest job not confirmed. The tables are
 * created by migrations when the layer is built.
 *
 * Concurrency: every write locks its queue's row first and checks the epoch in that transaction,
 * as the SQL producer queue does; on PostgreSQL the everyday writes (storing new jobs, accepting
 * and confirming stored ones) run as single epoch-guarded statements and fall back to the locked
 * transaction for anything they cannot settle. Accepts and confirmations take the weakest row
 * lock (`FOR KEY SHARE`), so they run beside a store (which updates the row's cursor); a load
 * takes `FOR UPDATE` first, which waits for every write in flight and holds off the rest until
 * the new epoch is committed.
 *
 * Compaction: confirming a job drops its payload; the row stays as a tombstone, so a repeated
 * `confirmMessage` does nothing and a resubmission answers `alreadyStored` with `confirmed: true`
 * (and an empty payload) instead of being dispatched again.
 */
import { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type { Identifier } from "@effect/sql/Statement"
import { Effect, Layer, Option } from "effect"
import type { QueueEpoch, StoreRequest } from "./DurableProducerQueue.js"
import type { DurableWorkQueueService, WorkLoadResult, WorkStoreResult } from "./DurableWorkQueue.js"
import { DurableWorkQueue } from "./DurableWorkQueue.js"
import { checkEpoch, distinct, makeEntry } from "./internal/ProducerQueueRules.js"
import { migrate, tables } from "./internal/SqlSchema.js"
import {
  dialectOf,
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
import type { JobState, StoredJob } from "./internal/WorkQueueRules.js"
import * as Rules from "./internal/WorkQueueRules.js"
import type { QueueConflict, QueueFenced, QueueRejected } from "./QueueErrors.js"
import { QueueBackendError } from "./QueueErrors.js"
import { checkSqlQueueOptions, pendingOperators } from "./SqlProducerQueue.js"
import type { SqlQueueOptions } from "./SqlProducerQueue.js"
import type { ReliableConfigError } from "../Protocol/Errors.js"

export type { SqlQueueOptions } from "./SqlProducerQueue.js"

// ---- rows ------------------------------------------------------------------------------------

interface Head {
  readonly epoch: number
  readonly currentSeq: number
}

interface HeadRow {
  readonly epoch: number | string
  readonly current_seq: number | string
}

interface JobRow {
  readonly seq: number | string
  readonly message_id: string
  readonly payload: unknown
  readonly state: number | string
}

interface StateRow {
  readonly seq: number | string
  readonly message_id: string
  readonly state: number | string
}

/** The `state` column: 0 stored, 1 accepted, 2 confirmed (payload compacted). */
const Stored = 0
const Accepted = 1
const Confirmed = 2
type Step = typeof Accepted | typeof Confirmed

const stateNames: ReadonlyArray<JobState> = ["Stored", "Accepted", "Confirmed"]

const decodeState = (value: number | string): JobState => stateNames[toNumber(value)] ?? "Stored"

const stateCode = (state: JobState): number => state === "Stored" ? Stored : state === "Accepted" ? Accepted : Confirmed

const decodeHead = (rows: ReadonlyArray<HeadRow>): Head =>
  rows.length === 0 ? { epoch: 0, currentSeq: 0 } : {
    epoch: toNumber(rows[0].epoch),
    currentSeq: toNumber(rows[0].current_seq)
  }

const decodeJob = (row: JobRow): StoredJob => ({
  entry: makeEntry(toNumber(row.seq), row.message_id, toBytes(row.payload)),
  state: decodeState(row.state)
})

const emptyBytes = new Uint8Array(0)

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
      pg: () => sql<HeadRow>`SELECT epoch, current_seq FROM ${queues} WHERE name = ${name} FOR UPDATE`,
      orElse: () => sql<HeadRow>`UPDATE ${queues} SET epoch = epoch WHERE name = ${name} RETURNING epoch, current_seq`
    }),
    decodeHead
  )

/**
 * The stored jobs among `ids`. On PostgreSQL each id is looked up on its own (a lateral subquery
 * that `OFFSET 0` keeps from being flattened into a join), so the plan is an index probe per id
 * even when the table's statistics are stale, as they are for a new or fast-growing queue.
 */
const selectJobs = ({ entries, name, sql }: Queue, ids: ReadonlyArray<string>) =>
  inRuns(
    sql,
    ids,
    (all) =>
      sql<JobRow>`SELECT e.seq, e.message_id, e.payload, e.state FROM unnest(${pgTextArray(all)}::text[]) AS i(id)
        CROSS JOIN LATERAL (
          SELECT seq, message_id, payload, state FROM ${entries} WHERE queue = ${name} AND message_id = i.id OFFSET 0
        ) AS e`,
    (run) =>
      sql<JobRow>`SELECT seq, message_id, payload, state FROM ${entries}
        WHERE queue = ${name} AND message_id IN ${sql.in(run)}`
  ).pipe(Effect.map((rows) => new Map(rows.map((row) => [row.message_id, decodeJob(row)]))))

/** The seq and state of each stored job among `ids` (as `selectJobs`, without payloads). */
const selectStates = ({ entries, name, sql }: Queue, ids: ReadonlyArray<string>) =>
  inRuns(
    sql,
    ids,
    (all) =>
      sql<StateRow>`SELECT e.seq, e.message_id, e.state FROM unnest(${pgTextArray(all)}::text[]) AS i(id)
        CROSS JOIN LATERAL (
          SELECT seq, message_id, state FROM ${entries} WHERE queue = ${name} AND message_id = i.id OFFSET 0
        ) AS e`,
    (run) =>
      sql<StateRow>`SELECT seq, message_id, state FROM ${entries} WHERE queue = ${name} AND message_id IN ${
        sql.in(run)
      }`
  )

const insertJobs = ({ entries, name, sql }: Queue, jobs: ReadonlyArray<StoredJob>) =>
  inRuns(
    sql,
    jobs,
    (all) =>
      sql`INSERT INTO ${entries} (queue, seq, message_id, payload, state)
        SELECT ${name}, r.seq, r.message_id, r.payload, r.state
        FROM unnest(
          ${pgInt8Array(all.map((job) => job.entry.seq))}::bigint[], ${pgTextArray(all.map((job) => job.entry.messageId))}::text[],
          ${pgByteaArray(all.map((job) => job.entry.payload))}::bytea[], ${pgInt2Array(all.map((job) => stateCode(job.state)))}::smallint[]
        ) AS r(seq, message_id, payload, state)`,
    (run) =>
      sql`INSERT INTO ${entries} ${
        sql.insert(run.map((job) => ({
          queue: name,
          seq: job.entry.seq,
          message_id: job.entry.messageId,
          payload: toParam(job.entry.payload),
          state: stateCode(job.state)
        })))
      }`
  )

/** `SET` for a step: confirming also drops the payload. */
const stepSet = (sql: SqlClient, to: Step) =>
  to === Confirmed ? sql`state = ${to}, payload = ${toParam(emptyBytes)}` : sql`state = ${to}`

/** Moves jobs to `to`, by seq (the primary key). */
const setState = ({ entries, name, sql }: Queue, seqs: ReadonlyArray<number>, to: Step) =>
  inRuns(
    sql,
    seqs,
    (all) => sql`UPDATE ${entries} SET ${stepSet(sql, to)} WHERE queue = ${name} AND seq = ANY(${pgInt8Array(all)}::bigint[])`,
    (run) => sql`UPDATE ${entries} SET ${stepSet(sql, to)} WHERE queue = ${name} AND seq IN ${sql.in(run)}`
  )

/** Locks the queue, checks the epoch, then runs `body` in the same transaction. */
const locked = <A, E>(queue: Queue, epoch: QueueEpoch, body: (head: Head) => Effect.Effect<A, E | SqlError>) =>
  transaction(
    queue.sql,
    Effect.gen(function*() {
      const head = yield* lockHead(queue)
      const fenced = checkEpoch(head.epoch, epoch)
      if (fenced !== undefined) return yield* fenced
      return yield* body(head)
    })
  )

// ---- load ------------------------------------------------------------------------------------

/**
 * Takes the next epoch and reads the accepted, unconfirmed jobs: those above `settled_seq` (the
 * rows below it are all confirmed). `settled_seq` then moves up to just below the oldest job not
 * confirmed, stored-only jobs included (an accept may still come for them), so the next load
 * reads only what came after. The new epoch's lock keeps every writer out meanwhile.
 */
const load = ({ entries, name, queues, sql }: Queue): Effect.Effect<WorkLoadResult, QueueBackendError> =>
  transaction(
    sql,
    Effect.gen(function*() {
      yield* sql.onDialectOrElse({
        pg: () => sql`SELECT 1 FROM ${queues} WHERE name = ${name} FOR UPDATE`,
        orElse: () => Effect.void
      })
      const head = yield* sql<HeadRow & { readonly settled_seq: number | string }>`INSERT INTO ${queues}
          (name, epoch, current_seq) VALUES (${name}, 1, 0)
          ON CONFLICT (name) DO UPDATE SET epoch = ${queues}.epoch + 1
          RETURNING epoch, current_seq, settled_seq`
      const { currentSeq, epoch } = decodeHead(head)
      const settled = toNumber(head[0].settled_seq)
      const rows = yield* sql<JobRow>`SELECT seq, message_id, payload, state FROM ${entries}
        WHERE queue = ${name} AND seq > ${settled} AND state <> ${Confirmed} ORDER BY seq`
      const settledNow = rows.length === 0 ? currentSeq : toNumber(rows[0].seq) - 1
      if (settledNow > settled) yield* sql`UPDATE ${queues} SET settled_seq = ${settledNow} WHERE name = ${name}`
      const pending = rows.filter((row) => toNumber(row.state) === Accepted).map((row) => decodeJob(row).entry)
      return { epoch, state: { currentSeq, pending } }
    })
  ).pipe(Effect.mapError((cause) => new QueueBackendError({ operation: "load", cause })))

// ---- store -----------------------------------------------------------------------------------

/** Plans a store: `planStore`, or `planStoreAccepted` for `storeAccepted`. */
type Planner = typeof Rules.planStore

const storeLocked = (queue: Queue, epoch: QueueEpoch, requests: ReadonlyArray<StoreRequest>, planner: Planner) =>
  locked(queue, epoch, (head) =>
    Effect.gen(function*() {
      const existing = yield* selectJobs(queue, distinct(requests.map((request) => request.messageId)))
      const plan = planner(head.currentSeq, (id) => existing.get(id), requests)
      if (plan.appended.length > 0) {
        yield* insertJobs(queue, plan.appended)
        yield* queue.sql`UPDATE ${queue.queues} SET current_seq = ${plan.currentSeq} WHERE name = ${queue.name}`
      }
      if (plan.accepts.length > 0) yield* setState(queue, plan.accepts.map((job) => job.entry.seq), Accepted)
      return plan.results
    }))

/**
 * PostgreSQL, one statement: assume every id is new, allocate the seqs and insert, all guarded by
 * the epoch. A stored id trips the unique index and the statement writes nothing; a stale epoch
 * matches no queue row. Either way `None` sends the request to the locked path.
 */
const storeFast = (
  { entries, name, queues, sql }: Queue,
  epoch: QueueEpoch,
  requests: ReadonlyArray<StoreRequest>,
  planner: Planner
): Effect.Effect<Option.Option<ReadonlyArray<WorkStoreResult>>, SqlError> => {
  const draft = planner(0, () => undefined, requests)
  if (draft.appended.length === 0) return Effect.succeedNone
  const jobs = draft.appended
  const count = draft.currentSeq
  // The jobs take seqs base + 1..count in order (the draft planned them from 0).
  return sql<{ readonly base: number | string | null; readonly inserted: number | string }>`WITH q AS (
      UPDATE ${queues} SET current_seq = current_seq + ${count}
      WHERE name = ${name} AND epoch = ${epoch}
      RETURNING current_seq - ${count} AS base
    ), inserted AS (
      INSERT INTO ${entries} (queue, seq, message_id, payload, state)
      SELECT ${name}, q.base + r.seq, r.message_id, r.payload, r.state
      FROM q, unnest(
        ${pgTextArray(jobs.map((job) => job.entry.messageId))}::text[], ${pgByteaArray(jobs.map((job) => job.entry.payload))}::bytea[],
        ${pgInt2Array(jobs.map((job) => stateCode(job.state)))}::smallint[]
      ) WITH ORDINALITY AS r(message_id, payload, state, seq)
      RETURNING 1
    )
    SELECT (SELECT base FROM q) AS base, (SELECT count(*) FROM inserted) AS inserted`.pipe(
    Effect.map((rows) => {
      const row = rows[0]
      if (row === undefined || row.base === null || toNumber(row.inserted) !== jobs.length) return Option.none()
      return Option.some(planner(toNumber(row.base), () => undefined, requests).results)
    }),
    Effect.catchIf(isFastPathMiss, () => Effect.succeedNone)
  )
}

/** Stores jobs (`store`, `storeBatch`), or stores and accepts them (`storeAccepted`). */
const store = (
  queue: Queue,
  operation: string,
  epoch: QueueEpoch,
  requests: ReadonlyArray<StoreRequest>,
  accept: boolean
): Effect.Effect<ReadonlyArray<WorkStoreResult>, QueueFenced | QueueConflict | QueueRejected | QueueBackendError> => {
  const invalid = Rules.validateStore(requests)
  if (invalid !== undefined) return Effect.fail(invalid)
  const planner = accept ? Rules.planStoreAccepted : Rules.planStore
  const run = queue.sql.onDialectOrElse({
    pg: () =>
      Effect.flatMap(storeFast(queue, epoch, requests, planner), (fast) =>
        Option.isSome(fast) ? Effect.succeed(fast.value) : storeLocked(queue, epoch, requests, planner)),
    orElse: () => storeLocked(queue, epoch, requests, planner)
  })
  return mapStoreError(operation)(run)
}

// ---- accept and confirm ----------------------------------------------------------------------

/** Accepts (`Accepted`) or confirms (`Confirmed`) in the locked transaction, with the rules. */
const advanceLocked = (queue: Queue, epoch: QueueEpoch, ids: ReadonlyArray<string>, to: Step) =>
  locked(queue, epoch, () =>
    Effect.gen(function*() {
      const rows = yield* selectStates(queue, ids)
      const found = new Map(rows.map((row) => [row.message_id, row]))
      const lookup = (id: string): StoredJob | undefined => {
        const row = found.get(id)
        return row === undefined
          ? undefined
          : { entry: makeEntry(toNumber(row.seq), id, emptyBytes), state: decodeState(row.state) }
      }
      const toChange = yield* (to === Accepted ? Rules.planAccept(lookup, ids) : Rules.planConfirm(lookup, ids))
      yield* setState(queue, toChange.map((id) => toNumber(found.get(id)!.seq)), to)
    }))

/**
 * PostgreSQL, one statement: advance one job from the state before `to` when the epoch holds; the
 * key-share lock on the queue row orders it against `load` (which locks it for update). No row updated (unknown id, repeated,
 * never accepted, stale epoch) sends the request to the locked path.
 */
const advanceOneFast = ({ entries, name, queues, sql }: Queue, epoch: QueueEpoch, id: string, to: Step) =>
  sql`UPDATE ${entries} AS e SET ${stepSet(sql, to)}
    FROM (SELECT epoch FROM ${queues} WHERE name = ${name} FOR KEY SHARE) AS q
    WHERE e.queue = ${name} AND e.message_id = ${id} AND e.state = ${to - 1} AND q.epoch = ${epoch}
    RETURNING e.seq`.pipe(Effect.map((rows) => rows.length > 0))

/**
 * PostgreSQL, one statement: advance several jobs when the epoch holds and every id may take the
 * step (a failed batch must write nothing); otherwise write nothing and return false. The jobs are
 * found id by id (a lateral subquery) and updated by the row versions found (a TID scan, no second
 * index probe per job), so the plan never scans the queue. A version another transaction replaced
 * meanwhile is rechecked as usual: only jobs still in the state before `to` take the step.
 */
const advanceManyFast = (
  { entries, name, queues, sql }: Queue,
  epoch: QueueEpoch,
  ids: ReadonlyArray<string>,
  to: Step
) =>
  sql<{ readonly epoch: number | string | null; readonly found: number | string }>`WITH q AS (
      SELECT epoch FROM ${queues} WHERE name = ${name} FOR KEY SHARE
    ), found AS (
      SELECT e.ctid, e.state FROM unnest(${pgTextArray(ids)}::text[]) AS i(id)
      CROSS JOIN LATERAL (
        SELECT ctid, state FROM ${entries} WHERE queue = ${name} AND message_id = i.id OFFSET 0
      ) AS e
    ), counted AS (
      SELECT count(*) AS n FROM found WHERE state >= ${to - 1}
    ), updated AS (
      UPDATE ${entries} SET ${stepSet(sql, to)}
      WHERE ctid = ANY(ARRAY(SELECT ctid FROM found WHERE state = ${to - 1})) AND queue = ${name} AND state = ${to - 1}
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

const advance = (
  queue: Queue,
  operation: string,
  epoch: QueueEpoch,
  messageIds: ReadonlyArray<string>,
  to: Step
): Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError> => {
  const ids = distinct(messageIds)
  const fast = ids.length === 0
    ? Effect.succeed(false)
    : (ids.length === 1 ? advanceOneFast(queue, epoch, ids[0], to) : advanceManyFast(queue, epoch, ids, to)).pipe(
      Effect.catchIf(isFastPathMiss, () => Effect.succeed(false))
    )
  const run = queue.sql.onDialectOrElse({
    pg: () => Effect.flatMap(fast, (done) => done ? Effect.void : advanceLocked(queue, epoch, ids, to)),
    orElse: () => advanceLocked(queue, epoch, ids, to)
  })
  return mapSqlError(operation)(run)
}

// ---- the service -----------------------------------------------------------------------------

/** Builds a SQL work queue named `options.queueName`, running the migrations first. */
export const makeWorkSql = (
  options: SqlQueueOptions
): Effect.Effect<DurableWorkQueueService, QueueBackendError | ReliableConfigError, SqlClient> =>
  Effect.gen(function*() {
    yield* checkSqlQueueOptions("DurableQueue.makeWorkSql", options)
    const sql = (yield* SqlClient).withoutTransforms()
    yield* dialectOf(sql)
    const t = yield* tables(options.tablePrefix)
    yield* Effect.mapError(migrate(sql, t), (cause) => new QueueBackendError({ operation: "migrate", cause }))
    const queue: Queue = { sql, name: options.queueName, queues: sql(t.workQueues), entries: sql(t.workEntries) }
    return {
      load: load(queue),
      store: (epoch, request) => Effect.map(store(queue, "store", epoch, [request], false), (results) => results[0]),
      storeBatch: (epoch, requests) => store(queue, "storeBatch", epoch, requests, false),
      accept: (epoch, messageId) => advance(queue, "accept", epoch, [messageId], Accepted),
      acceptBatch: (epoch, messageIds) => advance(queue, "acceptBatch", epoch, messageIds, Accepted),
      confirmMessage: (epoch, messageId) => advance(queue, "confirmMessage", epoch, [messageId], Confirmed),
      confirmBatch: (epoch, messageIds) => advance(queue, "confirmBatch", epoch, messageIds, Confirmed),
      storeAccepted: (epoch, requests) => store(queue, "storeAccepted", epoch, requests, true),
      recordFailure: () => Effect.fail(new QueueBackendError({ operation: "recordFailure", cause: new Error("not implemented on SQL yet") })),
      recordFailureBatch: () => Effect.fail(new QueueBackendError({ operation: "recordFailureBatch", cause: new Error("not implemented on SQL yet") })),
      deadLetter: () => Effect.fail(new QueueBackendError({ operation: "deadLetter", cause: new Error("not implemented on SQL yet") })),
      ...pendingOperators
    }
  })

/** The SQL work queue as a layer; the tables are created (if missing) when it is built. */
export const layerWorkSql = (
  options: SqlQueueOptions
): Layer.Layer<DurableWorkQueue, QueueBackendError | ReliableConfigError, SqlClient> =>
  Layer.effect(DurableWorkQueue, makeWorkSql(options))
