/**
 * Durable large messages through the controller, on the memory queue and a SQLite file: chunked
 * messages stored atomically with `storeChunked`, resubmissions after a crash following the stored
 * shape across the chunk threshold both ways (a plain `store` answered `QueueChunkedBatch` is
 * recovered), a reload mid-message redelivering the whole message, and confirmed-but-retained ids
 * answering `alreadyStored`.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Layer, Schema } from "effect"
import type { Scope } from "effect"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Consumer from "../src/Consumer.js"
import type { DurableProducerQueueService } from "../src/DurableQueue/DurableProducerQueue.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import * as SqlProducerQueue from "../src/DurableQueue/SqlProducerQueue.js"
import { chunkMessageId } from "../src/Protocol/ChunkId.js"
import { Produced, StoredAck } from "../src/Protocol/Contract.js"
import type { RequestNext, Stored } from "../src/Protocol/Contract.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import { uniqueSuffix } from "./DurableQueue/SqlTestSupport.js"
import { blob, sameBytes } from "./support/Bytes.js"
import { advanceBy, advanceUntil, layerRecording, recorded } from "./support/Harness.js"
import type { Recorder } from "./support/Harness.js"
import { spy } from "./support/QueueSpy.js"

const Blob = Schema.Uint8ArrayFromSelf
const ChunkSize = 1024
const system = layerRecording

interface Seen {
  readonly messageId: string
  readonly payload: Uint8Array
}

const durableProducer = (queue: DurableProducerQueueService) =>
  Producer.make({ name: "p", consumer: "c", payload: Blob, durableQueue: queue, chunkSize: ChunkSize, retryInterval: "100 millis" })

/** A consumer recording what it finished; `hold(id)` gates the handler for that message id. */
const startConsumer = (seen: Array<Seen>, window = 50, hold?: { readonly messageId: string; readonly gate: Deferred.Deferred<void> }) =>
  Effect.gen(function*() {
    const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Blob, window, resendInterval: "200 millis" })
    let held = false
    yield* Effect.forkScoped(consumer.run((delivery) =>
      Effect.gen(function*() {
        if (hold !== undefined && delivery.messageId === hold.messageId && !held) {
          held = true
          yield* Deferred.await(hold.gate)
        }
        seen.push({ messageId: delivery.messageId, payload: delivery.payload })
      })
    ))
  })

/** Waits for the next grant while the clock moves (a new controller needs the consumer's next tick). */
const nextGrant = (producer: Producer.Producer<Uint8Array>) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(producer.requestNext)
    let grant: RequestNext | undefined
    yield* advanceUntil(() => {
      const polled = fiber.unsafePoll()
      if (polled !== null && polled._tag === "Success") grant = polled.value
      return grant !== undefined
    }, 50, 10_000)
    return grant!
  })

/** `send` while the clock moves (a new controller offers its first grant after the consumer's tick). */
const sendTicking = (producer: Producer.Producer<Uint8Array>, payload: Uint8Array, messageId: string) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(producer.send(payload, { messageId }))
    let stored: Stored | undefined
    yield* advanceUntil(() => {
      const polled = fiber.unsafePoll()
      if (polled !== null && polled._tag === "Success") stored = polled.value
      return polled !== null
    }, 50, 10_000)
    return stored!
  })

const idle = (millis: number) => advanceBy(millis, 50)

type Scenario = (queue: DurableProducerQueueService) => Effect.Effect<void, unknown, ReliableSystem.ReliableSystem | Recorder | Scope.Scope>

/** A chunked message goes through one storeChunked call, under derived ids; a small one through store. */
const storedAtomically: Scenario = (inner) =>
  Effect.gen(function*() {
    const watched = spy(inner)
    const producer = yield* durableProducer(watched.queue)
    const seen: Array<Seen> = []
    yield* startConsumer(seen)
    const big = yield* producer.send(blob(2500, 1), { messageId: "big" })
    const small = yield* producer.send(blob(100, 2), { messageId: "small" })
    expect([big.seq, small.seq]).toEqual([3, 4])
    yield* advanceUntil(() => seen.length === 2, 50, 5_000)
    expect(sameBytes(seen[0].payload, blob(2500, 1))).toBe(true)
    const stores = watched.calls.filter((call) => call.operation.startsWith("store")).map((call) => [call.operation, call.argument])
    expect(stores).toEqual([["storeChunked", "big"], ["store", "small"]])
  })

/** A resubmission after a crash follows the first write's shape, whichever way the fresh encoding goes. */
const resubmissionAcrossThreshold: Scenario = (inner) =>
  Effect.gen(function*() {
    const watched = spy(inner)
    const producer = yield* durableProducer(watched.queue)
    const seen: Array<Seen> = []
    yield* startConsumer(seen)
    // Stored whole (500 bytes), crash before StoredAck; resubmitted as 3000 bytes (would be chunked).
    const grant1 = yield* producer.requestNext
    const whole = yield* producer.produce(Produced.make(grant1, "w", blob(500, 1)))
    expect(whole).toMatchObject({ seq: 1, alreadyStored: false })
    // Stored chunked (3000 bytes: seqs 2..4) under the next grant, crash before StoredAck.
    yield* ReliableSystem.respawn("p")
    const grant2 = yield* nextGrant(producer)
    const chunked = yield* producer.produce(Produced.make(grant2, "c", blob(3000, 2)))
    expect(chunked).toMatchObject({ seq: 4, alreadyStored: false })
    yield* ReliableSystem.respawn("p")
    yield* idle(500)
    expect(seen).toEqual([]) // nothing was accepted
    const again1 = yield* nextGrant(producer)
    const wholeAgain = yield* producer.produce(Produced.make(again1, "w", blob(3000, 9)))
    expect(wholeAgain).toMatchObject({ messageId: "w", seq: 1, alreadyStored: true })
    yield* producer.storedAck(StoredAck.make(wholeAgain))
    const again2 = yield* nextGrant(producer)
    const chunkedAgain = yield* producer.produce(Produced.make(again2, "c", blob(500, 9)))
    expect(chunkedAgain).toMatchObject({ messageId: "c", seq: 4, alreadyStored: true })
    yield* producer.storedAck(StoredAck.make(chunkedAgain))
    yield* advanceUntil(() => seen.length === 2, 50, 5_000)
    // The first writes are delivered, each once, whole.
    expect(seen.map((entry) => entry.messageId)).toEqual(["w", "c"])
    expect(sameBytes(seen[0].payload, blob(500, 1))).toBe(true)
    expect(sameBytes(seen[1].payload, blob(3000, 2))).toBe(true)
    // Stored whole, resubmitted large: storeChunked answers the whole entry. Stored chunked,
    // resubmitted small: store answers QueueChunkedBatch and storeChunked recovers the batch.
    const ops = (id: string) => watched.calls.filter((call) => call.argument === id && call.operation.startsWith("store")).map((call) => call.operation)
    expect(ops("w")).toEqual(["store", "storeChunked"])
    expect(ops("c")).toEqual(["storeChunked", "store", "storeChunked"])
    // The flow goes on from the queue's cursor.
    const next = yield* producer.send(blob(10, 3), { messageId: "next" })
    expect(next.seq).toBe(5)
    yield* advanceUntil(() => seen.length === 3, 50, 5_000)
  })

/**
 * A producer crash while a chunked message is partly sent (the window paused it mid-message) and
 * the message before it is delivered but unconfirmed: the reload redelivers both, whole.
 */
const reloadMidMessage: Scenario = (queue) =>
  Effect.gen(function*() {
    const producer = yield* durableProducer(queue)
    const seen: Array<Seen> = []
    const gate = yield* Deferred.make<void>()
    // Window 5: "zero" takes seq 1; "a" seqs 2-3 (held in the handler); "b" seqs 4-7 of which only 4-5 fit.
    yield* startConsumer(seen, 5, { messageId: "a", gate })
    yield* producer.send(blob(100, 0), { messageId: "zero" })
    yield* advanceUntil(() => seen.length === 1, 50, 5_000)
    yield* idle(1_000) // the watermark of "zero" is persisted
    yield* producer.send(blob(2000, 1), { messageId: "a" })
    yield* producer.send(blob(4000, 2), { messageId: "b" })
    yield* idle(500)
    // "b" is partly sent: the window let only some of its 4 chunks go.
    const sentOfB = new Set((yield* recorded("SequencedMessage")).flatMap((entry) =>
      entry.envelope.message.messageId === "b" ? [entry.envelope.message.seq] : []
    ))
    expect(sentOfB.size).toBeGreaterThan(0)
    expect(sentOfB.size).toBeLessThan(4)
    yield* ReliableSystem.respawn("p")
    yield* idle(500)
    yield* Deferred.succeed(gate, void 0)
    yield* advanceUntil(() => seen.some((entry) => entry.messageId === "b"), 50, 10_000)
    yield* idle(1_000)
    // "a" was being handled when the producer crashed: at least once, so it comes again.
    expect(seen.map((entry) => entry.messageId)).toEqual(["zero", "a", "a", "b"])
    expect(sameBytes(seen[1].payload, blob(2000, 1)) && sameBytes(seen[2].payload, blob(2000, 1))).toBe(true)
    expect(sameBytes(seen[3].payload, blob(4000, 2))).toBe(true)
  })

/** Confirmed messages stay owned: resubmitting one answers alreadyStored and delivers nothing again. */
const confirmedButRetained: Scenario = (queue) =>
  Effect.gen(function*() {
    const producer = yield* durableProducer(queue)
    const seen: Array<Seen> = []
    yield* startConsumer(seen)
    const big = yield* producer.send(blob(2500, 1), { messageId: "big" })
    const small = yield* producer.send(blob(10, 2), { messageId: "small" })
    yield* advanceUntil(() => seen.length === 2, 50, 5_000)
    yield* idle(1_000) // confirmations persisted
    yield* ReliableSystem.respawn("p")
    // A source that lost its marks resubmits both, each in the other shape.
    for (const [id, payload, expected] of [["big", blob(10, 7), big.seq], ["small", blob(2500, 7), small.seq]] as const) {
      const grant = yield* nextGrant(producer)
      const stored = yield* producer.produce(Produced.make(grant, id, payload))
      expect(stored).toMatchObject({ messageId: id, seq: expected, alreadyStored: true })
      yield* producer.storedAck(StoredAck.make(stored))
    }
    yield* producer.send(blob(10, 3), { messageId: "after" })
    yield* advanceUntil(() => seen.length === 3, 50, 5_000)
    yield* idle(500)
    expect(seen.map((entry) => entry.messageId)).toEqual(["big", "small", "after"])
  })

/**
 * The everyday path after a crash: `send` of an id whose first write is a chunked batch (never
 * accepted) recovers the batch; `send` of a confirmed chunked id answers alreadyStored.
 */
const everydayResend: Scenario = (inner) =>
  Effect.gen(function*() {
    const watched = spy(inner)
    const producer = yield* durableProducer(watched.queue)
    const seen: Array<Seen> = []
    yield* startConsumer(seen)
    const done = yield* producer.send(blob(3000, 1), { messageId: "done" })
    yield* advanceUntil(() => seen.length === 1, 50, 5_000)
    yield* idle(1_000)
    // Stored chunked under a grant, then the producer crashes before acknowledging it.
    const grant = yield* producer.requestNext
    const pending = yield* producer.produce(Produced.make(grant, "pending", blob(2500, 2)))
    yield* ReliableSystem.respawn("p")
    const again = yield* sendTicking(producer, blob(10, 9), "pending")
    expect(again).toMatchObject({ messageId: "pending", seq: pending.seq, alreadyStored: true })
    const doneAgain = yield* sendTicking(producer, blob(10, 9), "done")
    expect(doneAgain).toMatchObject({ messageId: "done", seq: done.seq, alreadyStored: true })
    yield* sendTicking(producer, blob(10, 3), "after")
    yield* advanceUntil(() => seen.length === 3, 50, 5_000)
    yield* idle(500)
    expect(seen.map((entry) => entry.messageId)).toEqual(["done", "pending", "after"])
    expect(sameBytes(seen[1].payload, blob(2500, 2))).toBe(true)
  })

/** The chunk entries a reload sees carry the derived ids and their marks. */
const reloadSeesChunks: Scenario = (queue) =>
  Effect.gen(function*() {
    const producer = yield* durableProducer(queue)
    // A consumer that never finishes: the message is stored and accepted, never confirmed.
    yield* startConsumer([], 50, { messageId: "big", gate: yield* Deferred.make<void>() })
    yield* producer.send(blob(2100, 1), { messageId: "big" })
    yield* ReliableSystem.respawn("p")
    yield* idle(300)
    const { state } = yield* queue.load
    expect(state.unconfirmed.map((entry) => [entry.seq, entry.messageId, entry.chunk, entry.payload.length])).toEqual([
      [1, chunkMessageId("big", 0, 3), { first: true, last: false }, 1024],
      [2, chunkMessageId("big", 1, 3), { first: false, last: false }, 1024],
      [3, chunkMessageId("big", 2, 3), { first: false, last: true }, 52]
    ])
  })

const scenarios: ReadonlyArray<readonly [string, Scenario]> = [
  ["a chunked message is stored atomically with storeChunked under derived ids; a small one with store", storedAtomically],
  ["a reload sees the chunk entries with derived ids and marks", reloadSeesChunks],
  ["a resubmission after a crash follows the stored shape across the threshold, both ways", resubmissionAcrossThreshold],
  ["a producer crash mid-message: the reload redelivers the whole message", reloadMidMessage],
  ["confirmed-but-retained ids answer alreadyStored and are not delivered again", confirmedButRetained],
  ["the everyday send after a crash recovers a chunked first write, and answers a confirmed one alreadyStored", everydayResend]
]

const onSqlite = (scenario: Scenario) => {
  const filename = join(tmpdir(), `effect-reliable-chunks-${uniqueSuffix()}.db`)
  return Effect.gen(function*() {
    const context = yield* Layer.build(SqliteClient.layer({ filename }))
    const queue = yield* Effect.provide(SqlProducerQueue.makeSql({ queueName: `chunks-${uniqueSuffix()}` }), context)
    yield* scenario(queue)
  }).pipe(
    Effect.ensuring(Effect.sync(() => {
      for (const suffix of ["", "-wal", "-shm"]) rmSync(`${filename}${suffix}`, { force: true })
    }))
  )
}

describe("durable chunking", () => {
  describe("memory queue", () => {
    it.scoped.each(scenarios)("%s", ([, scenario]) =>
      Effect.flatMap(MemoryProducerQueue.makeMemory, scenario).pipe(Effect.provide(system())))
  })

  describe("SQLite file", () => {
    it.scoped.each(scenarios)("%s", ([, scenario]) => onSqlite(scenario).pipe(Effect.provide(system())))
  })
})
