/**
 * Tables of the SQL durable queues and the migrations that create them at layer build (run by
 * `@effect/sql`'s `Migrator`, see `SqlMigrator`). Many queues share one database: every row is
 * keyed by queue name, and every table name starts with a configurable prefix (default
 * `reliable_`). Applied migrations are recorded in `<prefix>queue_migrations` (before version 2:
 * `<prefix>migrations`, moved over once); running them again, from any number of processes at
 * once, is harmless.
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { QueueBackendError } from "../QueueErrors.js"
import type { Migration } from "./SqlMigrator.js"
import * as SqlMigrator from "./SqlMigrator.js"

export const defaultTablePrefix = "reliable_"

export interface Tables {
  readonly prefix: string
  /** The `Migrator`'s record of applied migrations. */
  readonly migrations: string
  /** The record of the hand-written runner before it (moved into `migrations` once). */
  readonly legacyMigrations: string
  readonly producerQueues: string
  readonly producerEntries: string
  readonly workQueues: string
  readonly workEntries: string
  readonly producerBacklog: string
  readonly workBacklog: string
}

const prefixPattern = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/

/** The table names for a prefix; a prefix must be a plain SQL identifier of at most 40 characters. */
export const tables = (tablePrefix: string | undefined): Effect.Effect<Tables, QueueBackendError> => {
  const prefix = tablePrefix ?? defaultTablePrefix
  if (!prefixPattern.test(prefix)) {
    return Effect.fail(
      new QueueBackendError({
        operation: "configure",
        cause: new Error(`invalid table prefix ${JSON.stringify(prefix)}: use letters, digits and _ (at most 40)`)
      })
    )
  }
  return Effect.succeed({
    prefix,
    migrations: SqlMigrator.migratorTable(prefix, "queue_migrations"),
    legacyMigrations: `${prefix}migrations`,
    producerQueues: `${prefix}producer_queues`,
    producerEntries: `${prefix}producer_entries`,
    workQueues: `${prefix}work_queues`,
    workEntries: `${prefix}work_entries`,
    producerBacklog: `${prefix}producer_backlog`,
    workBacklog: `${prefix}work_backlog`
  })
}

const bytesType = (sql: SqlClient) => sql.literal(sql.onDialectOrElse({ pg: () => "BYTEA", orElse: () => "BLOB" }))

/**
 * PostgreSQL: leave room in each page so that accepting, confirming and compacting a recent entry
 * can update it in place (a HOT update) instead of writing new index entries (lowered to 50 by
 * migration 3).
 */
const entryTableOptions = (sql: SqlClient) =>
  sql.literal(sql.onDialectOrElse({ pg: () => "WITH (fillfactor = 70)", orElse: () => "" }))

const migrations: ReadonlyArray<Migration<Tables>> = [
  {
    id: 1,
    name: "producer_queue",
    run: (sql, t) =>
      Effect.all([
        sql`CREATE TABLE IF NOT EXISTS ${sql(t.producerQueues)} (
          name TEXT NOT NULL PRIMARY KEY,
          epoch BIGINT NOT NULL,
          current_seq BIGINT NOT NULL,
          confirmed_seq BIGINT NOT NULL
        )`,
        sql`CREATE TABLE IF NOT EXISTS ${sql(t.producerEntries)} (
          queue TEXT NOT NULL,
          seq BIGINT NOT NULL,
          business_id TEXT NOT NULL,
          part INTEGER NOT NULL,
          part_count INTEGER NOT NULL,
          payload ${bytesType(sql)} NOT NULL,
          accepted SMALLINT NOT NULL,
          PRIMARY KEY (queue, seq)
        ) ${entryTableOptions(sql)}`,
        // one row per (business id, part): a whole message is part 0 of 0, so a whole message and
        // a chunked batch of the same business id can never both be stored
        sql`CREATE UNIQUE INDEX IF NOT EXISTS ${sql(`${t.producerEntries}_business`)}
          ON ${sql(t.producerEntries)} (queue, business_id, part)`
      ], { discard: true })
  },
  {
    id: 2,
    name: "work_queue",
    run: (sql, t) =>
      Effect.all([
        sql`CREATE TABLE IF NOT EXISTS ${sql(t.workQueues)} (
          name TEXT NOT NULL PRIMARY KEY,
          epoch BIGINT NOT NULL,
          current_seq BIGINT NOT NULL
        )`,
        // state: 0 stored, 1 accepted, 2 confirmed (payload compacted)
        sql`CREATE TABLE IF NOT EXISTS ${sql(t.workEntries)} (
          queue TEXT NOT NULL,
          seq BIGINT NOT NULL,
          message_id TEXT NOT NULL,
          payload ${bytesType(sql)} NOT NULL,
          state SMALLINT NOT NULL,
          PRIMARY KEY (queue, seq)
        ) ${entryTableOptions(sql)}`,
        sql`CREATE UNIQUE INDEX IF NOT EXISTS ${sql(`${t.workEntries}_message`)}
          ON ${sql(t.workEntries)} (queue, message_id)`,
        sql`CREATE INDEX IF NOT EXISTS ${sql(`${t.workEntries}_pending`)}
          ON ${sql(t.workEntries)} (queue, seq) WHERE state = 1`
      ], { discard: true })
  },
  {
    id: 3,
    name: "in_place_updates",
    // Confirming (and compacting) updates every row once. The partial index on pending jobs made
    // each of those updates rewrite the job's index entries (PostgreSQL updates a row in place
    // only when no column an index depends on changes), and planners preferred it for by-seq
    // updates, scanning every pending job per batch; a load instead reads from `settled_seq`,
    // below which every job is confirmed. Half-empty pages leave room for the new version of
    // every row of a page, so a batch confirming a whole page still updates in place.
    run: (sql, t) =>
      Effect.all([
        sql`DROP INDEX IF EXISTS ${sql(`${t.workEntries}_pending`)}`,
        sql`ALTER TABLE ${sql(t.workQueues)} ADD COLUMN settled_seq BIGINT NOT NULL DEFAULT 0`,
        ...sql.onDialectOrElse({
          pg: () => [
            sql`ALTER TABLE ${sql(t.workEntries)} SET (fillfactor = 50)`,
            sql`ALTER TABLE ${sql(t.producerEntries)} SET (fillfactor = 50)`
          ],
          orElse: () => []
        })
      ], { discard: true })
  },
  {
    id: 4,
    name: "entry_states",
    // Producer entries get the work entries' states: 0 stored, 1 accepted, 2 confirmed, 3
    // dead-lettered. Entries the old watermark covered become confirmed; `confirmed_seq` becomes
    // the low mark (below the first stored or accepted entry) and the old watermark the confirm
    // cursor; `late_seq` marks entries accepted after a confirm passed them (none yet).
    run: (sql, t) => {
      const queues = sql(t.producerQueues)
      const entries = sql(t.producerEntries)
      return Effect.all([
        sql`ALTER TABLE ${entries} RENAME COLUMN accepted TO state`,
        sql`ALTER TABLE ${queues} ADD COLUMN confirm_cursor BIGINT NOT NULL DEFAULT 0`,
        sql`ALTER TABLE ${queues} ADD COLUMN late_seq BIGINT NULL`,
        sql`UPDATE ${entries} SET state = 2
          WHERE state = 1 AND seq <= (SELECT q.confirmed_seq FROM ${queues} q WHERE q.name = ${entries}.queue)`,
        sql`UPDATE ${queues} SET confirm_cursor = confirmed_seq, confirmed_seq = COALESCE(
          (SELECT min(e.seq) - 1 FROM ${entries} e WHERE e.queue = ${queues}.name AND e.state IN (0, 1)),
          current_seq
        )`
      ], { discard: true })
    }
  },
  {
    id: 5,
    name: "entry_details",
    // The send time and trace of every entry, failed attempts, and dead letters (found through a
    // partial index on `dead_at`, a column no other update touches, so updates stay in place).
    run: (sql, t) =>
      Effect.all([
        ...[t.producerEntries, t.workEntries].flatMap((table) => [
          sql`ALTER TABLE ${sql(table)} ADD COLUMN enqueued_at BIGINT NULL`,
          sql`ALTER TABLE ${sql(table)} ADD COLUMN trace TEXT NULL`,
          sql`ALTER TABLE ${sql(table)} ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0`,
          sql`ALTER TABLE ${sql(table)} ADD COLUMN last_error TEXT NULL`,
          sql`ALTER TABLE ${sql(table)} ADD COLUMN dead_at BIGINT NULL`,
          sql`CREATE INDEX IF NOT EXISTS ${sql(`${table}_dead`)} ON ${sql(table)} (queue, seq) WHERE dead_at IS NOT NULL`
        ]),
        sql`ALTER TABLE ${sql(t.workEntries)} ADD COLUMN not_before BIGINT NULL`
      ], { discard: true })
  },
  {
    id: 6,
    name: "backlogs",
    // Messages enqueued without a seq, read in the order their ids were drawn.
    run: (sql, t) => Effect.all([t.producerBacklog, t.workBacklog].map((table) => createBacklog(sql, table)), { discard: true })
  }
]

const createBacklog = (sql: SqlClient, table: string): Effect.Effect<void, SqlError> => {
  const statements: ReadonlyArray<Effect.Effect<unknown, SqlError>> = [
    sql.onDialectOrElse({
      pg: () =>
        sql`CREATE TABLE IF NOT EXISTS ${sql(table)} (
          id BIGINT GENERATED ALWAYS AS IDENTITY,
          queue TEXT NOT NULL,
          message_id TEXT NOT NULL,
          payload BYTEA NOT NULL,
          enqueued_at BIGINT NOT NULL,
          trace TEXT NULL,
          PRIMARY KEY (queue, id)
        )`,
      // the rowid: a new row's is above every row's in the table, so ids follow commit order
      orElse: () =>
        sql`CREATE TABLE IF NOT EXISTS ${sql(table)} (
          id INTEGER PRIMARY KEY,
          queue TEXT NOT NULL,
          message_id TEXT NOT NULL,
          payload BLOB NOT NULL,
          enqueued_at BIGINT NOT NULL,
          trace TEXT NULL
        )`
    }),
    // PostgreSQL's primary key (queue, id) orders it already
    sql.onDialectOrElse({
      pg: () => Effect.void,
      orElse: () => sql`CREATE INDEX IF NOT EXISTS ${sql(`${table}_order`)} ON ${sql(table)} (queue, id)`
    }),
    sql`CREATE UNIQUE INDEX IF NOT EXISTS ${sql(`${table}_message`)} ON ${sql(table)} (queue, message_id)`
  ]
  return Effect.all(statements, { discard: true })
}

/** Applies every migration not applied yet (see `SqlMigrator`). */
export const migrate = (sql: SqlClient, t: Tables): Effect.Effect<void, SqlError> =>
  SqlMigrator.migrate(sql, { table: t.migrations, legacyTable: t.legacyMigrations, migrations, tables: t })
