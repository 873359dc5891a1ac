/**
 * `DurableWorkQueue` on `@effect/sql`, for PostgreSQL (`@effect/sql-pg`) and SQLite
 * (`@effect/sql-sqlite-node`). One code path decides every request with the same rules as the
 * in-memory work queue; only the statements differ per dialect.
 *
 * Storage: `<prefix>work_queues` holds one row per queue (epoch, highest seq, and `settled_seq`:
 * every job at or below it is confirmed or dead-lettered); `<prefix>work_entries` one row per job
 * with its state (stored, accepted, confirmed, dead-lettered), its send time and trace, and its
 * failed attempts, keyed by queue name. No index depends on the state, so a confirmation updates
 * its row in place (a PostgreSQL HOT update); a load reads the jobs above `settled_seq` and moves
 * it up to just below the oldest job not finished. The backlog, dead letters and inspection are
 * `internal/SqlOperators`. The tables are created by migrations when the layer is built.
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
import type { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type { Identifier } from "@effect/sql/Statement"
import { Config, Effect, Either, Layer, Option } from "effect"
import type { ConfigError } from "effect"
import type { DeadLetterRequest, QueueEpoch, StoreRequest } from "./DurableProducerQueue.js"
import type { DurableWorkQueueService, FailureRequest, WorkLoadResult, WorkStoreResult } from "./DurableWorkQueue.js"
import { DurableWorkQueue } from "./DurableWorkQueue.js"
import { checkEpoch, distinct, makeEntry } from "./internal/ProducerQueueRules.js"
import type { OperatorTables } from "./internal/SqlOperators.js"
import { makeOperators, operatorTables, takeFromBacklog, takeFromBacklogCte } from "./internal/SqlOperators.js"
import { setUp } from "./internal/SqlQueueSetup.js"
import type { SqlQueueOptions } from "./internal/SqlQueueSetup.js"
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
import type { JobState, StoredJob } from "./internal/WorkQueueRules.js"
import * as Rules from "./internal/WorkQueueRules.js"
import type { QueueConflict, QueueFenced, QueueRejected } from "./QueueErrors.js"
import { QueueBackendError } from "./QueueErrors.js"
import type { ReliableConfigError } from "../Protocol/Errors.js"

export type { SqlQueueOptions } from "./internal/SqlQueueSetup.js"

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
  readonly enqueued_at: number | string | null
  readonly trace: string | null
  readonly attempts: number | string
  readonly not_before: number | string | null
}

const jobColumns = "seq, message_id, payload, state, enqueued_at, trace, attempts, not_before"

interface StateRow {
  readonly seq: number | string
  readonly message_id: string
  readonly state: number | string
}

/** The `state` column: 0 stored, 1 accepted, 2 confirmed (payload compacted), 3 dead-lettered. */
const Stored = 0
const Accepted = 1
const Confirmed = 2
const DeadLettered = 3
type Step = typeof Accepted | typeof Confirmed

const stateNames: ReadonlyArray<JobState> = ["Stored", "Accepted", "Confirmed", "DeadLettered"]

const decodeState = (value: number | string): JobState => stateNames[toNumber(value)] ?? "Stored"

const stateCode = (state: JobState): number => stateNames.indexOf(state)

const nullableNumber = (value: number | string | null): number | undefined => value === null ? undefined : toNumber(value)

const decodeHead = (rows: ReadonlyArray<HeadRow>): Head =>
  rows.length === 0 ? { epoch: 0, currentSeq: 0 } : {
    epoch: toNumber(rows[0].epoch),
    currentSeq: toNumber(rows[0].current_seq)
  }

const decodeJob = (row: JobRow): StoredJob => ({
  entry: makeEntry(toNumber(row.seq), row.message_id, toBytes(row.payload), undefined, {
    at: nullableNumber(row.enqueued_at),
    trace: row.trace ?? undefined,
    attempts: toNumber(row.attempts),
    notBefore: nullableNumber(row.not_before)
  }),
  state: decodeState(row.state)
})

const emptyBytes = new Uint8Array(0)

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
      sql<JobRow>`SELECT e.* FROM unnest(${pgTextArray(all)}::text[]) AS i(id)
        CROSS JOIN LATERAL (
          SELECT ${sql.literal(jobColumns)} FROM ${entries} WHERE queue = ${name} AND message_id = i.id OFFSET 0
        ) AS e`,
    (run) =>
      sql<JobRow>`SELECT ${sql.literal(jobColumns)} FROM ${entries}
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

/** New jobs as `unnest` arguments of a PostgreSQL statement, without their seqs. */
const pgJobs = (sql: SqlClient, jobs: ReadonlyArray<StoredJob>) =>
  sql`${pgTextArray(jobs.map((job) => job.entry.messageId))}::text[], ${pgByteaArray(jobs.map((job) => job.entry.payload))}::bytea[], ${
    pgInt2Array(jobs.map((job) => stateCode(job.state)))
  }::smallint[], ${pgInt8Array(jobs.map((job) => job.entry.at))}::bigint[], ${pgTextArray(jobs.map((job) => job.entry.trace))}::text[]`

const insertJobs = ({ entries, name, sql }: Queue, jobs: ReadonlyArray<StoredJob>) =>
  inRuns(
    sql,
    jobs,
    (all) =>
      sql`INSERT INTO ${entries} (queue, seq, message_id, payload, state, enqueued_at, trace)
        SELECT ${name}, r.seq, r.message_id, r.payload, r.state, r.enqueued_at, r.trace
        FROM unnest(
          ${pgInt8Array(all.map((job) => job.entry.seq))}::bigint[], ${pgJobs(sql, all)}
        ) AS r(seq, message_id, payload, state, enqueued_at, trace)`,
    (run) =>
      sql`INSERT INTO ${entries} ${
        sql.insert(run.map((job) => ({
          queue: name,
          seq: job.entry.seq,
          message_id: job.entry.messageId,
          payload: toParam(job.entry.payload),
          state: stateCode(job.state),
          enqueued_at: job.entry.at ?? null,
          trace: job.entry.trace ?? null
        })))
      }`
  )

/** `SET` for a step: confirming also drops the payload. */
/** The answer of a one-statement update: true when the epoch still held and every named entry was found. */
const settledEvery = (epoch: QueueEpoch, expected: number) =>
  (rows: ReadonlyArray<{ readonly epoch: number | string | null; readonly found: number | string }>): boolean =>
    rows.length === 1 && rows[0].epoch !== null && toNumber(rows[0].epoch) === epoch && toNumber(rows[0].found) === expected

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
 * Takes the next epoch and reads the accepted jobs: those above `settled_seq` (the rows below it
 * are all confirmed or dead-lettered). `settled_seq` then moves up to just below the oldest job
 * not finished, stored-only jobs included (an accept may still come for them), so the next load
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
      const rows = yield* sql<JobRow>`SELECT ${sql.literal(jobColumns)} FROM ${entries}
        WHERE queue = ${name} AND seq > ${settled} AND state IN (${Stored}, ${Accepted}) ORDER BY seq`
      const settledNow = rows.length === 0 ? currentSeq : toNumber(rows[0].seq) - 1
      if (settledNow > settled) yield* sql`UPDATE ${queues} SET settled_seq = ${settledNow} WHERE name = ${name}`
      const pending = rows.filter((row) => toNumber(row.state) === Accepted).map((row) => decodeJob(row).entry)
      return { epoch, state: { currentSeq, pending } }
    })
  ).pipe(Effect.mapError((cause) => new QueueBackendError({ operation: "load", cause })))

// ---- store -----------------------------------------------------------------------------------

/** Plans a store: `planStore`, or `planStoreAccepted` for `storeAccepted`. */
type Planner = typeof Rules.planStore

/** The ids a store takes out of the backlog. */
const backlogIds = (requests: ReadonlyArray<StoreRequest>): ReadonlyArray<string> =>
  distinct(requests.filter((request) => request.fromBacklog === true).map((request) => request.messageId))

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
      yield* takeFromBacklog(queue.operators, backlogIds(requests))
      return plan.results
    }))

/**
 * PostgreSQL, one statement: assume every id is new, allocate the seqs and insert (and take the
 * ids out of the backlog), all guarded by the epoch. A stored id trips the unique index and the
 * statement writes nothing; a stale epoch matches no queue row. Either way `None` sends the
 * request to the locked path.
 */
const storeFast = (
  queue: Queue,
  epoch: QueueEpoch,
  requests: ReadonlyArray<StoreRequest>,
  planner: Planner
): Effect.Effect<Option.Option<ReadonlyArray<WorkStoreResult>>, SqlError> => {
  const { entries, name, queues, sql } = queue
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
      INSERT INTO ${entries} (queue, seq, message_id, payload, state, enqueued_at, trace)
      SELECT ${name}, q.base + r.seq, r.message_id, r.payload, r.state, r.enqueued_at, r.trace
      FROM q, unnest(${pgJobs(sql, jobs)}) WITH ORDINALITY AS r(message_id, payload, state, enqueued_at, trace, seq)
      RETURNING 1
    )${takeFromBacklogCte(queue.operators, backlogIds(requests))}
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
    .pipe(Effect.map(settledEvery(epoch, ids.length)))

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

// ---- failures and dead letters ---------------------------------------------------------------

/** A job as the rules see it from its state row (no payload). */
const lookupFrom = (rows: ReadonlyArray<StateRow>) => {
  const found = new Map(rows.map((row) => [row.message_id, row]))
  return (id: string): StoredJob | undefined => {
    const row = found.get(id)
    return row === undefined ? undefined : { entry: makeEntry(toNumber(row.seq), id, emptyBytes), state: decodeState(row.state) }
  }
}

/**
 * Records failed attempts of accepted jobs in the locked transaction, with the rules: one update
 * for the batch on PostgreSQL (one per job on SQLite, where a statement costs no round trip),
 * none when a report fails the rules.
 */
const recordFailuresLocked = (queue: Queue, epoch: QueueEpoch, requests: ReadonlyArray<FailureRequest>) => {
  const { entries, name, sql } = queue
  return locked(queue, epoch, () =>
    Effect.gen(function*() {
      const rows = yield* selectStates(queue, distinct(requests.map((request) => request.messageId)))
      const failures = yield* Rules.planFailures(lookupFrom(rows), requests)
      if (failures.length === 0) return
      yield* sql.onDialectOrElse({
        pg: () =>
          sql`UPDATE ${entries} AS e SET attempts = (f->>'attempts')::int, last_error = f->>'lastError',
            not_before = (f->>'notBefore')::bigint
            FROM jsonb_array_elements(${JSON.stringify(failures)}::jsonb) AS f
            WHERE e.queue = ${name} AND e.message_id = f->>'messageId' AND e.state = ${Accepted}`,
        orElse: () =>
          Effect.forEach(failures, (failure) =>
            sql`UPDATE ${entries} SET attempts = ${failure.attempts}, last_error = ${failure.lastError},
              not_before = ${failure.notBefore}
              WHERE queue = ${name} AND message_id = ${failure.messageId} AND state = ${Accepted}`, { discard: true })
      })
    }))
}

/** Every job taken as accepted: `planFailures` then only checks the reports and keeps the last one per job. */
const assumeAccepted = (id: string): StoredJob => ({ entry: makeEntry(0, id, emptyBytes), state: "Accepted" })

/**
 * PostgreSQL, one statement, as `advanceManyFast` for accepts and confirmations: record the
 * failures when the epoch holds and every job is accepted or finished (a confirmed or
 * dead-lettered job is left as it is); otherwise write nothing and return false. The queue row
 * takes only the key-share lock, so a failure waits neither for a store in flight nor makes the
 * next store or confirmation wait for it (the locked transaction holds the queue row for update
 * over several round trips, which stalls both).
 */
const recordFailuresFast = ({ entries, name, queues, sql }: Queue, epoch: QueueEpoch, failures: ReadonlyArray<FailureRequest>) =>
  sql<{ readonly epoch: number | string | null; readonly found: number | string }>`WITH q AS (
      SELECT epoch FROM ${queues} WHERE name = ${name} FOR KEY SHARE
    ), found AS (
      SELECT e.ctid, e.state, f.attempts, f.last_error, f.not_before
      FROM unnest(
        ${pgTextArray(failures.map((failure) => failure.messageId))}::text[],
        ${pgInt8Array(failures.map((failure) => failure.attempts))}::bigint[],
        ${pgTextArray(failures.map((failure) => failure.lastError))}::text[],
        ${pgInt8Array(failures.map((failure) => failure.notBefore))}::bigint[]
      ) AS f(id, attempts, last_error, not_before)
      CROSS JOIN LATERAL (
        SELECT ctid, state FROM ${entries} WHERE queue = ${name} AND message_id = f.id OFFSET 0
      ) AS e
    ), counted AS (
      SELECT count(*) AS n FROM found WHERE state >= ${Accepted}
    ), updated AS (
      UPDATE ${entries} AS e SET attempts = found.attempts, last_error = found.last_error, not_before = found.not_before
      FROM found
      WHERE e.ctid = ANY(ARRAY(SELECT ctid FROM found WHERE state = ${Accepted})) AND e.ctid = found.ctid
        AND e.queue = ${name} AND e.state = ${Accepted}
        AND (SELECT epoch FROM q) = ${epoch} AND (SELECT n FROM counted) = ${failures.length}
      RETURNING 1
    )
    SELECT (SELECT epoch FROM q) AS epoch, (SELECT n FROM counted) AS found, (SELECT count(*) FROM updated) AS updated`
    .pipe(Effect.map(settledEvery(epoch, failures.length)))

/**
 * Records failed attempts of accepted jobs. Failures are written beside stores and
 * confirmations, so on PostgreSQL they go first through the one-statement path; what it cannot
 * settle (an unknown or never accepted job, a stale epoch, an invalid report) goes to the locked
 * transaction, which decides it with the rules.
 */
const recordFailures = (
  queue: Queue,
  operation: string,
  epoch: QueueEpoch,
  requests: ReadonlyArray<FailureRequest>
): Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError> => {
  if (requests.length === 0) return mapSqlError(operation)(locked(queue, epoch, () => Effect.void))
  const draft = Rules.planFailures(assumeAccepted, requests)
  const run = queue.sql.onDialectOrElse({
    pg: () =>
      Either.isLeft(draft) ? recordFailuresLocked(queue, epoch, requests) : Effect.flatMap(
        recordFailuresFast(queue, epoch, draft.right).pipe(Effect.catchIf(isFastPathMiss, () => Effect.succeed(false))),
        (done) => done ? Effect.void : recordFailuresLocked(queue, epoch, requests)
      ),
    orElse: () => recordFailuresLocked(queue, epoch, requests)
  })
  return mapSqlError(operation)(run)
}

/** Marks a job dead-lettered, keeping its payload. */
const deadLetter = (
  queue: Queue,
  epoch: QueueEpoch,
  request: DeadLetterRequest
): Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError> => {
  const { entries, name, sql } = queue
  return locked(queue, epoch, () =>
    Effect.gen(function*() {
      const rows = yield* selectStates(queue, [request.messageId])
      const job = yield* Rules.planDeadLetter(lookupFrom(rows), request)
      if (job === undefined) return
      yield* sql`UPDATE ${entries} SET state = ${DeadLettered}, attempts = ${request.attempts},
        last_error = ${request.lastError}, dead_at = ${request.at}
        WHERE queue = ${name} AND seq = ${job.entry.seq}`
    })).pipe(mapSqlError("deadLetter"))
}

// ---- the service -----------------------------------------------------------------------------

/** Builds a SQL work queue named `options.queueName`, running the migrations first. */
export const makeWorkSql = (
  options: SqlQueueOptions
): Effect.Effect<DurableWorkQueueService, QueueBackendError | ReliableConfigError, SqlClient> =>
  Effect.gen(function*() {
    const { listener, sql, tables: t } = yield* setUp("DurableQueue.makeWorkSql", options)
    const operators = operatorTables(sql, t, options.queueName, "work")
    const queue: Queue = { sql, name: options.queueName, queues: operators.queues, entries: operators.entries, operators }
    return {
      ...makeOperators(operators, listener),
      load: load(queue),
      store: (epoch, request) => Effect.map(store(queue, "store", epoch, [request], false), (results) => results[0]),
      storeBatch: (epoch, requests) => store(queue, "storeBatch", epoch, requests, false),
      accept: (epoch, messageId) => advance(queue, "accept", epoch, [messageId], Accepted),
      acceptBatch: (epoch, messageIds) => advance(queue, "acceptBatch", epoch, messageIds, Accepted),
      confirmMessage: (epoch, messageId) => advance(queue, "confirmMessage", epoch, [messageId], Confirmed),
      confirmBatch: (epoch, messageIds) => advance(queue, "confirmBatch", epoch, messageIds, Confirmed),
      storeAccepted: (epoch, requests) => store(queue, "storeAccepted", epoch, requests, true),
      recordFailure: (epoch, request) => recordFailures(queue, "recordFailure", epoch, [request]),
      recordFailureBatch: (epoch, requests) => recordFailures(queue, "recordFailureBatch", epoch, requests),
      deadLetter: (epoch, request) => deadLetter(queue, epoch, request)
    }
  })

/** The SQL work queue as a layer; the tables are created (if missing) when it is built. */
export const layerWorkSql = (
  options: SqlQueueOptions
): Layer.Layer<DurableWorkQueue, QueueBackendError | ReliableConfigError, SqlClient> =>
  Layer.effect(DurableWorkQueue, makeWorkSql(options))

/**
 * `layerWorkSql` with its options read from Effect `Config` (e.g. the environment), as
 * `PgClient.layerConfig` reads its own: `layerWorkSqlConfig({ queueName: Config.string("QUEUE_NAME") })`.
 * A value `Config` cannot read is a `ConfigError`; a value it reads but the queue refuses (a bad
 * table prefix, a blank name) is a `ReliableConfigError`.
 */
export const layerWorkSqlConfig = (
  config: Config.Config.Wrap<SqlQueueOptions>
): Layer.Layer<DurableWorkQueue, ConfigError.ConfigError | QueueBackendError | ReliableConfigError, SqlClient> =>
  Layer.unwrapEffect(Effect.map(Config.unwrap(config), layerWorkSql))
