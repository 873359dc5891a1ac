/**
 * `DurableWorkQueue` on `@effect/sql`, for PostgreSQL (`@effect/sql-pg`) and SQLite
 * (`@effect/sql-sqlite-node`). One code path decides every request with the same rules as the
 * in-memory work queue; only the statements differ per dialect.
 *
 * Storage: `<prefix>work_queues` holds one row per queue (epoch, highest seq);
 * `<prefix>work_entries` one row per job with its state (stored, accepted, confirmed), keyed by
 * queue name. The tables are created by migrations when the layer is built.
 *
 * Concurrency: every write locks its queue's row first and checks the epoch in that transaction,
 * as the SQL producer queue does; on PostgreSQL the everyday writes (storing new jobs, accepting
 * and confirming stored ones) run as single epoch-guarded statements and fall back to the locked
 * transaction for anything they cannot settle.
 *
 * Compaction: confirming a job drops its payload; the row stays as a tombstone, so a repeated
 * `confirmMessage` does nothing and a resubmission answers `alreadyStored` with `confirmed: true`
 * (and an empty payload) instead of being dispatched again.
 */
import { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Layer, Option } from "effect"
import type { QueueEpoch, StoreRequest } from "./DurableProducerQueue.js"
import type { DurableWorkQueueService, WorkLoadResult, WorkStoreResult } from "./DurableWorkQueue.js"
import { DurableWorkQueue } from "./DurableWorkQueue.js"
import { checkEpoch, distinct, makeEntry } from "./internal/ProducerQueueRules.js"
import { migrate, tables } from "./internal/SqlSchema.js"
import {
  chunksOf,
  dialectOf,
  isFastPathMiss,
  mapSqlError,
  toBytes,
  toNumber,
  toParam,
  transaction
} from "./internal/SqlSupport.js"
import type { JobState, StoredJob } from "./internal/WorkQueueRules.js"
import * as Rules from "./internal/WorkQueueRules.js"
import type { QueueConflict, QueueFenced } from "./QueueErrors.js"
import { QueueBackendError } from "./QueueErrors.js"
import type { SqlQueueOptions } from "./SqlProducerQueue.js"

export type { SqlQueueOptions } from "./SqlProducerQueue.js"

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
  readonly message_id: string
  readonly state: number | string
}

const Stored = 0
const Accepted = 1
const Confirmed = 2

const stateNames: ReadonlyArray<JobState> = ["Stored", "Accepted", "Confirmed"]

/** SQLite binds at most 32,766 parameters per statement; stay far below. */
const sqliteRunSize = 500

const decodeHead = (rows: ReadonlyArray<HeadRow>): Head =>
  rows.length === 0 ? { epoch: 0, currentSeq: 0 } : {
    epoch: toNumber(rows[0].epoch),
    currentSeq: toNumber(rows[0].current_seq)
  }

const decodeJob = (row: JobRow): StoredJob => ({
  entry: makeEntry(toNumber(row.seq), row.message_id, toBytes(row.payload)),
  state: stateNames[toNumber(row.state)] ?? "Stored"
})

const emptyBytes = new Uint8Array(0)

/** Builds a SQL work queue named `options.queueName`, running the migrations first. */
export const make = (
  options: SqlQueueOptions
): Effect.Effect<DurableWorkQueueService, QueueBackendError, SqlClient> =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient).withoutTransforms()
    yield* dialectOf(sql)
    const t = yield* tables(options.tablePrefix)
    yield* Effect.mapError(migrate(sql, t), (cause) => new QueueBackendError({ operation: "migrate", cause }))
    const name = options.queueName
    const queues = sql(t.workQueues)
    const entries = sql(t.workEntries)

    // ---- statements -------------------------------------------------------------------------

    /** Locks the queue's row for the rest of the transaction and reads it. */
    const lockHead = Effect.map(
      sql.onDialectOrElse({
        pg: () => sql<HeadRow>`SELECT epoch, current_seq FROM ${queues} WHERE name = ${name} FOR UPDATE`,
        orElse: () =>
          sql<HeadRow>`UPDATE ${queues} SET epoch = epoch WHERE name = ${name} RETURNING epoch, current_seq`
      }),
      decodeHead
    )

    /** Runs `query` over `ids` once on PostgreSQL (`= ANY`), in bounded `IN` lists on SQLite. */
    const byIds = <A extends object>(
      ids: ReadonlyArray<string>,
      pg: (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<A>, SqlError>,
      sqlite: (run: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<A>, SqlError>
    ): Effect.Effect<ReadonlyArray<A>, SqlError> =>
      ids.length === 0 ? Effect.succeed([]) : sql.onDialectOrElse({
        pg: () => pg(ids),
        orElse: () => Effect.map(Effect.forEach(chunksOf(ids, sqliteRunSize), sqlite), (runs) => runs.flat())
      })

    const selectJobs = (ids: ReadonlyArray<string>) =>
      Effect.map(
        byIds(
          ids,
          (all) =>
            sql<JobRow>`SELECT seq, message_id, payload, state FROM ${entries}
              WHERE queue = ${name} AND message_id = ANY(${all}::text[])`,
          (run) =>
            sql<JobRow>`SELECT seq, message_id, payload, state FROM ${entries}
              WHERE queue = ${name} AND message_id IN ${sql.in(run)}`
        ),
        (rows) => new Map(rows.map((row) => [row.message_id, decodeJob(row)]))
      )

    /** The state of each stored job among `ids` (entries without payloads). */
    const selectStates = (ids: ReadonlyArray<string>) =>
      Effect.map(
        byIds(
          ids,
          (all) =>
            sql<StateRow>`SELECT message_id, state FROM ${entries}
              WHERE queue = ${name} AND message_id = ANY(${all}::text[])`,
          (run) =>
            sql<StateRow>`SELECT message_id, state FROM ${entries}
              WHERE queue = ${name} AND message_id IN ${sql.in(run)}`
        ),
        (rows) =>
          new Map<string, StoredJob>(
            rows.map((row) => [
              row.message_id,
              { entry: makeEntry(0, row.message_id, emptyBytes), state: stateNames[toNumber(row.state)] ?? "Stored" }
            ])
          )
      )

    const insertJobs = (jobs: ReadonlyArray<StoredJob>) =>
      sql.onDialectOrElse({
        pg: () =>
          sql`INSERT INTO ${entries} (queue, seq, message_id, payload, state)
            SELECT ${name}, r.seq, r.message_id, r.payload, ${Stored}
            FROM unnest(
              ${jobs.map((job) => job.entry.seq)}::bigint[], ${jobs.map((job) => job.entry.messageId)}::text[],
              ${jobs.map((job) => toParam(job.entry.payload))}::bytea[]
            ) AS r(seq, message_id, payload)`.pipe(Effect.asVoid),
        orElse: () =>
          Effect.forEach(chunksOf(jobs, sqliteRunSize), (run) =>
            sql`INSERT INTO ${entries} ${
              sql.insert(run.map((job) => ({
                queue: name,
                seq: job.entry.seq,
                message_id: job.entry.messageId,
                payload: toParam(job.entry.payload),
                state: Stored
              })))
            }`, { discard: true })
      })

    /** Moves `ids` to `state` (confirming also drops the payload). */
    const setState = (ids: ReadonlyArray<string>, state: typeof Accepted | typeof Confirmed) => {
      const compact = state === Confirmed ? sql`, payload = ${toParam(emptyBytes)}` : sql.literal("")
      return byIds(
        ids,
        (all) =>
          sql`UPDATE ${entries} SET state = ${state}${compact}
            WHERE queue = ${name} AND message_id = ANY(${all}::text[])`,
        (run) =>
          sql`UPDATE ${entries} SET state = ${state}${compact}
            WHERE queue = ${name} AND message_id IN ${sql.in(run)}`
      )
    }

    /** Locks the queue, checks the epoch, then runs `body` in the same transaction. */
    const locked = <A, E>(epoch: QueueEpoch, body: (head: Head) => Effect.Effect<A, E | SqlError>) =>
      transaction(
        sql,
        Effect.gen(function*() {
          const head = yield* lockHead
          const fenced = checkEpoch(head.epoch, epoch)
          if (fenced !== undefined) return yield* fenced
          return yield* body(head)
        })
      )

    // ---- load -------------------------------------------------------------------------------

    const load: Effect.Effect<WorkLoadResult, QueueBackendError> = transaction(
      sql,
      Effect.gen(function*() {
        const head = decodeHead(
          yield* sql<HeadRow>`INSERT INTO ${queues} (name, epoch, current_seq) VALUES (${name}, 1, 0)
            ON CONFLICT (name) DO UPDATE SET epoch = ${queues}.epoch + 1
            RETURNING epoch, current_seq`
        )
        const rows = yield* sql<JobRow>`SELECT seq, message_id, payload, state FROM ${entries}
          WHERE queue = ${name} AND state = ${Accepted} ORDER BY seq`
        return {
          epoch: head.epoch,
          state: { currentSeq: head.currentSeq, pending: rows.map((row) => decodeJob(row).entry) }
        }
      })
    ).pipe(Effect.mapError((cause) => new QueueBackendError({ operation: "load", cause })))

    // ---- store ------------------------------------------------------------------------------

    const storeLocked = (epoch: QueueEpoch, requests: ReadonlyArray<StoreRequest>) =>
      locked(epoch, (head) =>
        Effect.gen(function*() {
          const existing = yield* selectJobs(distinct(requests.map((request) => request.messageId)))
          const plan = Rules.planStore(head.currentSeq, (id) => existing.get(id), requests)
          if (plan.appended.length > 0) {
            yield* insertJobs(plan.appended)
            yield* sql`UPDATE ${queues} SET current_seq = ${plan.currentSeq} WHERE name = ${name}`
          }
          return plan.results
        }))

    /**
     * PostgreSQL, one statement: assume every id is new, allocate the seqs and insert, all guarded
     * by the epoch. A stored id trips the unique index and the statement writes nothing; a stale
     * epoch matches no queue row. Either way `None` sends the request to the locked path.
     */
    const storeFast = (
      epoch: QueueEpoch,
      requests: ReadonlyArray<StoreRequest>
    ): Effect.Effect<Option.Option<ReadonlyArray<WorkStoreResult>>, SqlError> => {
      const draft = Rules.planStore(0, () => undefined, requests)
      if (draft.appended.length === 0) return Effect.succeedNone
      const jobs = draft.appended
      const count = draft.currentSeq
      return sql<{ readonly seq: number | string }>`WITH q AS (
          UPDATE ${queues} SET current_seq = current_seq + ${count}
          WHERE name = ${name} AND epoch = ${epoch}
          RETURNING current_seq - ${count} AS base
        )
        INSERT INTO ${entries} (queue, seq, message_id, payload, state)
        SELECT ${name}, q.base + r.seq, r.message_id, r.payload, ${Stored}
        FROM q, unnest(
          ${jobs.map((job) => job.entry.seq)}::bigint[], ${jobs.map((job) => job.entry.messageId)}::text[],
          ${jobs.map((job) => toParam(job.entry.payload))}::bytea[]
        ) AS r(seq, message_id, payload)
        RETURNING seq`.pipe(
        Effect.map((inserted) => {
          if (inserted.length !== jobs.length) return Option.none()
          const base = inserted.reduce((min, row) => Math.min(min, toNumber(row.seq)), Infinity) - 1
          return Option.some(Rules.planStore(base, () => undefined, requests).results)
        }),
        Effect.catchIf(isFastPathMiss, () => Effect.succeedNone)
      )
    }

    const store = (
      operation: string,
      epoch: QueueEpoch,
      requests: ReadonlyArray<StoreRequest>
    ): Effect.Effect<ReadonlyArray<WorkStoreResult>, QueueFenced | QueueConflict | QueueBackendError> => {
      const invalid = Rules.validateStore(requests)
      if (invalid !== undefined) return Effect.fail(invalid)
      const run = sql.onDialectOrElse({
        pg: () =>
          Effect.flatMap(storeFast(epoch, requests), (fast) =>
            Option.isSome(fast) ? Effect.succeed(fast.value) : storeLocked(epoch, requests)),
        orElse: () => storeLocked(epoch, requests)
      })
      return mapSqlError(operation)(run)
    }

    // ---- accept and confirm -----------------------------------------------------------------

    /** Accepts (`Accepted`) or confirms (`Confirmed`) in the locked transaction, with the rules. */
    const advanceLocked = (epoch: QueueEpoch, ids: ReadonlyArray<string>, to: typeof Accepted | typeof Confirmed) =>
      locked(epoch, () =>
        Effect.gen(function*() {
          const found = yield* selectStates(ids)
          const lookup = (id: string) => found.get(id)
          const toChange = yield* (to === Accepted ? Rules.planAccept(lookup, ids) : Rules.planConfirm(lookup, ids))
          if (toChange.length > 0) yield* setState(toChange, to)
        }))

    /**
     * PostgreSQL, one statement: advance one job from the state before `to` when the epoch holds;
     * the shared lock on the queue row orders it against `load`. No row updated (unknown id,
     * repeated, never accepted, stale epoch) sends the request to the locked path.
     */
    const advanceOneFast = (epoch: QueueEpoch, id: string, to: typeof Accepted | typeof Confirmed) => {
      const compact = to === Confirmed ? sql`, payload = ${toParam(emptyBytes)}` : sql.literal("")
      return sql`UPDATE ${entries} AS e SET state = ${to}${compact}
        FROM (SELECT epoch FROM ${queues} WHERE name = ${name} FOR SHARE) AS q
        WHERE e.queue = ${name} AND e.message_id = ${id} AND e.state = ${to - 1} AND q.epoch = ${epoch}
        RETURNING e.seq`.pipe(Effect.map((rows) => rows.length > 0))
    }

    /**
     * PostgreSQL, one statement: advance several jobs when the epoch holds and every id may take
     * the step (a failed batch must write nothing); otherwise write nothing and return false.
     */
    const advanceManyFast = (epoch: QueueEpoch, ids: ReadonlyArray<string>, to: typeof Accepted | typeof Confirmed) => {
      const compact = to === Confirmed ? sql`, payload = ${toParam(emptyBytes)}` : sql.literal("")
      return sql<{ readonly epoch: number | string | null; readonly found: number | string }>`WITH q AS (
          SELECT epoch FROM ${queues} WHERE name = ${name} FOR SHARE
        ), found AS (
          SELECT count(*) AS n FROM ${entries}
          WHERE queue = ${name} AND message_id = ANY(${ids}::text[]) AND state >= ${to - 1}
        ), updated AS (
          UPDATE ${entries} SET state = ${to}${compact}
          WHERE queue = ${name} AND message_id = ANY(${ids}::text[]) AND state = ${to - 1}
            AND (SELECT epoch FROM q) = ${epoch} AND (SELECT n FROM found) = ${ids.length}
          RETURNING 1
        )
        SELECT (SELECT epoch FROM q) AS epoch, (SELECT n FROM found) AS found, (SELECT count(*) FROM updated) AS updated`
        .pipe(
          Effect.map((rows) =>
            rows.length === 1 && rows[0].epoch !== null && toNumber(rows[0].epoch) === epoch &&
            toNumber(rows[0].found) === ids.length
          )
        )
    }

    const advance = (
      operation: string,
      epoch: QueueEpoch,
      messageIds: ReadonlyArray<string>,
      to: typeof Accepted | typeof Confirmed
    ): Effect.Effect<void, QueueFenced | QueueConflict | QueueBackendError> => {
      const ids = distinct(messageIds)
      const fast = ids.length === 0
        ? Effect.succeed(false)
        : (ids.length === 1 ? advanceOneFast(epoch, ids[0], to) : advanceManyFast(epoch, ids, to)).pipe(
          Effect.catchIf(isFastPathMiss, () => Effect.succeed(false))
        )
      const run = sql.onDialectOrElse({
        pg: () => Effect.flatMap(fast, (done) => done ? Effect.void : advanceLocked(epoch, ids, to)),
        orElse: () => advanceLocked(epoch, ids, to)
      })
      return mapSqlError(operation)(run)
    }

    return {
      load,
      store: (epoch, request) => Effect.map(store("store", epoch, [request]), (results) => results[0]),
      storeBatch: (epoch, requests) => store("storeBatch", epoch, requests),
      accept: (epoch, messageId) => advance("accept", epoch, [messageId], Accepted),
      acceptBatch: (epoch, messageIds) => advance("acceptBatch", epoch, messageIds, Accepted),
      confirmMessage: (epoch, messageId) => advance("confirmMessage", epoch, [messageId], Confirmed),
      confirmBatch: (epoch, messageIds) => advance("confirmBatch", epoch, messageIds, Confirmed)
    }
  })

/** The SQL work queue as a layer; the tables are created (if missing) when it is built. */
export const layer = (
  options: SqlQueueOptions
): Layer.Layer<DurableWorkQueue, QueueBackendError, SqlClient> => Layer.effect(DurableWorkQueue, make(options))
