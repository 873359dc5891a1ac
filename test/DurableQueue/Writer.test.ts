/**
 * Writers, the transactional outbox: a message enqueued inside the application's transaction
 * commits or rolls back with the application's rows, on SQLite and PostgreSQL; first write wins
 * across writers; many concurrent writers lose nothing and keep each writer's order.
 */
import { SqlClient } from "@effect/sql/SqlClient"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either, Layer, Queue, Schema, Stream } from "effect"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { QueueOperatorService } from "../../src/DurableQueue/DurableProducerQueue.js"
import * as MemoryProducerQueue from "../../src/DurableQueue/MemoryProducerQueue.js"
import * as SqlProducerQueue from "../../src/DurableQueue/SqlProducerQueue.js"
import * as SqlWorkQueue from "../../src/DurableQueue/SqlWorkQueue.js"
import * as Writer from "../../src/DurableQueue/Writer.js"
import * as PayloadCodec from "../../src/Protocol/PayloadCodec.js"
import { describePostgres, dropTables, pgClientLayer, probePostgres, sharedClient, uniqueSuffix } from "./SqlTestSupport.js"

const probe = await probePostgres

const Order = Schema.Struct({ orderId: Schema.Number, customer: Schema.String })
const codec = PayloadCodec.make(Order)

const decoded = (queue: QueueOperatorService) =>
  Effect.map(queue.backlog(1_000), (entries) =>
    entries.map((entry) => [entry.messageId, Either.getOrThrow(codec.decode(entry.payload)).orderId]))

const writerTests = (client: Layer.Layer<SqlClient>, otherClient: () => Layer.Layer<SqlClient, unknown>, tablePrefix: string) => {
  const setUp = Effect.gen(function*() {
    const queueName = `outbox-${uniqueSuffix()}`
    const sql = yield* SqlClient
    const orders = `${tablePrefix}orders_${uniqueSuffix()}`
    yield* sql`CREATE TABLE ${sql(orders)} (id TEXT PRIMARY KEY)`
    const writer = yield* Writer.writer({ queueName, payload: Order, tablePrefix })
    const queue = yield* SqlProducerQueue.makeSql({ queueName, tablePrefix })
    const placeOrder = (orderId: number, fail = false) =>
      sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO ${sql(orders)} (id) VALUES (${`o${orderId}`})`
        yield* writer.enqueue({ orderId, customer: "c" }, { messageId: `o${orderId}` })
        if (fail) return yield* Effect.fail("declined" as const)
      }))
    const orderIds = Effect.map(sql<{ readonly id: string }>`SELECT id FROM ${sql(orders)} ORDER BY id`, (rows) => rows.map((row) => row.id))
    return { queueName, sql, writer, queue, placeOrder, orderIds }
  })

  it.scoped("a committed transaction commits the message with the application's row; a rolled back one neither", () =>
    Effect.gen(function*() {
      const { orderIds, placeOrder, queue } = yield* setUp
      yield* placeOrder(1)
      expect(yield* Effect.flip(placeOrder(2, true))).toBe("declined")
      yield* placeOrder(3)
      expect(yield* orderIds).toEqual(["o1", "o3"])
      expect(yield* decoded(queue)).toEqual([["o1", 1], ["o3", 3]])
    }).pipe(Effect.provide(client)))

  it.scoped("inside a nested transaction the message rolls back with its savepoint only", () =>
    Effect.gen(function*() {
      const { queue, sql, writer } = yield* setUp
      const order = (orderId: number) => writer.enqueue({ orderId, customer: "c" }, { messageId: `n${orderId}` })
      yield* sql.withTransaction(Effect.gen(function*() {
        yield* order(1)
        const inner = yield* Effect.either(sql.withTransaction(Effect.zipRight(order(2), Effect.fail("inner declined"))))
        expect(Either.isLeft(inner)).toBe(true)
        yield* order(3)
      }))
      expect(yield* decoded(queue)).toEqual([["n1", 1], ["n3", 3]])
    }).pipe(Effect.provide(client)))

  it.scoped("the first write wins across writers (another connection included)", () =>
    Effect.gen(function*() {
      const { queue, queueName, writer } = yield* setUp
      expect(yield* writer.enqueue({ orderId: 1, customer: "first" }, { messageId: "same" })).toEqual({ messageId: "same", alreadyStored: false })
      const again = yield* Effect.flatMap(
        Writer.writer({ queueName, payload: Order, tablePrefix }),
        (other) => other.enqueue({ orderId: 2, customer: "second" }, { messageId: "same" })
      ).pipe(Effect.provide(otherClient()))
      expect(again).toEqual({ messageId: "same", alreadyStored: true })
      expect(yield* decoded(queue)).toEqual([["same", 1]])
    }).pipe(Effect.provide(client)))

  it.scoped("many concurrent writers: every committed message once, each writer's in its order, no rolled back one", () =>
    Effect.gen(function*() {
      const { orderIds, placeOrder, queue } = yield* setUp
      const writers = 8
      const perWriter = 25
      const outcomes = yield* Effect.all(
        Array.from({ length: writers }, (_, w) =>
          Effect.forEach(Array.from({ length: perWriter }, (_, i) => 1_000 * (w + 1) + i), (orderId) =>
            // every third order of a writer is declined, by plan
            Effect.either(placeOrder(orderId, orderId % 3 === 0)))),
        { concurrency: "unbounded" }
      )
      const committed = outcomes.flat().filter(Either.isRight).length
      const backlog = yield* decoded(queue)
      expect(backlog).toHaveLength(committed)
      expect(backlog.map(([id]) => id).sort()).toEqual(yield* orderIds)
      expect(backlog.every(([, orderId]) => Number(orderId) % 3 !== 0)).toBe(true)
      for (let w = 1; w <= writers; w++) {
        const own = backlog.map(([, orderId]) => Number(orderId)).filter((orderId) => Math.floor(orderId / 1_000) === w)
        expect(own).toEqual([...own].sort((a, b) => a - b))
      }
    }).pipe(Effect.provide(client)))

  it.scoped("a work writer feeds the work queue's backlog; taken into the flow, the job keeps its trace", () =>
    Effect.gen(function*() {
      const queueName = `jobs-${uniqueSuffix()}`
      const writer = yield* Writer.writer({ queueName, payload: Order, tablePrefix, kind: "work" })
      const queue = yield* SqlWorkQueue.makeWorkSql({ queueName, tablePrefix })
      yield* writer.enqueueAll([
        { payload: { orderId: 1, customer: "a" }, messageId: "j1", trace: "00-t1" },
        { payload: { orderId: 2, customer: "b" }, messageId: "j2" }
      ])
      const { epoch } = yield* queue.load
      const backlog = yield* queue.backlog(10)
      yield* queue.storeAccepted!(epoch, backlog.map((entry) => ({ ...entry, fromBacklog: true, at: entry.enqueuedAt })))
      const { state } = yield* queue.load
      expect(state.pending.map((entry) => [entry.messageId, entry.trace ?? null])).toEqual([["j1", "00-t1"], ["j2", null]])
      expect(yield* queue.backlog(10)).toEqual([])
    }).pipe(Effect.provide(client)))

  it.scoped("enqueueAll is all or none; bad ids and payloads are typed errors", () =>
    Effect.gen(function*() {
      const { queue, writer } = yield* setUp
      const good = { payload: { orderId: 1, customer: "c" }, messageId: "good" }
      const refusal = (messages: ReadonlyArray<Writer.WriterMessage<typeof Order.Type>>) =>
        Effect.map(Effect.flip(writer.enqueueAll(messages)), (error) => error._tag === "ProducerContractError" ? error.reason : error._tag)
      expect(yield* refusal([good, { payload: { orderId: 2, customer: "c" }, messageId: " " }])).toBe("BlankMessageId")
      expect(yield* refusal([good, { payload: { orderId: 2, customer: "c" }, messageId: "x".repeat(600) }])).toBe("InvalidMessageId")
      expect(yield* refusal([good, { payload: { orderId: "2" as unknown as number, customer: "c" } }])).toBe("PayloadEncodeError")
      expect(yield* queue.backlog(10)).toEqual([])
      const generated = yield* writer.enqueue({ orderId: 3, customer: "c" })
      expect(generated.alreadyStored).toBe(false)
      expect((yield* queue.backlog(10)).map((entry) => entry.messageId)).toEqual([generated.messageId])
    }).pipe(Effect.provide(client)))

  it.effect("bad writer options are ReliableConfigError naming the option", () =>
    Effect.gen(function*() {
      const option = (options: unknown) =>
        Effect.map(Effect.flip(Writer.writer(options as Writer.WriterOptions<unknown, unknown>)), (error) => [error._tag, "option" in error ? error.option : undefined])
      expect(yield* option({ queueName: "q", payload: Order, tablePrefix, kind: "topic" })).toEqual(["ReliableConfigError", "kind"])
      expect(yield* option({ queueName: "q", payload: Order, tablePrefix, queue: "x" })).toEqual(["ReliableConfigError", "queue"])
      expect(yield* option({ queueName: "q", payload: "Order", tablePrefix })).toEqual(["ReliableConfigError", "payload"])
      expect(yield* option({ queueName: " ", payload: Order, tablePrefix })).toEqual(["ReliableConfigError", "queueName"])
    }).pipe(Effect.provide(client)))
}

describe("writers on SQLite", () => {
  const filename = join(tmpdir(), `effect-reliable-writer-${uniqueSuffix()}.db`)
  const client = sharedClient(() => SqliteClient.layer({ filename }), Effect.sync(() => {
    for (const suffix of ["", "-wal", "-shm"]) rmSync(`${filename}${suffix}`, { force: true })
  }))
  writerTests(client, () => SqliteClient.layer({ filename }), "reliable_")
})

describePostgres(probe, "writers on PostgreSQL", () => {
  const tablePrefix = `rt_${uniqueSuffix()}_`
  const client = sharedClient(pgClientLayer, dropTables(tablePrefix))
  writerTests(client, pgClientLayer, tablePrefix)

  it.scopedLive("a writer's commit on another connection wakes the queue's backlog signal, not before", () =>
    Effect.gen(function*() {
      const queueName = `signal-${uniqueSuffix()}`
      const queue = yield* SqlProducerQueue.makeSql({ queueName, tablePrefix })
      const heard = yield* Queue.unbounded<void>()
      yield* Effect.forkScoped(Stream.runForEach(queue.backlogSignal!, () => Queue.offer(heard, undefined)))
      // The listener connects in the background and signals once it listens (so a reader looks
      // for what committed before): wait for that one, then only a commit may signal.
      yield* Queue.take(heard).pipe(Effect.timeout(Duration.seconds(5)))
      yield* Queue.takeAll(heard)
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient
        const writer = yield* Writer.writer({ queueName, payload: Order, tablePrefix })
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* writer.enqueue({ orderId: 1, customer: "c" })
          yield* Effect.sleep(Duration.millis(300))
          expect(yield* Queue.size(heard)).toBe(0)
        }))
      }).pipe(Effect.provide(pgClientLayer()))
      yield* Queue.take(heard).pipe(Effect.timeout(Duration.seconds(5)))
    }).pipe(Effect.provide(client)))
})

describe("memory writer", () => {
  it.effect("encodes as a producer does and enqueues into the queue's backlog", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      const writer = yield* Writer.writerMemory(queue, Order)
      yield* writer.enqueue({ orderId: 7, customer: "m" }, { messageId: "m7" })
      expect((yield* writer.enqueue({ orderId: 8, customer: "m" }, { messageId: "m7" })).alreadyStored).toBe(true)
      expect(yield* decoded(queue)).toEqual([["m7", 7]])
      const binary = yield* Writer.writerMemory(queue, Schema.Uint8ArrayFromSelf)
      yield* binary.enqueue(new Uint8Array([1, 2, 3]), { messageId: "bytes" })
      expect(Array.from((yield* queue.backlog(10))[1].payload)).toEqual([1, 2, 3])
    }))
})
