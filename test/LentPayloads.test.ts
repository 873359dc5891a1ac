/**
 * `lendPayloads`: a consumer of binary payloads hands out bytes that stay as they are until the
 * delivery is confirmed and allocates nothing per chunked message. The joining rules on their
 * own, then end to end: in one process (views of the producer's recycled snapshots), over TCP
 * (one reused buffer of the consumer's), bytes intact until confirmed, and the option's check.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Queue, Schema, Stream } from "effect"
import * as Consumer from "../src/Consumer.js"
import * as Reassembly from "../src/Controller/internal/Reassembly.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { blob, sameBytes } from "./support/Bytes.js"
import { advanceBy, advanceUntil } from "./support/Harness.js"
import { host, startNode, waitUntil } from "./support/Nodes.js"

const Blob = Schema.Uint8ArrayFromSelf

/** What a handler saw: a copy of the bytes (a lent payload is only valid until confirmed) and whose buffer they were in. */
interface Seen {
  readonly messageId: string
  readonly copy: Uint8Array
  readonly buffer: ArrayBufferLike
}

const record = (seen: Array<Seen>) => (delivery: { readonly messageId: string; readonly payload: Uint8Array }) =>
  Effect.sync(() => void seen.push({ messageId: delivery.messageId, copy: delivery.payload.slice(), buffer: delivery.payload.buffer }))

const memory = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

describe("Reassembly", () => {
  const parts = (buffer: Uint8Array, ...cuts: ReadonlyArray<number>) =>
    cuts.slice(1).map((end, index) => buffer.subarray(cuts[index], end))

  it("join: a new array holding the chunks in order", () => {
    const source = blob(100, 1)
    const joined = Reassembly.join(parts(source, 0, 30, 60, 100))
    expect(sameBytes(joined, source)).toBe(true)
    expect(joined.buffer).not.toBe(source.buffer)
  })

  it("lent join: chunks end to end in one buffer become one view of them, nothing copied", () => {
    const source = blob(100, 2)
    const joined = Reassembly.makeLent().join(parts(source, 10, 40, 90))
    expect([joined.buffer === source.buffer, joined.byteOffset, joined.length]).toEqual([true, 10, 80])
  })

  it("lent join: chunks apart (a gap, another buffer, out of order) are copied into one buffer reused for every message", () => {
    const lent = Reassembly.makeLent()
    const a = blob(64, 3)
    const b = blob(64, 4)
    const apart = lent.join([a.subarray(0, 16), b.subarray(16, 32)])
    expect(sameBytes(apart, Buffer.concat([a.subarray(0, 16), b.subarray(16, 32)]))).toBe(true)
    const buffers = new Set([apart.buffer])
    const gap = lent.join([a.subarray(0, 10), a.subarray(11, 20)])
    expect(sameBytes(gap, Buffer.concat([a.subarray(0, 10), a.subarray(11, 20)]))).toBe(true)
    buffers.add(gap.buffer)
    const swapped = lent.join([a.subarray(8, 16), a.subarray(0, 8)])
    expect(sameBytes(swapped, Buffer.concat([a.subarray(8, 16), a.subarray(0, 8)]))).toBe(true)
    buffers.add(swapped.buffer)
    expect(buffers.size).toBe(1)
    // A larger message grows the buffer once; smaller ones fit in it again.
    const large = lent.join([a, b])
    expect(large.length).toBe(128)
    expect(lent.join([b, a.subarray(0, 5)]).buffer).toBe(large.buffer)
  })
})

describe("lendPayloads", () => {
  /** A chunked blob flow on the plain memory transport (the producer recycles snapshots). */
  const flow = (lendPayloads: boolean, seen: Array<Seen>) =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Blob, chunkSize: 1024 })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Blob, window: 8, resendInterval: "200 millis", lendPayloads })
      yield* Effect.forkScoped(consumer.run(record(seen)))
      return producer
    })

  const messages = 24

  for (const lend of [false, true]) {
    it.scoped(
      lend
        ? "lent, in one process: every message intact, handed out in a few buffers used over and over (views of the producer's recycled snapshots)"
        : "owned (the default): every message intact, each in an array of its own",
      () =>
        Effect.gen(function*() {
          const seen: Array<Seen> = []
          const producer = yield* flow(lend, seen)
          for (let salt = 0; salt < messages; salt++) yield* producer.send(blob(3000, salt), { messageId: `m${salt}` })
          yield* advanceUntil(() => seen.length === messages, 50, 10_000)
          expect(seen.map((entry) => entry.messageId)).toEqual(Array.from({ length: messages }, (_, salt) => `m${salt}`))
          for (const [salt, entry] of seen.entries()) expect(sameBytes(entry.copy, blob(3000, salt))).toBe(true)
          const buffers = new Set(seen.map((entry) => entry.buffer)).size
          if (lend) expect(buffers).toBeLessThanOrEqual(4)
          else expect(buffers).toBe(messages)
        }).pipe(Effect.provide(memory()))
    )
  }

  it.scoped("a lent payload stays as it is until confirmed, however long it is held, while later messages wait", () =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Blob, chunkSize: 1024 })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Blob, window: 8, resendInterval: "200 millis", lendPayloads: true })
      const deliveries = yield* Queue.unbounded<{ readonly messageId: string; readonly payload: Uint8Array; readonly confirm: Effect.Effect<void> }>()
      yield* Effect.forkScoped(Stream.runForEach(consumer.deliveries, (delivery) => Queue.offer(deliveries, delivery)))
      yield* Effect.forkScoped(Effect.forEach(Array.from({ length: 6 }, (_, salt) => salt), (salt) => producer.send(blob(3000, salt), { messageId: `m${salt}` }), {
        discard: true
      }))
      for (let salt = 0; salt < 6; salt++) {
        yield* advanceUntil(() => Effect.runSync(Queue.size(deliveries)) > 0, 50, 5_000)
        const held = yield* Queue.take(deliveries)
        expect(held.messageId).toBe(`m${salt}`)
        // Held over several resend intervals: nothing is handed out meanwhile, the bytes do not change.
        yield* advanceBy(1_000, 50)
        expect(Effect.runSync(Queue.size(deliveries))).toBe(0)
        expect(sameBytes(held.payload, blob(3000, salt))).toBe(true)
        yield* held.confirm
      }
    }).pipe(Effect.provide(memory())))

  it.scopedLive("lent, over TCP: chunks arrive in buffers of their own and are joined into one buffer the consumer reuses", () =>
    Effect.gen(function*() {
      const a = yield* startNode({})
      const b = yield* startNode({})
      const producer = yield* a.run(Producer.make({ name: "p", consumer: "c", payload: Blob, chunkSize: 4096, remoteConsumer: { host, port: b.port } }))
      const consumer = yield* b.run(Consumer.make({
        name: "c",
        producer: "p",
        payload: Blob,
        window: 50,
        lendPayloads: true,
        remoteProducer: { host, port: a.port }
      }))
      const seen: Array<Seen> = []
      yield* b.run(Effect.forkScoped(consumer.run(record(seen))))
      // Largest first: the consumer's buffer never has to grow after the first message.
      const sizes = [40_000, 33_000, 4097, 12_288, 39_999, 20_000]
      for (const [salt, size] of sizes.entries()) yield* producer.send(blob(size, salt), { messageId: `m${salt}` })
      yield* waitUntil("every chunked message", () => seen.length === sizes.length)
      for (const [salt, entry] of seen.entries()) expect([entry.messageId, sameBytes(entry.copy, blob(sizes[salt], salt))]).toEqual([`m${salt}`, true])
      expect(new Set(seen.map((entry) => entry.buffer)).size).toBe(1)
    }))

  it.scoped("only binary payloads can be lent: any other Schema is a typed configuration error", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Consumer.make({ name: "c", producer: "p", payload: Schema.Struct({ id: Schema.Number }), lendPayloads: true }))
      expect(error).toMatchObject({ _tag: "ReliableConfigError", option: "lendPayloads" })
      expect(error.message).toContain("Uint8ArrayFromSelf")
      const branded = yield* Consumer.make({ name: "d", producer: "p", payload: Schema.Uint8ArrayFromSelf.pipe(Schema.brand("Image")), lendPayloads: true })
      expect(branded.name).toBe("d")
    }).pipe(Effect.provide(memory())))
})
