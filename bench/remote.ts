/**
 * Point-to-point between two processes over TCP on 127.0.0.1: this process hosts the producer
 * (`sendAll` in batches of 1,000), a child process (`remoteConsumer.ts`) the consumer with a no-op
 * handler. Timed from the first send until the consumer reports the last delivery. With `tls`,
 * both run mutual TLS 1.3 with certificates made for the run (`openssl`, in a temp dir).
 */
import { Deferred, Effect, Layer } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Readline from "node:readline"
import { fileURLToPath } from "node:url"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as SocketTransport from "../src/Transport/SocketTransport.js"
import { Transport } from "../src/Transport/Transport.js"
import { makeCa } from "../test/support/Certificates.js"
import { benchOrder, BenchOrder } from "./remoteOrder.js"
import { peakRssMiB } from "./Row.js"
import type { Row } from "./Row.js"

const host = "127.0.0.1"
// Run from sources (tsx) or from compiled JavaScript alike.
const fromSources = import.meta.url.endsWith(".ts")
/** Node's arguments to run the bench script `name` (without extension) as a consumer process. */
const consumerArgs = (name: string) => [
  ...(process.env.BENCH_CONSUMER_ARGS ?? "").split(" ").filter((arg) => arg.length > 0),
  ...(fromSources ? ["--import", "tsx"] : []),
  fileURLToPath(new URL(`./${name}.${fromSources ? "ts" : "js"}`, import.meta.url))
]
const Batch = 1000

/** Certificates for both processes (one node certificate for 127.0.0.1), removed with the scope. */
const testCertificates = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-reliable-bench-tls-"))
    const ca = makeCa(dir, "bench-ca")
    const node = ca.issue("bench-node", ["IP:127.0.0.1"])
    return {
      dir,
      env: { TLS_CA: ca.caFile, TLS_CERT: node.certificateFile, TLS_KEY: node.privateKeyFile },
      options: { ca: ca.ca, certificate: node.certificate, privateKey: node.privateKey }
    }
  }),
  ({ dir }) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
)

/**
 * The consumer process (the bench script `script`, default `remoteConsumer`): its port, and a
 * Deferred completed with its peak RSS and CPU time when it is done.
 */
export const spawnConsumer = (producerPort: number, messages: number, window: number, tlsEnv: Record<string, string>, script = "remoteConsumer") =>
  Effect.gen(function*() {
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        ChildProcess.spawn(process.execPath, consumerArgs(script), {
          env: { ...process.env, PEER_PORT: String(producerPort), MESSAGES: String(messages), WINDOW: String(window), ...tlsEnv },
          stdio: ["pipe", "pipe", "inherit"]
        })
      ),
      // Closing stdin lets the consumer exit on its own (and write profiles when asked to).
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
    const listening = yield* Deferred.make<number, Error>()
    const done = yield* Deferred.make<{ readonly rssMiB: number; readonly cpuMs: number }, Error>()
    child.on("exit", (code) => {
      const error = new Error(`bench consumer exited (${code})`)
      Deferred.unsafeDone(listening, Effect.fail(error))
      Deferred.unsafeDone(done, Effect.fail(error))
    })
    Readline.createInterface({ input: child.stdout! }).on("line", (line) => {
      if (line.startsWith("LISTENING ")) Deferred.unsafeDone(listening, Effect.succeed(Number(line.slice(10))))
      if (line.startsWith("DONE ")) {
        const [rssMiB, cpuMs] = line.slice(5).split(" ").map(Number)
        Deferred.unsafeDone(done, Effect.succeed({ rssMiB, cpuMs }))
      }
    })
    return { port: yield* Deferred.await(listening), done }
  })

/**
 * Sends `messages` orders of about 100 bytes to a consumer process with the given window and
 * returns the row: rate over the whole run, peak RSS of the larger of the two processes.
 */
export const remote = (messages: number, window: number, tls = false): Effect.Effect<Row, Error> =>
  Effect.gen(function*() {
    const certificates = tls ? yield* testCertificates : undefined
    return yield* timeFlow(messages, window, certificates).pipe(
      Effect.provide(ReliableSystem.layer().pipe(
        Layer.provideMerge(SocketTransport.layerSocket({ host, port: 0, ...(certificates === undefined ? {} : { tls: certificates.options }) }))
      ))
    )
  }).pipe(
    Effect.scoped,
    Effect.mapError((error) => error instanceof Error ? error : new Error(String(error)))
  )

const timeFlow = (messages: number, window: number, certificates: { readonly env: Record<string, string> } | undefined) =>
  Effect.gen(function*() {
    const transport = (yield* Transport) as SocketTransport.SocketTransportService
    const consumer = yield* spawnConsumer(transport.port, messages, window, certificates?.env ?? {})
    const producer = yield* Producer.make({ name: "bench-out", consumer: "bench-in", payload: BenchOrder, remoteConsumer: { host, port: consumer.port } })
    const started = performance.now()
    const cpuBefore = process.cpuUsage()
    for (let first = 0; first < messages; first += Batch) {
      const count = Math.min(Batch, messages - first)
      yield* producer.sendAll(Array.from({ length: count }, (_, index) => ({ payload: benchOrder(first + index) })))
    }
    const consumerDone = yield* Deferred.await(consumer.done)
    const seconds = (performance.now() - started) / 1000
    const cpu = process.cpuUsage(cpuBefore)
    // CPU per message on each side: the figure that does not depend on what else the machine runs.
    const producerUs = (cpu.user + cpu.system) / messages
    const consumerUs = (consumerDone.cpuMs * 1000) / messages
    const row: Row = {
      name: `remote TCP 127.0.0.1${certificates === undefined ? "" : " over mutual TLS 1.3"}, two processes, sendAll, window ${window}, ` +
        `${messages.toLocaleString("en")} msgs of ~100 B`,
      messages,
      seconds,
      rate: messages / seconds,
      unit: "msgs/s",
      peakRssMiB: Math.max(peakRssMiB(), consumerDone.rssMiB),
      note: `CPU/msg: producer ${producerUs.toFixed(1)} µs, consumer ${consumerUs.toFixed(1)} µs (incl. startup); ` +
        `peak RSS: producer ${peakRssMiB().toFixed(0)} MiB, consumer ${consumerDone.rssMiB.toFixed(0)} MiB`
    }
    return row
  })
