/**
 * Work-pulling benchmarks: no-op jobs through `sendAll` to 1, 2, 4 or 8 in-process workers on
 * the memory transport, and the same flow with the PostgreSQL durable work queue (every job
 * stored, accepted and confirmed in the database). Each function returns one `Row`.
 */
import { PgClient } from "@effect/sql-pg"
import { Deferred, Duration, Effect, Layer, Redacted, Schedule, Schema } from "effect"
import type { DurableWorkQueueService } from "../src/DurableQueue/DurableWorkQueue.js"
import * as SqlWorkQueue from "../src/DurableQueue/SqlWorkQueue.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { dropTables, freshPrefix } from "./pgTables.js"
import { measure } from "./Row.js"

const Job = Schema.Struct({ jobId: Schema.Number, kind: Schema.String })

/**
 * One dispatcher, `workers` no-op workers, `jobs` jobs sent in batches of 1000. With `failing`,
 * every job whose id is a multiple of `failing.every` fails its first `failing.times` attempts,
 * retried after `failing.retry` (the workers' retry Schedule; the default when absent).
 */
const flow = (
  jobs: number,
  workers: number,
  window: number,
  durableWorkQueue: DurableWorkQueueService | undefined,
  failing?: { readonly every: number; readonly times: number; readonly retry?: Schedule.Schedule<unknown> }
) =>
  Effect.gen(function*() {
    const producer = yield* WorkPulling.producer({
      name: "bench-dispatcher",
      payload: Job,
      ...(durableWorkQueue === undefined ? {} : { durableWorkQueue })
    })
    const done = yield* Deferred.make<void>()
    let completed = 0
    for (let index = 0; index < workers; index++) {
      const worker = yield* WorkPulling.worker({
        name: `bench-worker-${index}`,
        producer: "bench-dispatcher",
        payload: Job,
        window,
        ...(failing?.retry === undefined ? {} : { retry: failing.retry })
      })
      yield* Effect.forkScoped(worker.run((delivery) => {
        if (failing !== undefined && delivery.payload.jobId % failing.every === 0 && delivery.attempt <= failing.times) {
          return Effect.fail("planned failure")
        }
        return Effect.sync(() => {
          if (++completed === jobs) Deferred.unsafeDone(done, Effect.void)
        })
      }))
    }
    const batch = 1000
    for (let first = 0; first < jobs; first += batch) {
      const count = Math.min(batch, jobs - first)
      yield* producer.sendAll(Array.from({ length: count }, (_, index) => ({ payload: { jobId: first + index, kind: "noop" } })))
    }
    yield* Deferred.await(done)
  }).pipe(
    Effect.scoped,
    Effect.provide(ReliableSystem.layer().pipe(Layer.provide(MemoryTransport.layerMemory)))
  )

/** No-op jobs over `workers` in-process workers (memory transport, no durable queue). */
export const inProcess = (jobs: number, workers: number, window = 50) =>
  measure(
    `work-pulling sendAll, ${workers} worker${workers === 1 ? "" : "s"} (window ${window}), ${jobs.toLocaleString("en")} no-op jobs`,
    jobs,
    flow(jobs, workers, window, undefined),
    "jobs/s"
  )

export const pgUrl = process.env.RELIABLE_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"

/** The PostgreSQL work queue on fresh, randomly named tables that are dropped afterwards. */
const withPgQueue = <A, E>(use: (queue: DurableWorkQueueService) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const tablePrefix = freshPrefix()
    const context = yield* Layer.build(PgClient.layer({ url: Redacted.make(pgUrl), connectTimeout: Duration.seconds(5) }))
    yield* Effect.addFinalizer(() => Effect.provide(dropTables(tablePrefix), context))
    const queue = yield* Effect.provide(SqlWorkQueue.makeWorkSql({ queueName: "bench", tablePrefix }), context)
    return yield* use(queue)
  }).pipe(Effect.scoped)

/** No-op jobs over `workers` workers with every job stored, accepted and confirmed in PostgreSQL. */
export const durablePg = (jobs: number, workers = 4, window = 250) =>
  withPgQueue((queue) =>
    measure(
      `work-pulling sendAll + PostgreSQL work queue, ${workers} workers (window ${window}), ${jobs.toLocaleString("en")} no-op jobs`,
      jobs,
      flow(jobs, workers, window, queue),
      "jobs/s"
    )
  )

/**
 * The same PostgreSQL flow with 1% of the jobs failing twice before they succeed. With the
 * default retry Schedule (200 ms, then 400 ms) the last failing jobs add about 0.6 s after every
 * other job is done, whatever the rate; `retryMillis` sets a shorter first delay (doubling), so
 * the row shows what handling the failures costs rather than how long the schedule waits.
 */
export const durablePgFailing = (jobs: number, retryMillis?: number, workers = 4, window = 250) =>
  withPgQueue((queue) =>
    measure(
      `work-pulling sendAll + PostgreSQL work queue, ${workers} workers (window ${window}), ${jobs.toLocaleString("en")} jobs, 1% failing twice` +
        (retryMillis === undefined ? " (default retry)" : ` (retry ${retryMillis} ms, doubling)`),
      jobs,
      flow(jobs, workers, window, queue, {
        every: 100,
        times: 2,
        ...(retryMillis === undefined ? {} : { retry: Schedule.exponential(Duration.millis(retryMillis)) })
      }),
      "jobs/s"
    )
  )
