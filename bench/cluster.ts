/**
 * Cluster benchmarks on the PostgreSQL registry and work queue, with nodes as processes on
 * 127.0.0.1 (`clusterNode.ts`):
 *
 * - `crossNode`: jobs per second from a durable work-pulling producer in this process (one
 *   cluster member) to no-op workers on two other member processes, every job stored, accepted
 *   and confirmed in PostgreSQL; timed from the first send until the producer has every
 *   confirmation. Compare with `WorkPulling.durablePg(jobs, 2, window)`, the same flow in one
 *   process.
 * - `resume`: a relocatable durable dispatcher runs on one member; the member is SIGKILLed; the
 *   row is the time from the kill until the dispatcher, re-created on a surviving member, has its
 *   first confirmation (unit "ms"), with the relocation time and the lease in the note.
 */
import { PgClient } from "@effect/sql-pg"
import { Deferred, Duration, Effect, Layer, Redacted, Schedule } from "effect"
import type { Scope } from "effect"
import * as ChildProcess from "node:child_process"
import * as Readline from "node:readline"
import { fileURLToPath } from "node:url"
import * as Cluster from "../src/Cluster.js"
import * as SqlWorkQueue from "../src/DurableQueue/SqlWorkQueue.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as SocketTransport from "../src/Transport/SocketTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { BenchJob } from "./clusterJob.js"
import { dropTables, freshPrefix } from "./pgTables.js"
import { heapAfterGcMiB, peakRssMiB } from "./Row.js"
import type { Row } from "./Row.js"

const pgUrl = process.env.RELIABLE_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"
const fromSources = import.meta.url.endsWith(".ts")
const nodeScript = fileURLToPath(new URL(fromSources ? "./clusterNode.ts" : "./clusterNode.js", import.meta.url))

interface BenchNode {
  readonly port: number
  readonly send: (line: string) => void
  /** The next line starting with `prefix`, its remaining words. */
  readonly next: (prefix: string) => Effect.Effect<ReadonlyArray<string>, Error>
  readonly kill: () => void
}

/** A member process; ended (stdin closed, SIGKILL after 5s) with the scope. */
const spawnNode = (env: Record<string, string>): Effect.Effect<BenchNode, Error, Scope.Scope> =>
  Effect.gen(function*() {
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        ChildProcess.spawn(process.execPath, [...(fromSources ? ["--import", "tsx"] : []), nodeScript], {
          env: { ...process.env, ...env },
          stdio: ["pipe", "pipe", "inherit"]
        })
      ),
      (child) =>
        Effect.async<void>((resume) => {
          if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
          const timer = setTimeout(() => child.kill("SIGKILL"), 5_000)
          child.once("exit", () => {
            clearTimeout(timer)
            resume(Effect.void)
          })
          child.stdin!.end()
        })
    )
    const waiting: Array<{ readonly prefix: string; readonly deferred: Deferred.Deferred<ReadonlyArray<string>, Error> }> = []
    const seen: Array<string> = []
    Readline.createInterface({ input: child.stdout! }).on("line", (line) => {
      const index = waiting.findIndex((w) => line.startsWith(w.prefix))
      if (index < 0) return void seen.push(line)
      const [found] = waiting.splice(index, 1)
      Deferred.unsafeDone(found.deferred, Effect.succeed(line.slice(found.prefix.length).trim().split(" ")))
    })
    child.stdin!.on("error", () => {})
    const next = (prefix: string) =>
      Effect.suspend(() => {
        const index = seen.findIndex((line) => line.startsWith(prefix))
        if (index >= 0) return Effect.succeed(seen.splice(index, 1)[0].slice(prefix.length).trim().split(" "))
        const deferred = Deferred.unsafeMake<ReadonlyArray<string>, Error>(undefined as never)
        waiting.push({ prefix, deferred })
        return Deferred.await(deferred)
      }).pipe(Effect.timeoutFail({ duration: Duration.minutes(5), onTimeout: () => new Error(`no ${prefix} line`) }))
    const port = Number((yield* next("LISTENING"))[0])
    return { port, send: (line) => void child.stdin!.write(`${line}\n`), next, kill: () => void child.kill("SIGKILL") }
  })

/** Fresh table names, dropped afterwards; the client for this process. */
const freshTables = Effect.gen(function*() {
  const prefix = freshPrefix()
  const client = yield* Layer.build(PgClient.layer({ url: Redacted.make(pgUrl), connectTimeout: Duration.seconds(5) }))
  yield* Effect.addFinalizer(() => Effect.provide(dropTables(prefix), client))
  return { prefix, client }
})

const nodeEnv = (prefix: string, leaseMs: number, extra: Record<string, string> = {}) => ({
  PG_PREFIX: prefix,
  LEASE_MS: String(leaseMs),
  RENEW_MS: String(Math.max(10, Math.floor(leaseMs / 5))),
  ...extra
})

/** `jobs` no-op jobs from a durable producer here to workers on two member processes. */
export const crossNode = (jobs: number, window = 250): Effect.Effect<Row, unknown> =>
  Effect.gen(function*() {
    const { client, prefix } = yield* freshTables
    const leaseMs = 3000
    const workers = yield* Effect.all([0, 1].map(() => spawnNode(nodeEnv(prefix, leaseMs, { WINDOW: String(window) }))), { concurrency: "unbounded" })
    const member = yield* Layer.build(
      ReliableSystem.layerCluster({ lease: Duration.millis(leaseMs) }).pipe(
        Layer.provideMerge(SocketTransport.layerSocket({ host: "127.0.0.1", port: 0 })),
        Layer.provide(Cluster.layerPg({ tablePrefix: prefix })),
        Layer.provide(Layer.succeedContext(client))
      )
    )
    const queue = yield* Effect.provide(SqlWorkQueue.makeWorkSql({ queueName: "bench-cluster", tablePrefix: prefix }), client)
    const producer = yield* Effect.provide(WorkPulling.producer({ name: "bench-dispatcher", payload: BenchJob, durableWorkQueue: queue }), member)
    workers.forEach((worker, index) => worker.send(`WORKER bench-worker-${index} bench-dispatcher`))
    const stats = Effect.provide(WorkPulling.stats("bench-dispatcher"), member)
    yield* stats.pipe(Effect.repeat({ until: (s) => s.workers === 2, schedule: Schedule.spaced(Duration.millis(10)) }))
    const started = performance.now()
    const cpuBefore = process.cpuUsage()
    yield* Effect.forkScoped(Effect.gen(function*() {
      for (let first = 0; first < jobs; first += 1000) {
        const count = Math.min(1000, jobs - first)
        yield* producer.sendAll(Array.from({ length: count }, (_, i) => ({ payload: { jobId: first + i, kind: "noop" } })))
      }
    }))
    yield* stats.pipe(Effect.repeat({ until: (s) => s.confirmed >= jobs, schedule: Schedule.spaced(Duration.millis(10)) }))
    const seconds = (performance.now() - started) / 1000
    const cpu = process.cpuUsage(cpuBefore)
    workers.forEach((worker) => worker.send("STATS"))
    const workerStats = yield* Effect.all(workers.map((worker) => worker.next("STATS")))
    const workerRss = Math.max(...workerStats.map((s) => Number(s[0])))
    const heap = heapAfterGcMiB()
    return {
      ...(heap === undefined ? {} : { heapAfterGcMiB: heap }),
      name: `cluster work-pulling + PostgreSQL work queue: producer node, 2 worker nodes (window ${window}), ${jobs.toLocaleString("en")} no-op jobs`,
      messages: jobs,
      seconds,
      rate: jobs / seconds,
      unit: "jobs/s",
      peakRssMiB: Math.max(peakRssMiB(), workerRss),
      note: `producer CPU/job ${((cpu.user + cpu.system) / jobs).toFixed(1)} µs; peak RSS producer ${peakRssMiB().toFixed(0)} MiB, workers ${workerRss.toFixed(0)} MiB`
    }
  }).pipe(Effect.scoped)

/** A dispatcher's node SIGKILLed mid-flow: milliseconds until it confirms again on a survivor. */
export const resume = (leaseMs = 500): Effect.Effect<Row, unknown> =>
  Effect.gen(function*() {
    const { prefix } = yield* freshTables
    // workers look for the moved producer on their resend tick: a fraction of the lease
    const resendMs = Math.floor(leaseMs / 2.5)
    const env = nodeEnv(prefix, leaseMs, { JOBS: "1000000", WINDOW: "50", RESEND_MS: String(resendMs) })
    const [a, b, c] = yield* Effect.all([spawnNode(env), spawnNode(env), spawnNode(env)], { concurrency: "unbounded" })
    b.send("WORKER bench-worker-b dispatcher")
    c.send("WORKER bench-worker-c dispatcher")
    a.send("SPAWN dispatcher")
    yield* a.next("CONFIRMED")
    // let the flow run at full speed for a moment before the node dies
    yield* Effect.sleep(Duration.seconds(1))
    const killedAt = Date.now()
    a.kill()
    const [startedLine, confirmedLine] = yield* Effect.raceFirst(
      Effect.all([b.next("STARTED"), b.next("CONFIRMED")]),
      Effect.all([c.next("STARTED"), c.next("CONFIRMED")])
    )
    const relocatedMs = Number(startedLine[1]) - killedAt
    const resumedMs = Number(confirmedLine[1]) - killedAt
    return {
      name: `cluster: a durable dispatcher's node SIGKILLed, time until it confirms again on a survivor (lease ${leaseMs} ms)`,
      messages: 1,
      seconds: resumedMs / 1000,
      rate: resumedMs,
      unit: "ms",
      peakRssMiB: peakRssMiB(),
      note: `re-created after ${relocatedMs} ms; resumed after ${(resumedMs / leaseMs).toFixed(2)} lease periods (goal: within 3); ` +
        `renew every ${nodeEnv(prefix, leaseMs).RENEW_MS} ms, workers' resendInterval ${resendMs} ms`
    }
  }).pipe(Effect.scoped)
