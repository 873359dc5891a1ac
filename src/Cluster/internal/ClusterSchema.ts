/**
 * Tables of the PostgreSQL cluster registry and the migrations that create them at layer build.
 * Table names start with a configurable prefix (default `reliable_`), so several clusters (or
 * test runs) can share one database. Applied migrations are recorded in
 * `<prefix>cluster_migrations`; running them again, from any number of nodes at once, is harmless.
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { ClusterRegistryError } from "../ClusterErrors.js"

export const defaultTablePrefix = "reliable_"

export interface ClusterTables {
  readonly prefix: string
  readonly migrations: string
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
    migrations: `${prefix}cluster_migrations`,
    nodes: `${prefix}cluster_nodes`,
    endpoints: `${prefix}cluster_endpoints`
  })
}

interface Migration {
  readonly version: number
  readonly name: string
  readonly run: (sql: SqlClient, tables: ClusterTables) => Effect.Effect<void, SqlError>
}

const migrations: ReadonlyArray<Migration> = [
  {
    version: 1,
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

/** A 31-bit FNV-1a hash: the advisory lock key of a prefix's migrations. */
const lockKey = (text: string): number => {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return hash & 0x7fffffff
}

/** Applies every migration not recorded yet, in one transaction under an advisory lock. */
export const migrate = (sql: SqlClient, t: ClusterTables): Effect.Effect<void, SqlError> =>
  sql.withTransaction(Effect.gen(function*() {
    yield* sql`SELECT pg_advisory_xact_lock(${lockKey(`effect-reliable-cluster:${t.prefix}`)})`
    yield* sql`CREATE TABLE IF NOT EXISTS ${sql(t.migrations)} (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL)`
    const rows = yield* sql<{ readonly version: number | string }>`SELECT version FROM ${sql(t.migrations)}`
    const applied = new Set(rows.map((row) => Number(row.version)))
    for (const migration of migrations) {
      if (applied.has(migration.version)) continue
      yield* migration.run(sql, t)
      yield* sql`INSERT INTO ${sql(t.migrations)} (version, name) VALUES (${migration.version}, ${migration.name})`
    }
  }))
