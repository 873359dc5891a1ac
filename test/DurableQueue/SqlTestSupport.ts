/**
 * Test support for the SQL durable queues: one shared client per test file, fresh queue names
 * per layer build, and the PostgreSQL reachability rule (fail under CI, skip with a note locally).
 */
import { SqlClient } from "@effect/sql/SqlClient"
import { PgClient } from "@effect/sql-pg"
import { afterAll, beforeAll, describe, it } from "@effect/vitest"
import { Context, Duration, Effect, Exit, Layer, Redacted, Scope } from "effect"
import { randomUUID } from "node:crypto"
import type { DurableProducerQueue } from "../../src/DurableQueue/DurableProducerQueue.js"
import type { DurableWorkQueue } from "../../src/DurableQueue/DurableWorkQueue.js"
import * as SqlProducerQueue from "../../src/DurableQueue/SqlProducerQueue.js"
import * as SqlWorkQueue from "../../src/DurableQueue/SqlWorkQueue.js"

export const pgUrl = process.env.RELIABLE_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"

export const pgClientLayer = (): Layer.Layer<SqlClient, unknown> =>
  PgClient.layer({ url: Redacted.make(pgUrl), connectTimeout: Duration.seconds(5) })

/** A short random suffix, so parallel test files and runs never share tables or queues. */
export const uniqueSuffix = (): string => randomUUID().replaceAll("-", "").slice(0, 12)

/**
 * Builds `clientLayer` once for the test file (in `beforeAll`) and hands out a layer that shares
 * it; the client is closed in `afterAll`, after `cleanup` ran with it.
 */
export const sharedClient = (
  clientLayer: () => Layer.Layer<SqlClient, unknown>,
  cleanup?: Effect.Effect<void, unknown, SqlClient>
): Layer.Layer<SqlClient> => {
  let context: Context.Context<SqlClient> | undefined
  const scope = Effect.runSync(Scope.make())
  beforeAll(async () => {
    context = await Effect.runPromise(Layer.buildWithScope(clientLayer(), scope))
  })
  afterAll(async () => {
    if (context !== undefined && cleanup !== undefined) {
      await Effect.runPromise(Effect.provide(cleanup, context))
    }
    await Effect.runPromise(Scope.close(scope, Exit.void))
  })
  return Layer.effectContext(Effect.suspend(() =>
    context === undefined ? Effect.dieMessage("the shared SQL client is not built yet") : Effect.succeed(context)
  ))
}

/** A producer queue layer whose every build is a fresh queue (a new queue name). */
export const freshProducerQueue = (
  client: Layer.Layer<SqlClient>,
  tablePrefix: string
): Layer.Layer<DurableProducerQueue, unknown> =>
  Layer.unwrapEffect(
    Effect.sync(() => SqlProducerQueue.layerSql({ queueName: `producer-${uniqueSuffix()}`, tablePrefix }))
  ).pipe(Layer.provide(client))

/** A work queue layer whose every build is a fresh queue (a new queue name). */
export const freshWorkQueue = (
  client: Layer.Layer<SqlClient>,
  tablePrefix: string
): Layer.Layer<DurableWorkQueue, unknown> =>
  Layer.unwrapEffect(
    Effect.sync(() => SqlWorkQueue.layerWorkSql({ queueName: `work-${uniqueSuffix()}`, tablePrefix }))
  ).pipe(Layer.provide(client))

/** Drops every table whose name starts with the prefix (the test's own, randomly named). */
export const dropTables = (tablePrefix: string): Effect.Effect<void, unknown, SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    const tables = yield* sql.onDialectOrElse({
      pg: () =>
        sql<{ readonly name: string }>`SELECT tablename AS name FROM pg_tables
          WHERE schemaname = current_schema() AND starts_with(tablename, ${tablePrefix})`,
      orElse: () =>
        sql<{ readonly name: string }>`SELECT name FROM sqlite_master
          WHERE type = 'table' AND substr(name, 1, ${tablePrefix.length}) = ${tablePrefix}`
    })
    for (const { name } of tables) yield* sql`DROP TABLE IF EXISTS ${sql(name)}`
  })

/** Whether PostgreSQL answers at `pgUrl`; the reason when it does not. */
export const probePostgres: Promise<{ readonly reachable: true } | { readonly reachable: false; readonly reason: string }> =
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function*() {
        const context = yield* Layer.build(pgClientLayer())
        const sql = Context.get(context, PgClient.PgClient)
        yield* sql`SELECT 1`
        return { reachable: true as const }
      })
    ).pipe(
      Effect.timeoutFail({ duration: Duration.seconds(10), onTimeout: () => new Error("timed out after 10s") }),
      Effect.catchAllCause((cause) =>
        Effect.succeed({ reachable: false as const, reason: String(cause).split("\n")[0] })
      )
    )
  )

const redactedUrl = pgUrl.replace(/\/\/[^@/]*@/, "//***@")

/**
 * Declares the suite `name` when PostgreSQL answered the probe. Otherwise, under CI (`CI=true`),
 * one test that fails saying why; elsewhere one skipped test and a log line saying why.
 */
export const describePostgres = (
  probe: Awaited<typeof probePostgres>,
  name: string,
  suite: () => void
): void => {
  if (probe.reachable) return void describe(name, suite)
  const why = `PostgreSQL at ${redactedUrl} is unreachable: ${probe.reason}`
  if (process.env.CI === "true") {
    return void describe(name, () => {
      it("PostgreSQL is reachable (required under CI)", () => {
        throw new Error(why)
      })
    })
  }
  console.log(`skipping "${name}": ${why}`)
  describe(name, () => {
    it.skip(`skipped: ${why}`, () => {})
  })
}
