/**
 * The durable work-pulling lane runs job confirmations beside the handshake's store and accept,
 * where the seed runs them one at a time with the handshake first. These tests show that no
 * ordering guarantee is lost: a worker's confirmation racing a resubmission of the same job (its
 * store, and for the contract its accept) ends the same way whichever lands first, on the memory,
 * SQLite and PostgreSQL work queues: the resubmission gets the job's first seq back, the job is
 * done once, and the queue holds it confirmed with nothing appended.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Schema, TestClock } from "effect"
import type { Scope } from "effect"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { DurableWorkQueueService } from "../src/DurableQueue/DurableWorkQueue.js"
import * as MemoryWorkQueue from "../src/DurableQueue/MemoryWorkQueue.js"
import * as SqlWorkQueue from "../src/DurableQueue/SqlWorkQueue.js"
import { Produced, StoredAck } from "../src/Protocol/Contract.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { describePostgres, dropTables, pgClientLayer, probePostgres, uniqueSuffix } from "./DurableQueue/SqlTestSupport.js"
import { advanceWithIo } from "./support/IoClock.js"
import type { WorkCall, WorkOperation } from "./support/WorkQueueSpy.js"
import { spyWork } from "./support/WorkQueueSpy.js"

const Job = Schema.Struct({ n: Schema.Number })
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

const confirmations: ReadonlyArray<WorkOperation> = ["confirmMessage", "confirmBatch"]
const stores: ReadonlyArray<WorkOperation> = ["store", "storeBatch", "storeAccepted"]
/** Longer than the test moves the clock while a call is held: only the test's own step releases it. */
const holdMs = 5_000

type Order = "the store lands first" | "the confirmation lands first"
/** `send` stores and accepts in one step; the contract stores on `produce` and accepts on `storedAck`. */
type Path = "send" | "contract"

/** What each of the job's durable calls after the first send was, in the order they took effect. */
const kindOf = (call: WorkCall): string =>
  confirmations.includes(call.operation) ? "confirm" : stores.includes(call.operation) ? "store" : call.operation

const race = (inner: DurableWorkQueueService, order: Order, path: Path) =>
  Effect.gen(function*() {
    const watched = spyWork(inner)
    const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job, durableWorkQueue: watched.queue })
    const service = yield* ReliableSystem.ReliableSystem
    const stats = () => Effect.runSync(WorkPulling.stats("dispatcher").pipe(Effect.provideService(ReliableSystem.ReliableSystem, service)))
    const gate = yield* Deferred.make<void>()
    const done: Array<string> = []
    const worker = yield* WorkPulling.worker({ name: "w1", producer: "dispatcher", payload: Job, resendInterval: "200 millis" })
    yield* Effect.forkScoped(worker.run((delivery) => Effect.zipRight(Deferred.await(gate), Effect.sync(() => void done.push(delivery.messageId)))))
    const first = yield* Effect.fork(producer.send({ n: 1 }, { messageId: "job-1" }))
    yield* advanceWithIo(() => stats().perWorker[0]?.inFlight === 1, 20, 10_000)
    const stored = yield* Fiber.join(first)
    const mark = watched.calls.length
    const resubmission = path === "send"
      ? producer.send({ n: 1 }, { messageId: "job-1" })
      : Effect.gen(function*() {
        const again = yield* producer.produce(Produced.make(yield* producer.requestNext, "job-1", { n: 1 }))
        yield* producer.storedAck(StoredAck.make(again))
        return again
      })
    const completedSince = () => watched.completed.filter((call) => watched.calls.indexOf(call) >= mark).map(kindOf)
    const called = (operations: ReadonlyArray<WorkOperation>) => () => watched.calls.slice(mark).some((call) => operations.includes(call.operation))

    let again: Fiber.RuntimeFiber<typeof stored, unknown>
    if (order === "the store lands first") {
      // The worker confirms; the confirmation's write is held while the resubmission stores.
      watched.holdNext(confirmations, holdMs)
      yield* Deferred.succeed(gate, undefined)
      yield* advanceWithIo(called(confirmations), 20, 1_000)
      again = yield* Effect.fork(resubmission)
      yield* advanceWithIo(() => again.unsafePoll() !== null, 20, 1_000)
      yield* TestClock.adjust(holdMs)
      yield* advanceWithIo(() => completedSince().includes("confirm"), 20, 1_000)
    } else {
      // The resubmission's store is held while the worker confirms and the confirmation lands.
      watched.holdNext(stores, holdMs)
      again = yield* Effect.fork(resubmission)
      yield* advanceWithIo(called(stores), 20, 1_000)
      yield* Deferred.succeed(gate, undefined)
      yield* advanceWithIo(() => completedSince().includes("confirm"), 20, 1_000)
      yield* TestClock.adjust(holdMs)
      yield* advanceWithIo(() => again.unsafePoll() !== null, 20, 1_000)
    }
    const resubmitted = yield* Fiber.join(again)
    yield* advanceWithIo(() => false, 100, 1_000).pipe(Effect.ignore)

    const handshake = path === "send" ? ["store"] : ["store", "accept"]
    expect(completedSince()).toEqual(order === "the store lands first" ? [...handshake, "confirm"] : ["confirm", ...handshake])
    // The same outcome either way.
    expect(resubmitted).toMatchObject({ messageId: "job-1", seq: stored.seq, alreadyStored: true })
    expect(done).toEqual(["job-1"])
    expect(stats()).toMatchObject({ confirmed: 1, pending: 0 })
    expect(stats().perWorker[0].inFlight).toBe(0)
    const reloaded = yield* inner.load
    expect(reloaded.state).toEqual({ currentSeq: stored.seq, pending: [] })
  })

const cases: ReadonlyArray<readonly [Order, Path]> = [
  ["the store lands first", "send"],
  ["the confirmation lands first", "send"],
  ["the store lands first", "contract"],
  ["the confirmation lands first", "contract"]
]

/** The four races on fresh queues from `fresh`. */
const races = (backend: string, fresh: () => Effect.Effect<DurableWorkQueueService, unknown, Scope.Scope>) => {
  for (const [order, path] of cases) {
    it.scoped(`${backend}: ${order} (${path}): the same seq, the job done once, confirmed in the queue`, () =>
      Effect.flatMap(fresh(), (queue) => race(queue, order, path)).pipe(Effect.provide(system())), 60_000)
  }
}

describe("durable work-pulling: a confirmation racing a store of the same job", () => {
  races("memory", () => MemoryWorkQueue.makeWorkMemory)

  races("SQLite", () =>
    Effect.gen(function*() {
      const filename = join(tmpdir(), `effect-reliable-race-${uniqueSuffix()}.db`)
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => {
          for (const suffix of ["", "-wal", "-shm"]) rmSync(`${filename}${suffix}`, { force: true })
        })
      )
      const context = yield* Layer.build(SqliteClient.layer({ filename }))
      return yield* Effect.provide(SqlWorkQueue.makeWorkSql({ queueName: `race-${uniqueSuffix()}` }), context)
    }))
})

const probe = await probePostgres

describePostgres(probe, "durable work-pulling on PostgreSQL: a confirmation racing a store of the same job", () => {
  races("PostgreSQL", () =>
    Effect.gen(function*() {
      const tablePrefix = `race_${uniqueSuffix()}_`
      const context = yield* Layer.build(pgClientLayer())
      yield* Effect.addFinalizer(() => Effect.orDie(Effect.provide(dropTables(tablePrefix), context)))
      return yield* Effect.provide(SqlWorkQueue.makeWorkSql({ queueName: `race-${uniqueSuffix()}`, tablePrefix }), context)
    }))
})
