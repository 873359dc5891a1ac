/**
 * The node under attack in `hostile.ts`: a reliable system on a socket transport with every
 * option at its default, on 127.0.0.1. Prints `LISTENING <port>`; answers `STATS` on stdin with
 * one `STATS <json>` line (the transport's counters and the lookups served); exits when stdin
 * closes.
 */
import { Effect, Layer } from "effect"
import * as Readline from "node:readline"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as SocketTransport from "../src/Transport/SocketTransport.js"
import { Transport } from "../src/Transport/Transport.js"

const program = Effect.gen(function*() {
  const transport = (yield* Transport) as SocketTransport.SocketTransportService
  const system = yield* ReliableSystem.ReliableSystem
  const lines = Readline.createInterface({ input: process.stdin })
  lines.on("line", (line) => {
    if (line.trim() === "STATS") {
      process.stdout.write(`STATS ${JSON.stringify({ ...transport.stats(), served: system.internal.lookupStats().served })}\n`)
    }
  })
  lines.on("close", () => process.exit(0))
  process.stdout.write(`LISTENING ${transport.port}\n`)
  return yield* Effect.never
})

Effect.runFork(program.pipe(
  Effect.scoped,
  Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(SocketTransport.layerSocket({ host: "127.0.0.1", port: 0 })))),
  Effect.tapErrorCause(Effect.logError)
))
