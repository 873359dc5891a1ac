/**
 * Large messages end to end on the memory transport under TestClock: sizes around the chunk
 * size, the minimum chunk size, one Stored and one DeliveryConfirmed per business message, the
 * window-too-small failure, the chunkSize bounds, binary payloads, and the producer's recycled
 * snapshot buffers.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Effect, Exit, Layer, Queue, Schema, Scope } from "effect"
import * as Consumer from "../src/Consumer.js"
import { MaxChunkSize, MinChunkSize } from "../src/index.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import type { ReliableDeliveryFailed } from "../src/Protocol/Failure.js"
import * as FaultyTransport from "../src/Transport/FaultyTransport.js"
import * as RecyclingTransports from "../src/Transport/internal/RecyclingTransports.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { Transport } from "../src/Transport/Transport.js"
import { blob, sameBytes } from "./support/Bytes.js"
import { advanceBy, advanceUntil, layerRecording, onMicrotasks, recorded } from "./support/Harness.js"

const Blob = Schema.Uint8ArrayFromSelf
const Doc = Schema.Struct({ title: Schema.String, body: Schema.String })

const same = (actual: Uint8Array, expected: Uint8Array) => expect(sameBytes(actual, expected)).toBe(true)

interface Seen {
  readonly messageId: string
  readonly seq: number
  readonly payload: Uint8Array
}

/** A blob flow: producer "p" and consumer "c" with the given chunk size and window. */
const blobFlow = (options: { readonly chunkSize: number; readonly window: number; readonly deliveryConfirmation?: boolean }) =>
  Effect.gen(function*() {
    const producer = yield* Producer.make({
      name: "p",
      consumer: "c",
      payload: Blob,
      chunkSize: options.chunkSize,
      deliveryConfirmation: options.deliveryConfirmation ?? false
    })
    const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Blob, window: options.window, resendInterval: "200 millis" })
    const seen: Array<Seen> = []
    yield* Effect.forkScoped(consumer.run((delivery) =>
      Effect.sync(() => void seen.push({ messageId: delivery.messageId, seq: delivery.seq, payload: delivery.payload }))
    ))
    return { producer, seen }
  })

describe("chunking (memory transport)", () => {
  it.scoped("sizes around the chunk size: one byte under, exact multiples, one byte over", () =>
    Effect.gen(function*() {
      const sizes = [1023, 1024, 1025, 2048, 3071, 3072, 3073, 0, 1]
      const { producer, seen } = yield* blobFlow({ chunkSize: 1024, window: 8 })
      const stored = []
      for (const [index, size] of sizes.entries()) stored.push(yield* producer.send(blob(size, index), { messageId: `m${index}` }))
      yield* advanceUntil(() => seen.length === sizes.length, 50, 10_000)
      const chunks = sizes.map((size) => Math.max(1, Math.ceil(size / 1024)))
      // Stored.seq is the last chunk's seq; the delivery carries the same seq.
      const lastSeqs = chunks.map((_, index) => chunks.slice(0, index + 1).reduce((a, b) => a + b, 0))
      expect(stored.map((entry) => entry.seq)).toEqual(lastSeqs)
      expect(seen.map((entry) => entry.seq)).toEqual(lastSeqs)
      expect(seen.map((entry) => entry.messageId)).toEqual(sizes.map((_, index) => `m${index}`))
      for (const [index, size] of sizes.entries()) same(seen[index].payload, blob(size, index))
      // On the wire: ceil(len / chunkSize) messages each, every one carrying the business id.
      const wire = (yield* recorded("SequencedMessage")).map((entry) => entry.envelope.message)
      const perId = new Map<string, Set<number>>()
      for (const message of wire) perId.set(message.messageId, (perId.get(message.messageId) ?? new Set()).add(message.seq))
      expect(sizes.map((_, index) => perId.get(`m${index}`)?.size)).toEqual(chunks)
      for (const message of wire) expect(message.payload.length).toBeLessThanOrEqual(1024)
    }).pipe(Effect.provide(layerRecording())))

  it.scoped("chunk size at the minimum: a 1 MiB payload crosses as 1024 chunks, and drains behind a small message", () =>
    onMicrotasks(Effect.gen(function*() {
      // Window 1024: the big message needs all of it, starting one seq into the window (after
      // the small one), so it drains only if the consumer tops demand up mid-message.
      const { producer, seen } = yield* blobFlow({ chunkSize: MinChunkSize, window: 1024 })
      const big = blob(1024 * 1024, 5)
      yield* producer.send(blob(10, 1), { messageId: "small-1" })
      const stored = yield* producer.send(big, { messageId: "big" })
      yield* producer.send(blob(10, 2), { messageId: "small-2" })
      yield* advanceUntil(() => seen.length === 3, 50, 20_000)
      expect(stored.seq).toBe(1025)
      expect(seen.map((entry) => [entry.messageId, entry.seq])).toEqual([["small-1", 1], ["big", 1025], ["small-2", 1026]])
      same(seen[1].payload, big)
    })).pipe(Effect.provide(layerRecording())))

  it.scoped("a stream of chunked messages: one Stored and one DeliveryConfirmed per message; nothing confirmed mid-message", () =>
    Effect.gen(function*() {
      const { producer, seen } = yield* blobFlow({ chunkSize: 1024, window: 6, deliveryConfirmation: true })
      const confirmations = yield* producer.subscribeConfirmations
      const sizes = Array.from({ length: 40 }, (_, index) => (index * 997) % 6000)
      const stored = yield* producer.sendAll(sizes.map((size, index) => ({ payload: blob(size, index), messageId: `m${index}` })))
      expect(stored.map((entry) => entry.messageId)).toEqual(sizes.map((_, index) => `m${index}`))
      yield* advanceUntil(() => seen.length === sizes.length, 50, 20_000)
      yield* advanceBy(500, 50)
      for (const [index, size] of sizes.entries()) same(seen[index].payload, blob(size, index))
      const confirmed = Chunk.toReadonlyArray(yield* Queue.takeAll(confirmations))
      expect(confirmed.map((entry) => [entry.messageId, entry.seq])).toEqual(stored.map((entry) => [entry.messageId, entry.seq]))
      // Every watermark the consumer sent is a message boundary.
      const ends = new Set([0, ...stored.map((entry) => entry.seq)])
      const marks = [...yield* recorded("Request"), ...yield* recorded("Ack")].map((entry) => entry.envelope.message.confirmedSeq)
      expect(marks.filter((mark) => !ends.has(mark))).toEqual([])
    }).pipe(Effect.provide(layerRecording())))

  it.scoped("window too small: one terminal Protocol failure of the consumer, naming both remedies", () =>
    Effect.gen(function*() {
      const failures = yield* ReliableSystem.ReliableSystem.pipe(Effect.flatMap((system) => system.subscribeFailures))
      const { producer, seen } = yield* blobFlow({ chunkSize: 1024, window: 3 })
      yield* producer.send(blob(4 * 1024 + 1, 1), { messageId: "too-big" })
      yield* advanceBy(3_000, 200)
      const events: ReadonlyArray<ReliableDeliveryFailed> = Chunk.toReadonlyArray(yield* Queue.takeAll(failures))
      expect(events).toHaveLength(1)
      const event = events[0]
      expect(event).toMatchObject({ endpointName: "c", role: "Consumer", stage: "Protocol" })
      expect((event.cause as { _tag: string })._tag).toBe("ProtocolViolation")
      expect(event.message).toContain("message too-big needs more chunks than the window of 3 can hold")
      expect(event.message).toContain("raise the consumer window or the producer's chunk size")
      expect(seen).toEqual([])
    }).pipe(Effect.provide(layerRecording())))

  it.scoped("chunkSize is bounded to [MinChunkSize, MaxChunkSize] (exported from the package root); outside is a typed error", () =>
    Effect.gen(function*() {
      expect([MinChunkSize, MaxChunkSize]).toEqual([1024, 16 * 1024 * 1024 - 64 * 1024])
      const make = (chunkSize: number, name: string) => Producer.make({ name, consumer: "c", payload: Blob, chunkSize })
      for (const [index, bad] of [MinChunkSize - 1, MaxChunkSize + 1, 1536.5, 0, -1024, Number.NaN].entries()) {
        const error = yield* Effect.flip(make(bad, `bad-${index}`))
        expect(error).toMatchObject({ _tag: "ReliableConfigError", option: "chunkSize" })
        expect(error.message).toContain(`[${MinChunkSize}, ${MaxChunkSize}]`)
      }
      yield* make(MinChunkSize, "min")
      yield* make(MaxChunkSize, "max")
    }).pipe(Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory)))))

  it.scoped("JSON payloads are chunked the same way: their encoded bytes are split", () =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Doc, chunkSize: 1024 })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Doc, window: 50 })
      const seen: Array<typeof Doc.Type> = []
      yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload))))
      const doc = { title: "report \u00e9\u4e2d", body: "\u00e9\u4e2d\u{1F600}-".repeat(4000) }
      const stored = yield* producer.send(doc)
      yield* advanceUntil(() => seen.length === 1, 50, 5_000)
      expect(seen).toEqual([doc])
      // Multi-byte characters straddle chunk boundaries; the reassembled bytes decode intact.
      expect(stored.seq).toBe(Math.ceil(Buffer.byteLength(JSON.stringify(doc)) / 1024))
    }).pipe(Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory)))))

  it.scoped("binary payloads travel as their own bytes, snapshotted at send: later changes to the array do not leak", () =>
    Effect.gen(function*() {
      const { producer, seen } = yield* blobFlow({ chunkSize: 1024, window: 8 })
      const bytes = blob(3000, 3)
      const whole = blob(500, 4)
      const stored = yield* producer.sendAll([{ payload: bytes, messageId: "chunked" }, { payload: whole, messageId: "whole" }])
      bytes.fill(0)
      whole.fill(0)
      expect(stored.map((entry) => entry.seq)).toEqual([3, 4])
      yield* advanceUntil(() => seen.length === 2, 50, 5_000)
      same(seen[0].payload, blob(3000, 3))
      same(seen[1].payload, blob(500, 4))
    }).pipe(Effect.provide(layerRecording())))

  describe("recycled snapshots (plain memory transport)", () => {
    const memory = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

    /** Sizes around multiples of 1024 in an order that lets a confirmed message's buffer take a later one. */
    const sizes = [3072, 3071, 3073, 2049, 2048, 4096, 3072, 1025, 4095, 3000, 2049, 1024, 4096, 3073, 3072, 2500]

    it.scoped("one array reused by the caller for every send: each delivery is what that send saw", () =>
      Effect.gen(function*() {
        const { producer, seen } = yield* blobFlow({ chunkSize: 1024, window: 8 })
        const reused = new Uint8Array(4096)
        for (let round = 0; round < 3; round++) {
          for (const [index, size] of sizes.entries()) {
            const salt = round * sizes.length + index
            reused.set(blob(size, salt))
            yield* producer.send(reused.subarray(0, size), { messageId: `m${salt}` })
            reused.fill(0xee)
          }
        }
        yield* advanceUntil(() => seen.length === 3 * sizes.length, 50, 20_000)
        for (const [salt, entry] of seen.entries()) {
          expect(entry.messageId).toBe(`m${salt}`)
          same(entry.payload, blob(sizes[salt % sizes.length], salt))
        }
      }).pipe(Effect.provide(memory())))

    it.scoped("a consumer restarted mid-stream: chunks sent again to the new consumer still carry their own bytes", () =>
      Effect.gen(function*() {
        const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Blob, chunkSize: 1024 })
        const seen: Array<Seen> = []
        const start = Effect.gen(function*() {
          const scope = yield* Scope.make()
          const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Blob, window: 8 }).pipe(Scope.extend(scope))
          yield* Effect.forkIn(
            consumer.run((delivery) => Effect.sync(() => void seen.push({ messageId: delivery.messageId, seq: delivery.seq, payload: delivery.payload }))),
            scope
          )
          return scope
        })
        let scope = yield* start
        const total = 3 * sizes.length
        yield* Effect.forkScoped(Effect.forEach(
          Array.from({ length: total }, (_, salt) => salt),
          (salt) => producer.send(blob(sizes[salt % sizes.length], salt), { messageId: `m${salt}` }),
          { discard: true }
        ))
        yield* advanceUntil(() => seen.length >= 10, 50, 20_000)
        yield* Scope.close(scope, Exit.void)
        scope = yield* start
        yield* advanceUntil(() => new Set(seen.map((entry) => entry.messageId)).size === total, 50, 60_000)
        for (const entry of seen) {
          const salt = Number(entry.messageId.slice(1))
          same(entry.payload, blob(sizes[salt % sizes.length], salt))
        }
        yield* Scope.close(scope, Exit.void)
      }).pipe(Effect.provide(memory())))

    it.scoped("only a memory hub whose inboxes are all controllers' lets a producer recycle", () =>
      Effect.gen(function*() {
        const hub = MemoryTransport.makeHub()
        const node = MemoryTransport.makeNode(hub, "a")
        expect(RecyclingTransports.recyclable(node)).toBe(true)
        // A wrapper (here a recording one) is a transport of its own, and the fault injector holds envelopes.
        expect(RecyclingTransports.recyclable({ ...node })).toBe(false)
        const faulty = yield* FaultyTransport.layerWithFaults({ seed: 1 }).pipe(
          Layer.provide(Layer.succeed(Transport, node)),
          Layer.build,
          Effect.map((context) => Context.get(context, Transport))
        )
        expect(RecyclingTransports.recyclable(faulty)).toBe(false)
        // Code reading an inbox itself may keep payloads: from then on, nothing on the hub recycles.
        yield* MemoryTransport.makeNode(hub, "b").open({ node: "b", endpoint: "x", incarnation: "1" })
        expect(RecyclingTransports.recyclable(node)).toBe(false)
      }))
  })
})
