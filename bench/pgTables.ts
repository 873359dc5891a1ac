/**
 * The PostgreSQL benches run on tables of a fresh prefix and drop them at the end of each run:
 * every table whose name starts with the prefix, so nothing the migrations create (the producer
 * and work queue tables, the registry's, the migration records) stays behind.
 */
import { SqlClient } from "@effect/sql/SqlClient"
import { Effect } from "effect"
import { randomUUID } from "node:crypto"

/** A table prefix no other run uses. */
export const freshPrefix = (): string => `bench_${randomUUID().replaceAll("-", "").slice(0, 12)}_`

/** Drops every table of the current schema whose name starts with `prefix`; a failure is logged. */
export const dropTables = (prefix: string): Effect.Effect<void, never, SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    const tables = yield* sql<{ readonly tablename: string }>`
      SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, ${prefix})`
    for (const { tablename } of tables) yield* sql`DROP TABLE IF EXISTS ${sql(tablename)} CASCADE`
  }).pipe(Effect.catchAllCause((cause) => Effect.logWarning(`bench: dropping the tables ${prefix}* failed`, cause)))
