/**
 * Remoting-only flows between real processes: each node is a child process (tsx) on 127.0.0.1
 * with an ephemeral port. The consumer logs each delivery synchronously before confirming it, so
 * its log after a SIGKILL holds everything it confirmed.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Schedule } from "effect"
import * as Path from "node:path"
import { encodeMessage } from "../src/Transport/internal/HandshakeProtocol.js"
import { makeCa } from "./support/Certificates.js"
import { deliveryViolation } from "./support/Delivery.js"
import { countLines, readLog, spawnNode, tempDir } from "./support/Processes.js"
import { rawClient } from "./support/RawPeer.js"

/** Polls `condition` every 25ms until it holds; fails after `timeout`. */
const waitFor = (what: string, condition: () => boolean, timeout: Duration.DurationInput = Duration.seconds(40)) =>
  Effect.suspend(() => condition() ? Effect.void : Effect.fail("pending" as const)).pipe(
    Effect.retry(Schedule.spaced(Duration.millis(25))),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`timed out waiting for ${what}`) })
  )

const distinct = (logs: ReadonlyArray<{ readonly index: number }>) => new Set(logs.map((entry) => entry.index)).size

describe("remoting-only flows between processes", () => {
  /** Environment variables that put a node on mutual TLS, with certificates made in `dir`. */
  const tlsEnv = (dir: string): Record<string, string> => {
    const ca = makeCa(dir, "test-ca")
    const node = ca.issue("node", ["IP:127.0.0.1"])
    return { TLS_CA: ca.caFile, TLS_CERT: node.certificateFile, TLS_KEY: node.privateKeyFile }
  }

  for (const tls of [false, true]) {
    it.scopedLive(`100,000 messages${tls ? " over mutual TLS" : ""}; the consumer process is SIGKILLed and restarted mid-flow; none lost, in order per session`, () =>
      Effect.gen(function*() {
        const total = 100_000
        const dir = yield* tempDir
        const security = tls ? tlsEnv(dir) : {}
        const logs = [Path.join(dir, "consumer-1.log"), Path.join(dir, "consumer-2.log")]
        const started = Date.now()
        const producer = yield* spawnNode({ ROLE: "producer", PORT: "0", MESSAGES: String(total), ...security })
        const first = yield* spawnNode({ ROLE: "consumer", PORT: "0", PEER_PORT: String(producer.port), LOG: logs[0], ...security })
        producer.send(`PEER ${first.port}`)
        yield* waitFor("30,000 deliveries before the kill", () => countLines(logs[0]) >= 30_000)
        yield* first.kill("SIGKILL")
        const killedAt = countLines(logs[0])
        // The restarted process binds the same address, with a new incarnation of its endpoint.
        const second = yield* spawnNode({ ROLE: "consumer", PORT: String(first.port), PEER_PORT: String(producer.port), LOG: logs[1], ...security })
        expect(second.port).toBe(first.port)
        yield* waitFor("every message", () => distinct([...readLog(logs[0], 1), ...readLog(logs[1], 2)]) === total)
        const received = [...readLog(logs[0], 1), ...readLog(logs[1], 2)]
        expect(deliveryViolation(received, total)).toBeUndefined()
        const redelivered = received.length - total
        console.log(
          `cross-process${tls ? " (TLS)" : ""}: ${total} messages in ${((Date.now() - started) / 1000).toFixed(1)}s, consumer killed after ${killedAt}, ` +
            `${redelivered} redelivered after the restart`
        )
        // The window bounds what can be redelivered: only what was unconfirmed at the kill.
        expect(redelivered).toBeLessThanOrEqual(50)
        if (tls) {
          // The nodes did run TLS: a plain Hello gets no answer, only a hang-up.
          const plain = yield* rawClient(producer.port)
          plain.socket.write(encodeMessage({ _tag: "Hello", node: "127.0.0.1:9", auth: "none" }, true))
          yield* waitFor("the plain connection to be refused", plain.closed)
          expect(plain.received().length).toBe(0)
        }
      }), 90_000)
  }

  it.scopedLive("a consumer process that stops reading (SIGSTOP): the producer stops at the window, its memory stays bounded, the flow resumes", () =>
    Effect.gen(function*() {
      const total = 20_000
      const dir = yield* tempDir
      const log = Path.join(dir, "consumer.log")
      const producer = yield* spawnNode({ ROLE: "producer", PORT: "0", MESSAGES: String(total), PAD: "200" })
      const consumer = yield* spawnNode({ ROLE: "consumer", PORT: "0", PEER_PORT: String(producer.port), LOG: log })
      producer.send(`PEER ${consumer.port}`)
      yield* waitFor("2,000 deliveries", () => countLines(log) >= 2_000)
      yield* consumer.kill("SIGSTOP")
      // Wait until the producer has stalled: three answers in a row with the same stored count.
      let previous = -1
      let same = 0
      let stats: Record<string, number> = {}
      yield* Effect.gen(function*() {
        stats = yield* producer.stats
        same = stats.stored === previous ? same + 1 : 0
        previous = stats.stored
      }).pipe(Effect.repeat({ until: () => same >= 3, schedule: Schedule.spaced(Duration.millis(100)) }), Effect.timeout("20 seconds"))
      const logged = countLines(log)
      expect(stats.stored).toBeLessThan(total)
      // Stored beyond what the consumer logged: at most the window, and the batch stored in one step.
      expect(stats.stored - logged).toBeLessThanOrEqual(50 + 500)
      expect(stats.bufferedBytes).toBeLessThan(1024 * 1024)
      expect(stats.peakPeerBufferedBytes).toBeLessThan(1024 * 1024)
      yield* consumer.kill("SIGCONT")
      yield* producer.next("SENT")
      yield* waitFor("every message", () => countLines(log) >= total)
      const received = readLog(log, 1)
      expect(deliveryViolation(received, total, true)).toBeUndefined()
    }), 90_000)
})
