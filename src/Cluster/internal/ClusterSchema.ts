/**
 * Tables of the PostgreSQL cluster registry and the migrations that create them at layer build
 * (run by `@effect/sql`'s `Migrator`, as the durable queues' are: see `SqlMigrator`). Table names
 * start with a configurable prefix (default `reliable_`), so several clusters (or test runs) can
 * share one database. Applied migrations are recorded in `<prefix>cluster_schema_migrations`
 * (before: `<prefix>cluster_migrations`, moved over once); running them again, from any number of
 * nodes at once, is harmless.
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import type { Migration } from "../../DurableQueue/internal/SqlMigrator.js"
import * as SqlMigrator from "../../DurableQueue/internal/SqlMigrator.js"
import { ClusterRegistryError } from "../ClusterErrors.js"

export const defaultTablePrefix = "reliable_"

export interface ClusterTables {
  readonly prefix: string
  /** The `Migrator`'s record of applied migrations. */
  readonly migrations: string
  /** The record of the hand-written runner before it (moved into `migrations` once). */
  readonly legacyMigrations: string
  readonly nodes: string
  readonly endpoints: string
}

const prefixPattern = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/

/** The table names for a prefix: a plain SQL identifier of at most 40 characters. */
export const tables = (tablePrefix: string | undefined): Effect.Effect<ClusterTables, ClusterRegistryError> => {
  const prefix = tablePrefix ?? defaultTablePrefix
  if (!prefixPattern.test(prefix)) {
    return Effect.fail(new ClusterRegistryError({
      operation: "configure",
      cause: new Error(`invalid table prefix ${JSON.stringify(prefix)}: use letters, digits and _ (at most 40)`)
    }))
  }
  return Effect.succeed({
    prefix,
    migrations: SqlMigrator.migratorTable(prefix, "cluster_schema_migrations"),
    legacyMigrations: `${prefix}cluster_migrations`,
    nodes: `${prefix}cluster_nodes`,
    endpoints: `${prefix}cluster_endpoints`
  })
}

const migrations: ReadonlyArray<Migration<ClusterTables>> = [
  {
    id: 1,
    name: "cluster_registry",
    run: (sql, t) =>
      Effect.all([
        // one row per node address; a rejoin replaces the incarnation
        sql`CREATE TABLE IF NOT EXISTS ${sql(t.nodes)} (
          node TEXT NOT NULL PRIMARY KEY,
          incarnation TEXT NOT NULL,
          factories TEXT[] NOT NULL,
          lease_expires_at TIMESTAMPTZ NOT NULL,
          joined_at TIMESTAMPTZ NOT NULL
        )`,
        // kind is NULL while a placed or relocated record waits for its node to start it
        sql`CREATE TABLE IF NOT EXISTS ${sql(t.endpoints)} (
          name TEXT NOT NULL PRIMARY KEY,
          kind TEXT NULL,
          peer TEXT NULL,
          factory TEXT NULL,
          node TEXT NOT NULL,
          node_incarnation TEXT NOT NULL,
          generation BIGINT NOT NULL,
          updated_at TIMESTAMPTZ NOT NULL
        )`,
        sql`CREATE INDEX IF NOT EXISTS ${sql(`${t.endpoints}_node`)} ON ${sql(t.endpoints)} (node, node_incarnation)`,
        sql`CREATE INDEX IF NOT EXISTS ${sql(`${t.endpoints}_factory`)} ON ${sql(t.endpoints)} (factory)
          WHERE factory IS NOT NULL`
      ], { discard: true })
  }
]

/** Applies every migration not applied yet (see `SqlMigrator`). */
export const migrate = (sql: SqlClient, t: ClusterTables): Effect.Effect<void, SqlError> =>
  SqlMigrator.migrate(sql, { table: t.migrations, legacyTable: t.legacyMigrations, migrations, tables: t })
