/**
 * One message-id rule for every backend: memory, SQLite and PostgreSQL accept exactly the same
 * ids. An id a backend could not hold (NUL, a lone surrogate, too long) fails its own send with
 * the same typed error everywhere, before anything is stored: no restart, other senders go on.
 * The longest allowed id, in multi-byte characters, is stored and delivered on every backend.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Schema } from "effect"
import type { Scope } from "effect"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Consumer from "../src/Consumer.js"
import { DurableProducerQueue } from "../src/DurableQueue/DurableProducerQueue.js"
import type { DurableProducerQueueService } from "../src/DurableQueue/DurableProducerQueue.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import { DurableWorkQueue } from "../src/DurableQueue/DurableWorkQueue.js"
import type { DurableWorkQueueService } from "../src/DurableQueue/DurableWorkQueue.js"
import * as MemoryWorkQueue from "../src/DurableQueue/MemoryWorkQueue.js"
import * as SqlProducerQueue from "../src/DurableQueue/SqlProducerQueue.js"
import * as SqlWorkQueue from "../src/DurableQueue/SqlWorkQueue.js"
import * as Producer from "../src/Producer.js"
import { MaxMessageIdLength } from "../src/Protocol/MessageIdRule.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { describePostgres, dropTables, pgClientLayer, probePostgres, sharedClient, uniqueSuffix } from "./DurableQueue/SqlTestSupport.js"
import { advanceWithIo } from "./support/IoClock.js"
import { spy } from "./support/QueueSpy.js"
import { spyWork } from "./support/WorkQueueSpy.js"

const Order = Schema.Struct({ id: Schema.Number })

/** A longest id of three-byte characters (1,536 bytes of UTF-8). */
const longest = "€".repeat(MaxMessageIdLength)

const badIds: ReadonlyArray<readonly [string, string]> = [
  ["a NUL character", "order\u0000-1"],
  ["a lone surrogate", "order-\ud800"],
  ["one character over the maximum", "x".repeat(MaxMessageIdLength + 1)],
  ["1 MiB", "x".repeat(1024 * 1024)]
]

const range = (count: number) => Array.from({ length: count }, (_, index) => index)

const refusal = (error: { readonly _tag: string; readonly reason?: string }) => ({ _tag: error._tag, reason: error.reason })

const checkIds = (makeQueue: Effect.Effect<DurableProducerQueueService, unknown, Scope.Scope>) =>
  Effect.gen(function*() {
    const watched = spy(yield* makeQueue, { fused: true })
    const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: watched.queue })
    const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
    const seen: Array<string> = []
    yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.messageId))))
    // Another sender goes on beside the refused calls, from before the first to after the last.
    const other = yield* Effect.fork(Effect.forEach(range(5), (n) => producer.send({ id: 100 + n }, { messageId: `other-${n}` }), { discard: true }))
    const refusals: Array<unknown> = []
    for (const [, id] of badIds) {
      refusals.push(refusal(yield* Effect.flip(producer.send({ id: 1 }, { messageId: id }))))
      // In a batch, one bad id refuses the whole batch alike, before anything of it is stored.
      refusals.push(refusal(yield* Effect.flip(producer.sendAll([{ payload: { id: 1 }, messageId: "batch-fine" }, { payload: { id: 1 }, messageId: id }]))))
      // Into the backlog, the same rule.
      refusals.push(refusal(yield* Effect.flip(producer.enqueue({ id: 1 }, { messageId: id }))))
    }
    const fine = yield* Effect.fork(producer.send({ id: 2 }, { messageId: longest }))
    yield* Effect.fork(producer.send({ id: 3 }, { messageId: "order-3" }))
    yield* advanceWithIo(() => seen.length === 7, 50, 10_000)
    expect(refusals).toEqual([...badIds, ...badIds, ...badIds].map(() => ({ _tag: "ProducerContractError", reason: "InvalidMessageId" })))
    expect(seen.filter((id) => !id.startsWith("other-"))).toEqual([longest, "order-3"])
    expect(seen.filter((id) => id.startsWith("other-"))).toEqual(range(5).map((n) => `other-${n}`))
    expect(fine.unsafePoll()?._tag).toBe("Success")
    expect(other.unsafePoll()?._tag).toBe("Success")
    // Nothing of the refused ids reached the queue, and the controller never restarted.
    expect(watched.calls.filter((call) => call.operation === "load")).toHaveLength(1)
    const stored = watched.calls.flatMap((call) => call.operation === "storeAccepted" ? call.argument as ReadonlyArray<string> : [])
    expect(stored.filter((id) => !id.startsWith("other-"))).toEqual([longest, "order-3"])
  }).pipe(Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))))

/** The same rule on a work-pulling producer (its durable work queue on the backend). */
const checkWorkIds = (makeQueue: Effect.Effect<DurableWorkQueueService, unknown, Scope.Scope>) =>
  Effect.gen(function*() {
    const watched = spyWork(yield* makeQueue)
    const producer = yield* WorkPulling.producer({ name: "jobs", payload: Order, durableWorkQueue: watched.queue })
    const worker = yield* WorkPulling.worker({ name: "w", producer: "jobs", payload: Order })
    const seen: Array<string> = []
    yield* Effect.forkScoped(worker.run((delivery) => Effect.sync(() => void seen.push(delivery.messageId))))
    const other = yield* Effect.fork(Effect.forEach(range(5), (n) => producer.send({ id: 100 + n }, { messageId: `other-${n}` }), { discard: true }))
    const refusals: Array<unknown> = []
    for (const [, id] of badIds) {
      refusals.push(refusal(yield* Effect.flip(producer.send({ id: 1 }, { messageId: id }))))
      refusals.push(refusal(yield* Effect.flip(producer.sendAll([{ payload: { id: 1 }, messageId: "batch-fine" }, { payload: { id: 1 }, messageId: id }]))))
    }
    yield* Effect.fork(producer.send({ id: 2 }, { messageId: longest }))
    yield* advanceWithIo(() => seen.length === 6, 50, 10_000)
    expect(refusals).toEqual([...badIds, ...badIds].map(() => ({ _tag: "ProducerContractError", reason: "InvalidMessageId" })))
    expect(new Set(seen)).toEqual(new Set([longest, ...range(5).map((n) => `other-${n}`)]))
    expect(other.unsafePoll()?._tag).toBe("Success")
    expect(watched.calls.filter((call) => call.operation === "load")).toHaveLength(1)
    const stored = watched.calls.filter((call) => call.operation.startsWith("store")).flatMap((call) => call.messageIds)
    expect(new Set(stored)).toEqual(new Set(seen))
  }).pipe(Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))))

const sqlWorkQueue = (client: Layer.Layer<any>, tablePrefix: string) =>
  Effect.map(
    Layer.build(SqlWorkQueue.layerWorkSql({ queueName: `ids-${uniqueSuffix()}`, tablePrefix }).pipe(Layer.provide(client))),
    (context) => Context.get(context, DurableWorkQueue)
  )

const sqlQueue = (client: Layer.Layer<any>, tablePrefix: string) =>
  Effect.map(
    Layer.build(SqlProducerQueue.layerSql({ queueName: `ids-${uniqueSuffix()}`, tablePrefix }).pipe(Layer.provide(client))),
    (context) => Context.get(context, DurableProducerQueue)
  )

describe("message ids", () => {
  it.scoped("memory: bad ids refused alike, the longest id stored and delivered", () => checkIds(MemoryProducerQueue.makeMemory))

  const filename = join(tmpdir(), `effect-reliable-ids-${uniqueSuffix()}.db`)
  const sqlite = sharedClient(() => SqliteClient.layer({ filename }), Effect.sync(() => {
    for (const suffix of ["", "-wal", "-shm"]) rmSync(`${filename}${suffix}`, { force: true })
  }))
  it.scoped("SQLite: bad ids refused alike, the longest id stored and delivered", () => checkIds(sqlQueue(sqlite, "reliable_")))

  it.scoped("memory work queue: bad ids refused alike, the longest id stored and delivered", () => checkWorkIds(MemoryWorkQueue.makeWorkMemory))
  it.scoped("SQLite work queue: bad ids refused alike, the longest id stored and delivered", () => checkWorkIds(sqlWorkQueue(sqlite, "reliable_")))
})

const probe = await probePostgres
const pgPrefix = `ids_${uniqueSuffix()}_`
const pg = sharedClient(pgClientLayer, dropTables(pgPrefix))

describePostgres(probe, "message ids on PostgreSQL", () => {
  it.scoped("bad ids refused alike, the longest id stored and delivered", () => checkIds(sqlQueue(pg, pgPrefix)))
  it.scoped("work queue: bad ids refused alike, the longest id stored and delivered", () => checkWorkIds(sqlWorkQueue(pg, pgPrefix)))

  it.scoped("content PostgreSQL cannot hold, stored past the rule, is QueueRejected (not retried, not terminal)", () =>
    Effect.gen(function*() {
      const queue = yield* sqlQueue(pg, pgPrefix)
      const { epoch } = yield* queue.load
      const payload = new Uint8Array([1])
      const nul = yield* Effect.flip(queue.storeAccepted!(epoch, [{ messageId: "a\u0000b", payload }]))
      expect(nul._tag).toBe("QueueRejected")
      const huge = yield* Effect.flip(queue.store(epoch, { messageId: "y".repeat(1024 * 1024), payload }))
      expect(huge._tag).toBe("QueueRejected")
      // The queue is unharmed: the next store goes in.
      expect((yield* queue.store(epoch, { messageId: "fine", payload })).alreadyStored).toBe(false)
    }))
})
