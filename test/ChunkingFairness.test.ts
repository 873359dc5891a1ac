/**
 * Chunking keeps small messages moving: a flow streaming 4 MiB messages (256 KiB chunks, window
 * 50: 12.5 MiB in flight) and a flow of small messages share the transport between two nodes.
 *
 * On TCP the measure is how much of the big flow overtakes each small message: the frames node B
 * received between a small message's send and its delivery, which does not depend on the
 * machine's speed. Behind the big flow's queued window on one connection a small message saw
 * about 40 chunks pass (10 MiB; p50 latency ~40 ms here); with per-sender round-robin on that
 * connection about 24 (what the kernel's socket buffers hold); with the big flow on a connection
 * of its own about 9, which is what one event-loop turn reads from the other socket (p50 latency
 * ~5 ms). Latencies are printed for the record.
 *
 * In memory each controller has its own inbox: there is no queue to share, only the thread, and
 * the Effect scheduler hands out turns per fiber, not per byte. A sender looping with
 * `Effect.forever` sends one message per turn, so the small flow gets one message for every 4 MiB
 * one (more when it sends in batches): it keeps moving, at the pace of the big flow's turns.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Layer, Schema } from "effect"
import * as Consumer from "../src/Consumer.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { host, startNode, waitUntil } from "./support/Nodes.js"

const Small = Schema.Struct({ n: Schema.Number })
const Blob = Schema.Uint8ArrayFromSelf
const MiB = 1024 * 1024
const ChunkSize = 256 * 1024

const quantile = (values: ReadonlyArray<number>, q: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]
}

describe("fairness: a stream of 4 MiB messages does not starve another flow's small messages", () => {
  it.scopedLive("two flows between the same two nodes over TCP", () =>
    Effect.gen(function*() {
      const a = yield* startNode()
      const b = yield* startNode()
      const bigOut = yield* a.run(Producer.make({ name: "big-out", consumer: "big-in", payload: Blob, chunkSize: ChunkSize, remoteConsumer: { host, port: b.port } }))
      const bigIn = yield* b.run(Consumer.make({ name: "big-in", producer: "big-out", payload: Blob, remoteProducer: { host, port: a.port } }))
      const smallOut = yield* a.run(Producer.make({ name: "small-out", consumer: "small-in", payload: Small, remoteConsumer: { host, port: b.port } }))
      const smallIn = yield* b.run(Consumer.make({ name: "small-in", producer: "small-out", payload: Small, remoteProducer: { host, port: a.port } }))

      let bigs = 0
      yield* b.run(Effect.forkScoped(bigIn.run((delivery) => Effect.sync(() => void (bigs += delivery.payload.length === 4 * MiB ? 1 : 0)))))
      const sentAt = new Map<number, { readonly time: number; readonly frames: number }>()
      const latencies: Array<number> = []
      const overtaken: Array<number> = []
      yield* b.run(Effect.forkScoped(smallIn.run((delivery) =>
        Effect.sync(() => {
          const sent = sentAt.get(delivery.payload.n)!
          latencies.push(performance.now() - sent.time)
          overtaken.push(b.transport.stats().delivered - sent.frames)
        })
      )))

      // The big flow streams for the whole test.
      const blob = new Uint8Array(4 * MiB).fill(1)
      yield* Effect.forkScoped(Effect.forever(bigOut.send(blob)))
      yield* waitUntil("the big flow to stream", () => bigs >= 3, "30 seconds")

      const count = 100
      const bigsBefore = bigs
      const started = performance.now()
      for (let n = 0; n < count; n++) {
        sentAt.set(n, { time: performance.now(), frames: b.transport.stats().delivered })
        yield* smallOut.send({ n })
        yield* Effect.sleep("5 millis")
      }
      yield* waitUntil("every small message", () => latencies.length === count, "30 seconds")
      const seconds = (performance.now() - started) / 1000
      const bigMiB = (bigs - bigsBefore) * 4
      console.log(
        `fairness over TCP: ${count} small messages in ${seconds.toFixed(1)}s beside ${bigMiB} MiB of 4 MiB messages ` +
          `(${(bigMiB / seconds).toFixed(0)} MiB/s); small latency p50 ${quantile(latencies, 0.5).toFixed(1)} ms, ` +
          `p90 ${quantile(latencies, 0.9).toFixed(1)} ms, max ${quantile(latencies, 1).toFixed(1)} ms; ` +
          `frames overtaking a small message p50 ${quantile(overtaken, 0.5)}, p90 ${quantile(overtaken, 0.9)}, max ${quantile(overtaken, 1)}`
      )
      // The big flow kept moving, and the small messages did not queue behind its window (50 chunks).
      expect(bigs - bigsBefore).toBeGreaterThanOrEqual(2)
      expect(quantile(overtaken, 0.5)).toBeLessThanOrEqual(16)
      expect(quantile(overtaken, 0.9)).toBeLessThanOrEqual(25)
      // The big flow's chunks went over a connection of their own.
      expect(a.transport.stats().connectionsOpened).toBe(2)
    }), { timeout: 90_000 })

  it.scopedLive("two flows on the memory transport: no shared queue, the small flow keeps its turns", () =>
    Effect.gen(function*() {
      const smallOut = yield* Producer.make({ name: "small-out", consumer: "small-in", payload: Small })
      const smallIn = yield* Consumer.make({ name: "small-in", producer: "small-out", payload: Small })
      const bigOut = yield* Producer.make({ name: "big-out", consumer: "big-in", payload: Blob, chunkSize: ChunkSize })
      const bigIn = yield* Consumer.make({ name: "big-in", producer: "big-out", payload: Blob })
      let smalls = 0
      let bigs = 0
      // Waiting on a timer would measure the scheduler's timer starvation under two hot loops,
      // so the handlers say when enough happened.
      let target = 3
      let reached = yield* Deferred.make<void>()
      yield* Effect.forkScoped(smallIn.run(() => Effect.sync(() => void smalls++)))
      yield* Effect.forkScoped(bigIn.run(() =>
        Effect.sync(() => {
          if (++bigs === target) Deferred.unsafeDone(reached, Effect.void)
        })
      ))
      const blob = new Uint8Array(4 * MiB)
      yield* Effect.forkScoped(Effect.forever(bigOut.send(blob)))
      yield* Deferred.await(reached)
      // Both senders loop as fast as they can (Effect.forever yields a turn per iteration).
      const smallsBefore = smalls
      const bigsBefore = bigs
      reached = yield* Deferred.make<void>()
      target = bigs + 20
      let n = 0
      yield* Effect.forkScoped(Effect.forever(Effect.suspend(() => smallOut.send({ n: n++ }))))
      yield* Deferred.await(reached)
      const perBig = (smalls - smallsBefore) / (bigs - bigsBefore)
      console.log(`fairness in memory: ${smalls - smallsBefore} small messages beside ${bigs - bigsBefore} messages of 4 MiB (${perBig.toFixed(1)} per big one)`)
      // Each sender gets its turn: a small message for every 4 MiB message, whatever the sizes.
      expect(perBig).toBeGreaterThanOrEqual(0.5)
    }).pipe(Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory)))), { timeout: 60_000 })
})
