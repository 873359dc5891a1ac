/**
 * Test support for cluster mode: dropping a test's registry tables.
 */
import { SqlClient } from "@effect/sql/SqlClient"
import { Effect } from "effect"

/** Drops every cluster registry table of a prefix (the test's own, randomly named). */
export const dropClusterTables = (tablePrefix: string): Effect.Effect<void, unknown, SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    for (const table of ["cluster_endpoints", "cluster_nodes", "cluster_migrations"]) {
      yield* sql`DROP TABLE IF EXISTS ${sql(`${tablePrefix}${table}`)}`
    }
  })
