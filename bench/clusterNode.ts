/**
 * A cluster member of the cluster benchmarks, run as its own process by `cluster.ts`: a reliable
 * system on TCP (127.0.0.1, ephemeral port) in the cluster whose PostgreSQL tables start with
 * PG_PREFIX, leases of LEASE_MS renewed every RENEW_MS. It registers the relocatable factory
 * "dispatcher" (a durable work-pulling producer on the PostgreSQL work queue named after it that
 * submits JOBS no-op jobs, all again whenever it is re-created).
 *
 * stdin: `WORKER <name> <producer>` starts a no-op worker with window WINDOW and resend interval
 * RESEND_MS (default 2000); `SPAWN <name>`
 * creates the dispatcher here; `STATS` answers `STATS <peak RSS MiB> <CPU ms>`; end of input exits.
 * stdout: `LISTENING <port>`, `STARTED <name> <epoch ms>` when a dispatcher starts here,
 * `CONFIRMED <name> <epoch ms>` at its first confirmation.
 */
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Layer, Queue, Redacted, Stream } from "effect"
import type { Scope } from "effect"
import * as Readline from "node:readline"
import * as Cluster from "../src/Cluster.js"
import * as SqlWorkQueue from "../src/DurableQueue/SqlWorkQueue.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as SocketTransport from "../src/Transport/SocketTransport.js"
import { Transport } from "../src/Transport/Transport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { BenchJob } from "./clusterJob.js"

const prefix = process.env.PG_PREFIX
if (prefix === undefined) throw new Error("clusterNode: PG_PREFIX is required (the benchmark's fresh table prefix)")
const jobs = Number(process.env.JOBS ?? 0)
const window = Number(process.env.WINDOW ?? 250)
/** The workers' tick: how soon they look for a producer that moved (default 2s). */
const resendInterval = Duration.millis(Number(process.env.RESEND_MS ?? 2000))
const say = (line: string) => process.stdout.write(`${line}\n`)

const dispatcher = Cluster.relocatable("dispatcher", (name: string) =>
  Effect.gen(function*() {
    const queue = yield* SqlWorkQueue.makeWorkSql({ queueName: name, tablePrefix: prefix })
    const producer = yield* WorkPulling.producer({ name, payload: BenchJob, durableWorkQueue: queue, deliveryConfirmation: true })
    say(`STARTED ${name} ${Date.now()}`)
    const confirmations = yield* producer.subscribeConfirmations
    yield* Effect.forkScoped(Effect.flatMap(Queue.take(confirmations), () => Effect.sync(() => say(`CONFIRMED ${name} ${Date.now()}`))))
    yield* Effect.forkScoped(Effect.gen(function*() {
      for (let from = 0; from < jobs; from += 1000) {
        const count = Math.min(1000, jobs - from)
        yield* producer.sendAll(Array.from({ length: count }, (_, i) => ({ payload: { jobId: from + i, kind: "noop" }, messageId: `job-${from + i}` })))
      }
    }))
  }))

const command = (line: string): Effect.Effect<unknown, unknown, ReliableSystem.ReliableSystem | Scope.Scope> => {
  const [verb, ...args] = line.split(" ")
  switch (verb) {
    case "WORKER":
      return Effect.gen(function*() {
        const worker = yield* WorkPulling.worker({ name: args[0], producer: args[1], payload: BenchJob, window, resendInterval })
        yield* Effect.forkScoped(worker.run(() => Effect.void))
      })
    case "SPAWN":
      return Cluster.spawn("dispatcher", args[0])
    case "STATS":
      return Effect.sync(() => {
        const cpu = process.cpuUsage()
        say(`STATS ${process.resourceUsage().maxRSS / 1024} ${(cpu.user + cpu.system) / 1000}`)
      })
    default:
      return Effect.void
  }
}

const program = Effect.gen(function*() {
  const lines = yield* Queue.unbounded<string>()
  const reader = Readline.createInterface({ input: process.stdin })
  reader.on("line", (line) => lines.unsafeOffer(line.trim()))
  reader.on("close", () => process.exit(0))
  const transport = (yield* Transport) as SocketTransport.SocketTransportService
  say(`LISTENING ${transport.port}`)
  yield* Stream.runForEach(Stream.fromQueue(lines), (line) => Effect.catchAllCause(command(line), Effect.logError))
})

const layer = ReliableSystem.layerCluster({
  lease: Duration.millis(Number(process.env.LEASE_MS ?? 500)),
  renewInterval: Duration.millis(Number(process.env.RENEW_MS ?? 100)),
  relocatable: [dispatcher]
}).pipe(
  Layer.provideMerge(SocketTransport.layerSocket({ host: "127.0.0.1", port: 0 })),
  Layer.provide(Cluster.layerPg({ tablePrefix: prefix })),
  Layer.provideMerge(PgClient.layer({ url: Redacted.make(process.env.RELIABLE_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test") }))
)

Effect.runFork(program.pipe(Effect.scoped, Effect.provide(layer), Effect.tapErrorCause(Effect.logError)))
