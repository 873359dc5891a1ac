/**
 * Tables of the SQL durable queues and the small migration runner that creates them at layer
 * build. Many queues share one database: every row is keyed by queue name, and every table name
 * starts with a configurable prefix (default `reliable_`). Applied migrations are recorded in
 * `<prefix>migrations`; running them again, from any number of processes at once, is harmless.
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { QueueBackendError } from "../QueueErrors.js"
import { transaction } from "./SqlSupport.js"

export const defaultTablePrefix = "reliable_"

export interface Tables {
  readonly prefix: string
  readonly migrations: string
  readonly producerQueues: string
  readonly producerEntries: string
  readonly workQueues: string
  readonly workEntries: string
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
    migrations: `${prefix}migrations`,
    producerQueues: `${prefix}producer_queues`,
    producerEntries: `${prefix}producer_entries`,
    workQueues: `${prefix}work_queues`,
    workEntries: `${prefix}work_entries`
  })
}

interface Migration {
  readonly version: number
  readonly name: string
  readonly run: (sql: SqlClient, tables: Tables) => Effect.Effect<void, SqlError>
}

const bytesType = (sql: SqlClient) => sql.literal(sql.onDialectOrElse({ pg: () => "BYTEA", orElse: () => "BLOB" }))

/**
 * PostgreSQL: leave room in each page so that accepting, confirming and compacting a recent entry
 * can update it in place (a HOT update) instead of writing new index entries (lowered to 50 by
 * migration 3).
 */
const entryTableOptions = (sql: SqlClient) =>
  sql.literal(sql.onDialectOrElse({ pg: () => "WITH (fillfactor = 70)", orElse: () => "" }))

const migrations: ReadonlyArray<Migration> = [
  {
    version: 1,
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
    version: 2,
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
    version: 3,
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
  }
]

/** A 31-bit FNV-1a hash, the advisory lock key of a prefix's migrations on PostgreSQL. */
const lockKey = (text: string): number => {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return hash & 0x7fffffff
}

/**
 * Serializes concurrent migration runs: on PostgreSQL an advisory transaction lock per prefix,
 * on SQLite a first statement that writes, which takes the database write lock at once.
 */
const lockMigrations = (sql: SqlClient, t: Tables) =>
  sql.onDialectOrElse({
    pg: () => sql`SELECT pg_advisory_xact_lock(${lockKey(`effect-reliable:${t.prefix}`)})`,
    orElse: () => sql`DELETE FROM ${sql(t.migrations)} WHERE version < 0`
  })

const createMigrationsTable = (sql: SqlClient, t: Tables) =>
  sql`CREATE TABLE IF NOT EXISTS ${sql(t.migrations)} (
    version INTEGER NOT NULL PRIMARY KEY,
    name TEXT NOT NULL
  )`

/** Applies every migration not recorded yet, in one transaction. */
export const migrate = (sql: SqlClient, t: Tables): Effect.Effect<void, SqlError> =>
  Effect.gen(function*() {
    // SQLite takes its write lock through the migrations table, so it must exist first
    yield* sql.onDialectOrElse({ pg: () => Effect.void, orElse: () => createMigrationsTable(sql, t) })
    yield* transaction(
      sql,
      Effect.gen(function*() {
        yield* lockMigrations(sql, t)
        yield* createMigrationsTable(sql, t)
        const rows = yield* sql<{ readonly version: number | string }>`SELECT version FROM ${sql(t.migrations)}`
        const applied = new Set(rows.map((row) => Number(row.version)))
        for (const migration of migrations) {
          if (applied.has(migration.version)) continue
          yield* migration.run(sql, t)
          yield* sql`INSERT INTO ${sql(t.migrations)} (version, name) VALUES (${migration.version}, ${migration.name})`
        }
      })
    )
  })
