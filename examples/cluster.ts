/**
 * Cluster mode on PostgreSQL (`npx tsx examples/cluster.ts`; needs PostgreSQL at RELIABLE_PG_URL,
 * default postgres://postgres@127.0.0.1:5432/test).
 *
 * Run without arguments, this file is the operator: it starts three cluster nodes as child
 * processes on 127.0.0.1, all sharing one registry (PostgreSQL tables with a fresh prefix, dropped
 * when the operator ends). Every node hosts a worker and registers the relocatable factory
 * "dispatcher": a work-pulling producer whose jobs are kept in a durable PostgreSQL work queue.
 * Node 1 creates the dispatcher (`Cluster.spawn`); the workers of all three nodes pull jobs from
 * it. Mid-flow the operator kills node 1 with SIGKILL. Its lease runs out, exactly one surviving
 * node re-creates the dispatcher through the same factory, the new dispatcher reloads the queue
 * under a fresh epoch and dispatches the jobs that were accepted but not confirmed, and the
 * surviving workers finish.
 *
 * What to expect: every job is processed; the jobs node 1's worker or dispatcher had in flight
 * when it died are processed again (at least once: handlers must be idempotent).
 */
import { PgClient } from "@effect/sql-pg"
import { SqlClient } from "@effect/sql/SqlClient"
import { Console, Duration, Effect, Layer, Redacted, Schema } from "effect"
import * as ChildProcess from "node:child_process"
import { randomUUID } from "node:crypto"
import * as Readline from "node:readline"
import { fileURLToPath } from "node:url"
import { Cluster, DurableQueue, ReliableSystem, Transport, WorkPulling } from "effect-reliable"

const Job = Schema.Struct({ jobId: Schema.Number, task: Schema.String })
const jobs = 3_000
const pgUrl = process.env.RELIABLE_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"
const lease = Duration.seconds(1)

// ---- a node ----

/** The relocatable dispatcher: on every node that may host it, under the same key. */
const dispatcher = (label: string, tablePrefix: string) =>
  Cluster.relocatable("dispatcher", (name) =>
    Effect.gen(function*() {
      const queue = yield* DurableQueue.makeWorkSql({ queueName: name, tablePrefix })
      const producer = yield* WorkPulling.producer({ name, payload: Job, durableWorkQueue: queue })
      yield* Console.log(`dispatcher started on ${label}`)
      // The job source: everything is submitted again whenever the dispatcher is re-created; the
      // queue keeps the first write of each job id, so nothing is stored or dispatched twice.
      yield* Effect.forkScoped(Effect.forEach(
        Array.from({ length: jobs / 100 }, (_, batch) => batch),
        (batch) =>
          producer.sendAll(Array.from({ length: 100 }, (_, i) => {
            const jobId = batch * 100 + i + 1
            return { payload: { jobId, task: `resize image ${jobId}` }, messageId: `job-${jobId}` }
          })),
        { discard: true }
      ))
    }))

const node = (label: string, tablePrefix: string) =>
  Effect.gen(function*() {
    const worker = yield* WorkPulling.worker({ name: `worker-${label}`, producer: "job-dispatcher", payload: Job, window: 20, resendInterval: "300 millis" })
    if (label === "node-1") yield* Cluster.spawn("dispatcher", "job-dispatcher")
    // The "business effect" is a line the operator reads; confirmed only once it left the process.
    return yield* worker.run((delivery) =>
      Effect.zipRight(
        Effect.sleep("2 millis"),
        Effect.async<void>((resume) => {
          process.stdout.write(`processed ${delivery.payload.jobId}\n`, () => resume(Effect.void))
        })
      ))
  }).pipe(
    Effect.scoped,
    Effect.provide(ReliableSystem.layerCluster({ lease, relocatable: [dispatcher(label, tablePrefix)] }).pipe(
      Layer.provideMerge(Transport.layerSocket({ host: "127.0.0.1", port: 0 })),
      Layer.provide(Cluster.layerPg({ tablePrefix })),
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(pgUrl) }))
    ))
  )

// ---- the operator ----

const self = fileURLToPath(import.meta.url)

/** Starts this file as a node process; `onLine` sees each line it prints. */
const spawn = (args: ReadonlyArray<string>, onLine: (line: string) => void) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const child = ChildProcess.spawn(process.execPath, [...process.execArgv, self, ...args], { stdio: ["ignore", "pipe", "inherit"] })
      Readline.createInterface({ input: child.stdout! }).on("line", onLine)
      return child
    }),
    (child) => Effect.sync(() => void child.kill("SIGKILL"))
  )

const waitFor = (what: string, condition: () => boolean) =>
  Effect.promise(() => new Promise<void>((resolve) => {
    const check = setInterval(() => condition() && (clearInterval(check), resolve()), 5)
  })).pipe(Effect.timeoutFail({ duration: "60 seconds", onTimeout: () => new Error(`timed out waiting for ${what}`) }))

/** Drops every table this run created: all of them start with its prefix. */
const dropTables = (tablePrefix: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    const tables = yield* sql<{ readonly tablename: string }>`
      SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, ${tablePrefix})`
    for (const { tablename } of tables) yield* sql`DROP TABLE IF EXISTS ${sql(tablename)}`
    yield* Console.log(`dropped the tables ${tablePrefix}*`)
  }).pipe(
    Effect.provide(PgClient.layer({ url: Redacted.make(pgUrl) })),
    Effect.catchAllCause((cause) => Effect.logError(`could not drop the tables ${tablePrefix}*`, cause))
  )

const operator = Effect.gen(function*() {
  const tablePrefix = `example_${randomUUID().replaceAll("-", "").slice(0, 8)}_`
  yield* Effect.addFinalizer(() => dropTables(tablePrefix))
  const labels = ["node-1", "node-2", "node-3"]
  const processed = labels.map(() => [] as Array<number>)
  const dispatcherOn: Array<{ readonly label: string; readonly at: number }> = []
  const onLine = (index: number) => (line: string) => {
    if (line.startsWith("processed ")) processed[index].push(Number(line.slice(10)))
    else if (line.startsWith("dispatcher started on ")) dispatcherOn.push({ label: labels[index], at: Date.now() })
    else console.log(`[${labels[index]}] ${line}`)
  }
  const started = Date.now()
  const children = yield* Effect.forEach(labels, (label, index) => spawn([label, tablePrefix], onLine(index)))
  yield* Console.log(`three cluster nodes started (registry tables ${tablePrefix}*, lease ${Duration.format(lease)})`)
  yield* waitFor("the dispatcher", () => dispatcherOn.length === 1)
  yield* Console.log(`the dispatcher runs on ${dispatcherOn[0].label}`)
  yield* waitFor("a third of the jobs", () => processed.flat().length >= jobs / 3)
  children[0].kill("SIGKILL")
  const killedAt = Date.now()
  yield* Console.log(`killed node-1 (SIGKILL) after ${processed.flat().length} jobs`)
  yield* waitFor("the dispatcher to move", () => dispatcherOn.length === 2)
  yield* Console.log(`the dispatcher was re-created on ${dispatcherOn[1].label}, ${dispatcherOn[1].at - killedAt} ms after the kill`)
  yield* waitFor("every job", () => new Set(processed.flat()).size === jobs)
  const all = processed.flat()
  yield* Console.log([
    ``,
    `all ${jobs} jobs processed in ${Date.now() - started} ms`,
    ...labels.map((label, index) => `  ${label}: ${processed[index].length} jobs`),
    `  processed more than once: ${all.length - jobs} (in flight when node-1 died)`,
    `  dispatcher: ${dispatcherOn.map((d) => d.label).join(" -> ")}`
  ].join("\n"))
}).pipe(Effect.scoped)

const [label, tablePrefix] = process.argv.slice(2)
const main = label === undefined ? operator : node(label, tablePrefix)

Effect.runPromise(main).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
