/**
 * Runs a set of migrations with `@effect/sql`'s `Migrator`, for the durable queues' tables and
 * the cluster registry's (each set has its own migrations table, one per table prefix).
 *
 * Before the `Migrator` runs, a short transaction creates its table and, once, moves the rows of
 * the hand-written runner this replaced (a table of `version, name`) into it, then drops that
 * table: a database migrated by the old runner is picked up without running anything again.
 * That transaction is serialized per set: on PostgreSQL by an advisory lock (two processes
 * creating the `Migrator`'s table at once would otherwise collide), on SQLite by a first statement
 * that writes, which takes the database write lock. The `Migrator` then serializes its own runs
 * (on PostgreSQL it locks its table; on SQLite it runs inside that write-locked transaction).
 *
 * The `Migrator` finds its table on PostgreSQL with `'<table>'::regclass`, which folds the name
 * to lower case; the table's name is therefore lower case, and a prefix with capitals gets a
 * hash of itself appended, so prefixes differing in case only keep separate tables.
 */
import * as Migrator from "@effect/sql/Migrator"
import { SqlClient } from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { transaction } from "./SqlSupport.js"

/** One migration: its id (its order), a name, and what it does. */
export interface Migration<T> {
  readonly id: number
  readonly name: string
  readonly run: (sql: SqlClient, tables: T) => Effect.Effect<void, SqlError>
}

export interface MigrationSet<T> {
  /** The `Migrator`'s table (see `migratorTable`). */
  readonly table: string
  /** The table of the runner this replaced, whose rows move over once. */
  readonly legacyTable: string
  readonly migrations: ReadonlyArray<Migration<T>>
  readonly tables: T
}

/** A 31-bit FNV-1a hash. */
const fnv1a = (text: string): number => {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return hash & 0x7fffffff
}

/** The `Migrator`'s table for a prefix: lower case, with a hash of the prefix when it had capitals. */
export const migratorTable = (prefix: string, name: string): string => {
  const lower = prefix.toLowerCase()
  return lower === prefix ? `${prefix}${name}` : `${lower}${name}_${fnv1a(prefix).toString(36)}`
}

/** The `Migrator`'s own table, as it would create it (created here first: see the module comment). */
const createTable = (sql: SqlClient, table: string) =>
  sql.onDialectOrElse({
    pg: () =>
      sql`CREATE TABLE IF NOT EXISTS ${sql(table)} (
        migration_id integer PRIMARY KEY,
        created_at timestamp with time zone NOT NULL DEFAULT now(),
        name text NOT NULL
      )`,
    orElse: () =>
      sql`CREATE TABLE IF NOT EXISTS ${sql(table)} (
        migration_id integer PRIMARY KEY NOT NULL,
        created_at datetime NOT NULL DEFAULT current_timestamp,
        name VARCHAR(255) NOT NULL
      )`
  })

const legacyExists = (sql: SqlClient, legacyTable: string) =>
  Effect.map(
    sql.onDialectOrElse({
      pg: () => sql<{ readonly found: unknown }>`SELECT 1 AS found WHERE to_regclass(quote_ident(${legacyTable})) IS NOT NULL`,
      orElse: () =>
        sql<{ readonly found: unknown }>`SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND lower(name) = lower(${legacyTable})`
    }),
    (rows) => rows.length > 0
  )

/** Moves the old runner's rows into an empty `Migrator` table, once, and drops the old table. */
const moveLegacyRows = (sql: SqlClient, table: string, legacyTable: string) =>
  Effect.gen(function*() {
    const [recorded] = yield* sql<{ readonly n: number | string }>`SELECT count(*) AS n FROM ${sql(table)}`
    if (Number(recorded.n) > 0 || !(yield* legacyExists(sql, legacyTable))) return
    yield* sql`INSERT INTO ${sql(table)} (migration_id, name) SELECT version, name FROM ${sql(legacyTable)}`
    yield* sql`DROP TABLE ${sql(legacyTable)}`
  })

const runMigrator = <T>(sql: SqlClient, set: MigrationSet<T>): Effect.Effect<void, SqlError | Migrator.MigrationError> =>
  Migrator.make({})({
    table: set.table,
    loader: Migrator.fromRecord(
      Object.fromEntries(set.migrations.map((migration) => [`${migration.id}_${migration.name}`, migration.run(sql, set.tables)]))
    )
  }).pipe(Effect.asVoid, Effect.provideService(SqlClient, sql))

/** The `Migrator`'s failures (a failed migration is a defect there) as the callers' `SqlError`. */
const asSqlError = <A>(effect: Effect.Effect<A, SqlError | Migrator.MigrationError>): Effect.Effect<A, SqlError> =>
  effect.pipe(
    Effect.catchAllDefect((defect) => Effect.fail(new SqlError({ cause: defect, message: "a migration failed" }))),
    Effect.mapError((error) => error instanceof SqlError ? error : new SqlError({ cause: error, message: error.message }))
  )

/** Applies every migration of the set not applied yet. */
export const migrate = <T>(sql: SqlClient, set: MigrationSet<T>): Effect.Effect<void, SqlError> =>
  asSqlError(sql.onDialectOrElse({
    pg: () =>
      Effect.zipRight(
        transaction(
          sql,
          Effect.gen(function*() {
            yield* sql`SELECT pg_advisory_xact_lock(${fnv1a(`effect-reliable:${set.table}`)})`
            yield* createTable(sql, set.table)
            yield* moveLegacyRows(sql, set.table, set.legacyTable)
          })
        ),
        runMigrator(sql, set)
      ),
    orElse: () =>
      Effect.zipRight(
        createTable(sql, set.table),
        transaction(
          sql,
          Effect.gen(function*() {
            // takes SQLite's write lock at once, so concurrent runs wait here instead of failing later
            yield* sql`DELETE FROM ${sql(set.table)} WHERE migration_id < 0`
            yield* moveLegacyRows(sql, set.table, set.legacyTable)
            yield* runMigrator(sql, set)
          })
        )
      )
  }))
