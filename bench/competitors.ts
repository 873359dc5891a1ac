/**
 * The work-pulling PostgreSQL workload on two established job queues, for the comparison in the
 * bench table: `jobs` no-op jobs enqueued in batches of 1000 while 4 workers (each holding up
 * to 250 jobs at a time, the window of the work-pulling case) process them, timed from the first
 * enqueue until every job's handler ran. Each library gets a fresh schema in the same database,
 * dropped afterwards, and its documented high-throughput settings.
 */
import { PgClient } from "@effect/sql-pg"
import { SqlClient } from "@effect/sql/SqlClient"
import { Duration, Effect, Redacted } from "effect"
import { Logger } from "graphile-worker"
import type { Runner, WorkerUtils } from "graphile-worker"
import * as GraphileWorker from "graphile-worker"
import PgBoss from "pg-boss"
import { randomUUID } from "node:crypto"
import { measure } from "./Row.js"
import type { Row } from "./Row.js"

const pgUrl = process.env.RELIABLE_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"
const workers = 4
const perWorker = 250
const enqueueBatch = 1000

const suffix = () => randomUUID().replaceAll("-", "").slice(0, 12)

/** Drops a library's schema after its run. */
const dropSchema = (schema: string): Promise<void> =>
  Effect.runPromise(
    Effect.gen(function*() {
      const sql = yield* SqlClient
      yield* sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`
    }).pipe(
      Effect.provide(PgClient.layer({ url: Redacted.make(pgUrl), connectTimeout: Duration.seconds(5) })),
      Effect.catchAllCause((cause) => Effect.logError(`dropping ${schema}`, cause))
    )
  )

/** Resolves when `count` reaches `total`. */
const counter = (total: number) => {
  let count = 0
  let done: () => void = () => undefined
  const finished = new Promise<void>((resolve) => {
    done = resolve
  })
  return {
    add: (n: number) => {
      count += n
      if (count >= total) done()
    },
    finished
  }
}

const jobData = (index: number) => ({ jobId: index, kind: "noop" })

/** Times `body` as the other cases are timed, with the setup in the row's note. */
const timed = (name: string, jobs: number, note: string, body: () => Promise<void>): Promise<Row> =>
  Effect.runPromise(Effect.map(measure(name, jobs, Effect.promise(body), "jobs/s"), (row) => ({ ...row, note })))

/**
 * pg-boss: one queue, `workers` polling `work()` loops fetching up to `perWorker` jobs each
 * (pg-boss completes a fetched batch once its handler resolves), `insert` in batches.
 */
export const pgBoss = (jobs: number): Effect.Effect<Row, unknown> =>
  Effect.promise(async () => {
    const schema = `bench_pgboss_${suffix()}`
    const boss = new PgBoss({ connectionString: pgUrl, schema, supervise: false, schedule: false, max: workers + 2 })
    boss.on("error", (error) => console.error("pg-boss:", error))
    await boss.start()
    try {
      const queue = "noop"
      await boss.createQueue(queue)
      const progress = counter(jobs)
      for (let index = 0; index < workers; index++) {
        await boss.work(queue, { batchSize: perWorker, pollingIntervalSeconds: 0.5 }, async (batch) => {
          progress.add(batch.length)
        })
      }
      return await timed(
        `pg-boss 10.4.2, ${workers} work() loops (batchSize ${perWorker}, polling 0.5 s, its minimum), ${jobs.toLocaleString("en")} no-op jobs`,
        jobs,
        "same PostgreSQL; insert() batches of 1000 while the workers run; no-op handler; done when every handler ran",
        async () => {
          for (let first = 0; first < jobs; first += enqueueBatch) {
            const count = Math.min(enqueueBatch, jobs - first)
            await boss.insert(Array.from({ length: count }, (_, index) => ({ name: queue, data: jobData(first + index) })))
          }
          await progress.finished
        }
      )
    } finally {
      await boss.stop({ graceful: false, wait: true })
      await dropSchema(schema)
    }
  })

const quiet = new Logger(() => (level, message) => {
  if (level === "error") console.error(`graphile-worker: ${message}`)
})

/**
 * graphile-worker: one runner with `workers` concurrent jobs, a local queue that locks
 * `workers * perWorker` jobs per fetch, completions batched (`completeJobBatchDelay: 0`), jobs
 * added with `addJobs` in batches; new jobs wake the runner through LISTEN/NOTIFY.
 */
export const graphileWorker = (jobs: number): Effect.Effect<Row, unknown> =>
  Effect.promise(async () => {
    const schema = `bench_graphile_${suffix()}`
    const progress = counter(jobs)
    const utils: WorkerUtils = await GraphileWorker.makeWorkerUtils({ connectionString: pgUrl, schema, logger: quiet })
    let runner: Runner | undefined
    try {
      await utils.migrate()
      runner = await GraphileWorker.run({
        connectionString: pgUrl,
        schema,
        concurrency: workers,
        noHandleSignals: true,
        pollInterval: 1000,
        logger: quiet,
        taskList: {
          noop: async () => {
            progress.add(1)
          }
        },
        preset: {
          worker: {
            localQueue: { size: workers * perWorker },
            completeJobBatchDelay: 0,
            maxPoolSize: workers + 2
          }
        }
      })
      return await timed(
        `graphile-worker 0.17.3, concurrency ${workers} (local queue ${workers * perWorker}, batched completion), ${jobs.toLocaleString("en")} no-op jobs`,
        jobs,
        "same PostgreSQL; addJobs() batches of 1000 while the runner works; no-op task; done when every task ran",
        async () => {
          for (let first = 0; first < jobs; first += enqueueBatch) {
            const count = Math.min(enqueueBatch, jobs - first)
            await utils.addJobs(Array.from({ length: count }, (_, index) => ({ identifier: "noop", payload: jobData(first + index) })))
          }
          await progress.finished
        }
      )
    } finally {
      await runner?.stop()
      await utils.release()
      await dropSchema(schema)
    }
  })
