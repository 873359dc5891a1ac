/**
 * Hostile but fair peers against a socket transport on 127.0.0.1, with small limits so each
 * attack runs in a few seconds: partial large frames on many connections, idle and slow-drip
 * connections, a connection flood. Attackers connect from other loopback addresses
 * (127.0.0.2...), as strangers on a shared network would. In every case a flow between two honest
 * nodes keeps moving meanwhile and loses nothing.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Schedule } from "effect"
import * as SocketTransport from "../../src/Transport/SocketTransport.js"
import { SmallFrameAllowance } from "../../src/Transport/internal/Inbound.js"
import { encodeMessage } from "../../src/Transport/internal/HandshakeProtocol.js"
import { honestFlow } from "../support/HonestFlow.js"
import { waitUntil } from "../support/Nodes.js"
import { host, lengthPrefix, rawClient, rawPeer } from "../support/RawPeer.js"

const make = (options: Partial<SocketTransport.SocketTransportOptions>) =>
  SocketTransport.makeSocket({ host, port: 0, reconnect: Schedule.spaced(Duration.millis(20)), ...options })

const MiB = 1024 * 1024
const range = (count: number) => Array.from({ length: count }, (_, index) => index)

describe("SocketTransport against hostile peers", () => {
  it.scopedLive("partial maximum-size frames on 32 connections: held bytes stay within inboundBufferBytes; partial frames within it are closed by readTimeout", () =>
    Effect.gen(function*() {
      const limits = { maxFrameSize: 4 * MiB, inboundBufferBytes: 8 * MiB, readTimeout: Duration.seconds(1) }
      const b = yield* make(limits)
      const a = yield* make(limits)
      const flow = yield* honestFlow(a, b)
      const rssBefore = process.memoryUsage().rss
      // Each announces a frame and sends all of it but the last byte (one buffer for all of them).
      const partialFrames = (count: number, size: number, firstPort: number) =>
        Effect.gen(function*() {
          const attackers = yield* Effect.forEach(range(count), (index) => rawPeer(b.port, `127.0.0.2:${firstPort + index}`, "127.0.0.2"))
          const allButLast = Buffer.alloc(size - 1, 7)
          for (const attacker of attackers) {
            attacker.socket.write(lengthPrefix(size))
            attacker.socket.write(allButLast)
          }
          return attackers
        })

      // 128 MiB announced: past the budget, every connection that holds more than a small frame is closed.
      const flood = yield* partialFrames(32, 4 * MiB, 1000)
      yield* flow.progresses()
      yield* waitUntil("every flooding connection to be closed", () => flood.every((attacker) => attacker.closed()))
      const afterFlood = b.stats()
      // Past the budget (a slow machine may let a few reach the read timeout first).
      expect(afterFlood.droppedInboundOverflow).toBeGreaterThan(16)
      expect(afterFlood.droppedInboundOverflow + afterFlood.timedOut).toBe(32)
      // The budget, plus what connections may hold below the allowance, plus the read that tipped it over.
      expect(afterFlood.peakInboundBufferedBytes).toBeLessThanOrEqual(8 * MiB + 34 * SmallFrameAllowance)

      // 6 MiB in partial frames fits the budget: held until the read timeout, then closed.
      const started = Date.now()
      const slow = yield* partialFrames(6, MiB, 2000)
      yield* waitUntil("the partial frames to be held", () => b.stats().inboundBufferedBytes >= 6 * (MiB - 1))
      yield* flow.progresses()
      yield* waitUntil("every slow connection to be closed", () => slow.every((attacker) => attacker.closed()))
      const closedAfter = Date.now() - started
      const stats = b.stats()
      console.log(
        `partial frames: 32 x 4 MiB announced, peak held ${(stats.peakInboundBufferedBytes / MiB).toFixed(1)} MiB ` +
          `(inboundBufferBytes 8 MiB), ${stats.droppedInboundOverflow} closed over it; 6 x 1 MiB closed by the 1 s read timeout ` +
          `after ${closedAfter} ms; RSS ${((process.memoryUsage().rss - rssBefore) / MiB).toFixed(0)} MiB above its start`
      )
      expect(stats.timedOut - afterFlood.timedOut).toBe(6)
      expect(closedAfter).toBeGreaterThanOrEqual(1000)
      expect(closedAfter).toBeLessThan(1000 + 2500)
      yield* waitUntil("nothing to be held any more", () => b.stats().inboundBufferedBytes < SmallFrameAllowance)
      yield* flow.check
    }))

  it.scopedLive("idle connections, connections that never finish their handshake and slow drips are closed after their timeouts", () =>
    Effect.gen(function*() {
      const limits = { connectTimeout: Duration.millis(600), readTimeout: Duration.millis(800), idleTimeout: Duration.millis(1500) }
      const b = yield* make(limits)
      const a = yield* make(limits)
      const flow = yield* honestFlow(a, b)
      const started = Date.now()
      const idle = yield* Effect.forEach(range(30), (index) => rawPeer(b.port, `127.0.0.2:${2000 + index}`, "127.0.0.2"))
      const silent = yield* Effect.forEach(range(10), () => rawClient(b.port, "127.0.0.3"))
      const handshakeDrips = yield* Effect.forEach(range(10), () => rawClient(b.port, "127.0.0.3"))
      const frameDrips = yield* Effect.forEach(range(10), (index) => rawPeer(b.port, `127.0.0.4:${3000 + index}`, "127.0.0.4"))
      // One byte every 50 ms: of a Hello, and of a 1,000-byte frame.
      const hello = encodeMessage({ _tag: "Hello", node: "127.0.0.3:9", auth: "none" }, true)
      const frame = Buffer.concat([lengthPrefix(1000), Buffer.alloc(1000)])
      let dripped = 0
      yield* Effect.forkScoped(Effect.repeat(
        Effect.sync(() => {
          for (const client of handshakeDrips) if (!client.closed()) client.socket.write(hello.subarray(dripped, dripped + 1))
          for (const client of frameDrips) if (!client.closed()) client.socket.write(frame.subarray(dripped, dripped + 1))
          dripped++
        }),
        Schedule.spaced(Duration.millis(50))
      ))
      yield* flow.progresses()
      const closedBy = (what: string, clients: ReadonlyArray<{ readonly closed: () => boolean }>, bound: number) =>
        Effect.gen(function*() {
          yield* waitUntil(what, () => clients.every((client) => client.closed()), Duration.seconds(10))
          const after = Date.now() - started
          console.log(`${what}: all closed ${after} ms after the attack started`)
          expect(after).toBeLessThan(bound)
        })
      yield* closedBy("connections that never finish the handshake", [...silent, ...handshakeDrips], 600 + 2000)
      yield* closedBy("slow drips of a frame", frameDrips, 800 + 2000)
      yield* closedBy("idle connections", idle, 1500 + 2500)
      expect(b.stats()).toMatchObject({ handshakesRefused: 20, timedOut: 10, idleClosed: 30 })
      yield* flow.progresses()
      yield* flow.check
    }))

  it.scopedLive("a connection flood over the caps is refused at accept and counted; the caps free up as attackers leave", () =>
    Effect.gen(function*() {
      const limits = { maxConnections: 60, maxConnectionsPerAddress: 20, connectTimeout: Duration.seconds(20) }
      const b = yield* make(limits)
      const a = yield* make(limits)
      const flow = yield* honestFlow(a, b)
      const flood = (count: number, from: string) => Effect.forEach(range(count), () => rawClient(b.port, from))
      const first = yield* flood(100, "127.0.0.2")
      const second = yield* flood(30, "127.0.0.3")
      const third = yield* flood(30, "127.0.0.4")
      const all = [...first, ...second, ...third]
      // Kept: 20 per address, until the honest connection and 59 others make 60.
      yield* waitUntil("the refusals", () => b.stats().connectionsRefused === 80 + 10 + 11)
      yield* waitUntil("the refused to see their close", () => all.filter((client) => client.closed()).length === 101)
      expect(b.stats().incomingConnections).toBe(60)
      yield* flow.progresses()
      yield* Effect.sync(() => all.forEach((client) => client.socket.destroy()))
      yield* waitUntil("the attackers' slots to free up", () => b.stats().incomingConnections === 1)
      // A newcomer gets in again.
      const late = yield* rawPeer(b.port, "127.0.0.2:9", "127.0.0.2")
      expect(late.closed()).toBe(false)
      yield* flow.check
    }))
})
