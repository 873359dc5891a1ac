/**
 * The consumer node of the remote benchmark, run as its own process by `remote.ts`:
 * `PEER_PORT=<producer port> MESSAGES=<n> WINDOW=<w> [TLS_CA= TLS_CERT= TLS_KEY=<PEM files>] node --import tsx bench/remoteConsumer.ts`.
 * Prints `LISTENING <port>`, then `DONE <peak RSS MiB> <CPU ms>` once it has processed
 * `MESSAGES` deliveries; exits when stdin closes.
 */
import { Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Consumer from "../src/Consumer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as SocketTransport from "../src/Transport/SocketTransport.js"
import { Transport } from "../src/Transport/Transport.js"
import { BenchOrder } from "./remoteOrder.js"

const host = "127.0.0.1"
const messages = Number(process.env.MESSAGES)
const window = Number(process.env.WINDOW ?? 50)
const tls = process.env.TLS_CA === undefined ? {} : {
  tls: {
    ca: Fs.readFileSync(process.env.TLS_CA, "utf8"),
    certificate: Fs.readFileSync(process.env.TLS_CERT ?? "", "utf8"),
    privateKey: Fs.readFileSync(process.env.TLS_KEY ?? "", "utf8")
  }
}

process.stdin.on("data", () => {})
process.stdin.on("end", () => process.exit(0))

const program = Effect.gen(function*() {
  const transport = (yield* Transport) as SocketTransport.SocketTransportService
  process.stdout.write(`LISTENING ${transport.port}\n`)
  const consumer = yield* Consumer.make({
    name: "bench-in",
    producer: "bench-out",
    payload: BenchOrder,
    window,
    remoteProducer: { host, port: Number(process.env.PEER_PORT) }
  })
  let received = 0
  return yield* consumer.run(() =>
    Effect.sync(() => {
      if (++received === messages) {
        const cpu = process.cpuUsage()
        process.stdout.write(`DONE ${process.resourceUsage().maxRSS / 1024} ${(cpu.user + cpu.system) / 1000}\n`)
      }
    })
  )
})

Effect.runFork(program.pipe(
  Effect.scoped,
  Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(SocketTransport.layerSocket({ host, port: 0, ...tls })))),
  Effect.tapErrorCause(Effect.logError)
))
