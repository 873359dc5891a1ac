/**
 * Dead letters in durable queues, end to end, on memory, SQLite and PostgreSQL: a message whose
 * handler keeps failing is dead-lettered in the queue with its attempts and last error; a
 * restarted producer does not deliver it again; an operator lists it, requeues it (delivered
 * again after what is in flight, confirmed once) or discards it (its id stays owned). Work
 * queues keep a job's attempt count across a producer restart.
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Logger, LogLevel, Schedule, Schema, Scope } from "effect"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Consumer from "../src/Consumer.js"
import { DurableProducerQueue } from "../src/DurableQueue/DurableProducerQueue.js"
import type { DurableProducerQueueService } from "../src/DurableQueue/DurableProducerQueue.js"
import { DurableWorkQueue } from "../src/DurableQueue/DurableWorkQueue.js"
import type { DurableWorkQueueService } from "../src/DurableQueue/DurableWorkQueue.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import * as MemoryWorkQueue from "../src/DurableQueue/MemoryWorkQueue.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import {
  describePostgres,
  dropTables,
  freshProducerQueue,
  freshWorkQueue,
  pgClientLayer,
  probePostgres,
  sharedClient,
  uniqueSuffix
} from "./DurableQueue/SqlTestSupport.js"
import { advanceWithIo } from "./support/IoClock.js"

const Order = Schema.Struct({ id: Schema.Number })
type Order = typeof Order.Type
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))
const quiet = <A, E, R>(effect: Effect.Effect<A, E, R>) => Logger.withMinimumLogLevel(effect, LogLevel.Error)
const orders = (ids: ReadonlyArray<number>) => ids.map((id) => ({ payload: { id }, messageId: `order-${id}` }))

/** Where a test's queues come from: a fresh queue of each kind per call. */
interface Backend {
  readonly producerQueue: Effect.Effect<DurableProducerQueueService, unknown, Scope.Scope>
  readonly workQueue: Effect.Effect<DurableWorkQueueService, unknown, Scope.Scope>
}

const memory: Backend = { producerQueue: MemoryProducerQueue.makeMemory, workQueue: MemoryWorkQueue.makeWorkMemory }

const sqlBackend = (client: Layer.Layer<SqlClient>, tablePrefix: string): Backend => ({
  producerQueue: Effect.map(Layer.build(freshProducerQueue(client, tablePrefix)), Context.get(DurableProducerQueue)),
  workQueue: Effect.map(Layer.build(freshWorkQueue(client, tablePrefix)), Context.get(DurableWorkQueue))
})

/** Runs `make` in a scope of its own, closed by the returned effect (a producer that stops and is made again). */
const inOwnScope = <A, E, R>(make: Effect.Effect<A, E, R | Scope.Scope>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const value = yield* Scope.extend(make, scope)
    return { value, close: Scope.close(scope, Exit.void) }
  })

const pointToPoint = (backend: Backend) =>
  quiet(Effect.gen(function*() {
    const queue = yield* backend.producerQueue
    const makeProducer = inOwnScope(Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue }))
    let producer = yield* makeProducer
    const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order, maxAttempts: 2, retry: Schedule.spaced("100 millis") })
    let poisoned = true
    const done: Array<number> = []
    yield* Effect.forkScoped(consumer.run((delivery: { readonly payload: Order }) =>
      poisoned && delivery.payload.id === 2 ? Effect.fail(new Error("cannot ship order 2")) : Effect.sync(() => void done.push(delivery.payload.id))))
    yield* Effect.forkScoped(producer.value.sendAll(orders([1, 2, 3])))
    yield* advanceWithIo(() => done.length === 2, 50, 10_000)
    yield* advanceWithIo(() => false, 100, 1_000).pipe(Effect.ignore)
    const [dead] = yield* queue.deadLetters({ limit: 10 })
    expect(dead).toMatchObject({ messageId: "order-2", attempts: 2 })
    expect(dead.lastError).toContain("cannot ship order 2")
    expect(JSON.parse(new TextDecoder().decode(dead.payload))).toEqual({ id: 2 })

    // A restarted producer reloads its queue: the dead letter is not delivered again.
    yield* producer.close
    producer = yield* makeProducer
    yield* Effect.forkScoped(producer.value.sendAll(orders([4])))
    yield* advanceWithIo(() => done.length === 3, 50, 20_000)
    expect(done).toEqual([1, 3, 4])
    expect((yield* queue.deadLetters({ limit: 10 })).map((letter) => letter.messageId)).toEqual(["order-2"])

    // Requeued, it is delivered again (the handler works now) and confirmed once.
    poisoned = false
    expect(yield* queue.requeueDeadLetter("order-2")).toBe(true)
    yield* advanceWithIo(() => done.length === 4, 50, 20_000)
    expect(done).toEqual([1, 3, 4, 2])
    expect(yield* queue.deadLetters({ limit: 10 })).toEqual([])
    yield* advanceWithIo(() => false, 500, 3_000).pipe(Effect.ignore)
    const after = yield* queue.inspect({ limit: 0 })
    expect(after).toMatchObject({ backlog: 0, stored: 0, unconfirmed: 0, deadLettered: 0 })
    expect(done).toEqual([1, 3, 4, 2])
  }))

const discarding = (backend: Backend) =>
  quiet(Effect.gen(function*() {
    const queue = yield* backend.producerQueue
    const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue })
    const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order, maxAttempts: 1 })
    const done: Array<number> = []
    yield* Effect.forkScoped(consumer.run((delivery: { readonly payload: Order }) =>
      delivery.payload.id === 7 ? Effect.fail("no") : Effect.sync(() => void done.push(delivery.payload.id))))
    yield* Effect.forkScoped(producer.sendAll(orders([7, 8])))
    yield* advanceWithIo(() => done.length === 1, 50, 10_000)
    yield* advanceWithIo(() => false, 100, 1_000).pipe(Effect.ignore)
    expect(yield* queue.discardDeadLetter("order-7")).toBe(true)
    expect(yield* queue.discardDeadLetter("order-7")).toBe(false)
    expect(yield* queue.deadLetters({ limit: 10 })).toEqual([])
    // Its id stays owned: a resubmission is answered as stored before and not delivered.
    const again = yield* producer.send({ id: 7 }, { messageId: "order-7" })
    expect(again.alreadyStored).toBe(true)
    yield* advanceWithIo(() => false, 200, 2_000).pipe(Effect.ignore)
    expect(done).toEqual([8])
  }))

const workAttempts = (backend: Backend) =>
  quiet(Effect.gen(function*() {
    const queue = yield* backend.workQueue
    const makeProducer = inOwnScope(WorkPulling.producer({ name: "jobs", payload: Order, durableWorkQueue: queue }))
    let producer = yield* makeProducer
    const worker = yield* WorkPulling.worker({ name: "w", producer: "jobs", payload: Order, maxAttempts: 3, retry: Schedule.spaced("1 second") })
    const attempts: Array<number> = []
    const done: Array<number> = []
    yield* Effect.forkScoped(worker.run((delivery: { readonly payload: Order; readonly attempt: number }) => {
      if (delivery.payload.id !== 5) return Effect.sync(() => void done.push(delivery.payload.id))
      attempts.push(delivery.attempt)
      return Effect.fail("job 5 fails")
    }))
    yield* Effect.forkScoped(producer.value.sendAll(orders([4, 5, 6])))
    yield* advanceWithIo(() => attempts.length === 1 && done.length === 2, 50, 10_000)
    // The producer restarts between attempts: the count carries over from the queue.
    yield* producer.close
    producer = yield* makeProducer
    yield* advanceWithIo(() => attempts.length === 3, 100, 30_000)
    expect(attempts).toEqual([1, 2, 3])
    yield* advanceWithIo(() => false, 200, 2_000).pipe(Effect.ignore)
    const [dead] = yield* queue.deadLetters({ limit: 10 })
    expect(dead).toMatchObject({ messageId: "order-5", attempts: 3 })
    expect(dead.lastError).toContain("job 5 fails")
    expect(yield* queue.requeueDeadLetter("order-5")).toBe(true)
    // Requeued, the job starts over: its attempts count from 1 again.
    yield* advanceWithIo(() => attempts.length === 4, 100, 30_000)
    expect(attempts).toEqual([1, 2, 3, 1])
  }))

const suite = (backend: () => Backend) => {
  it.scoped("point-to-point: dead-lettered with attempts and error, not redelivered after a restart, requeued and confirmed once", () =>
    Effect.provide(pointToPoint(backend()), system()))
  it.scoped("point-to-point: a discarded dead letter is gone for good; its id stays owned", () => Effect.provide(discarding(backend()), system()))
  it.scoped("work-pulling: attempts carry over a producer restart; the dead letter is requeued and starts over", () =>
    Effect.provide(workAttempts(backend()), system()))
}

describe("durable dead letters: memory", () => suite(() => memory))

describe("durable dead letters: SQLite", () => {
  const filename = join(tmpdir(), `effect-reliable-dead-${uniqueSuffix()}.db`)
  const sqlite = sharedClient(() => SqliteClient.layer({ filename }), Effect.sync(() => {
    for (const suffix of ["", "-wal", "-shm"]) rmSync(`${filename}${suffix}`, { force: true })
  }))
  suite(() => sqlBackend(sqlite, "reliable_"))
})

const probe = await probePostgres
const pgPrefix = `dead_${uniqueSuffix()}_`
const pg = sharedClient(pgClientLayer, dropTables(pgPrefix))
describePostgres(probe, "durable dead letters: PostgreSQL", () => suite(() => sqlBackend(pg, pgPrefix)))
