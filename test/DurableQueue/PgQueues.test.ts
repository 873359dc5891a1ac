import type { SqlClient } from "@effect/sql/SqlClient"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Fiber, Layer, Stream } from "effect"
import { DurableProducerQueue } from "../../src/DurableQueue/DurableProducerQueue.js"
import { DurableWorkQueue } from "../../src/DurableQueue/DurableWorkQueue.js"
import { producerQueueConformance } from "../../src/DurableQueue/ProducerQueueConformance.js"
import * as SqlProducerQueue from "../../src/DurableQueue/SqlProducerQueue.js"
import * as SqlWorkQueue from "../../src/DurableQueue/SqlWorkQueue.js"
import { workQueueConformance } from "../../src/DurableQueue/WorkQueueConformance.js"
import {
  describePostgres,
  dropTables,
  freshProducerQueue,
  freshWorkQueue,
  pgClientLayer,
  probePostgres,
  sharedClient,
  uniqueSuffix
} from "./SqlTestSupport.js"
import { sqlSpecifics } from "./SqlSpecifics.js"

const probe = await probePostgres

const suites = () => {
  // a table prefix of its own: parallel test files and runs never collide, and cleanup is exact
  const tablePrefix = `rt_${uniqueSuffix()}_`
  const client = sharedClient(pgClientLayer, dropTables(tablePrefix))
  const bytes = (text: string) => new TextEncoder().encode(text)

  producerQueueConformance("PostgreSQL", freshProducerQueue(client, tablePrefix))
  workQueueConformance("PostgreSQL", freshWorkQueue(client, tablePrefix))

  describe("SQL queues on PostgreSQL", () => {
    sqlSpecifics(client, tablePrefix)

    const buildProducer = (clientLayer: Layer.Layer<SqlClient, unknown>, queueName: string) =>
      Effect.map(
        Layer.build(SqlProducerQueue.layerSql({ queueName, tablePrefix }).pipe(Layer.provide(clientLayer))),
        (context) => Context.get(context, DurableProducerQueue)
      )
    const buildWork = (clientLayer: Layer.Layer<SqlClient, unknown>, queueName: string) =>
      Effect.map(
        Layer.build(SqlWorkQueue.layerWorkSql({ queueName, tablePrefix }).pipe(Layer.provide(clientLayer))),
        (context) => Context.get(context, DurableWorkQueue)
      )

    it.scoped("two independently built producer queues (two pools) on one queue name fence each other", () =>
      Effect.gen(function*() {
        const queueName = `shared-${uniqueSuffix()}`
        const a = yield* buildProducer(client, queueName)
        const b = yield* buildProducer(pgClientLayer(), queueName)
        const { epoch: epochA } = yield* a.load
        yield* a.store(epochA, { messageId: "m1", payload: bytes("one") })
        yield* a.accept(epochA, "m1")
        const { epoch: epochB, state } = yield* b.load
        expect(epochB).toBeGreaterThan(epochA)
        expect(state.unconfirmed.map((entry) => entry.messageId)).toEqual(["m1"])
        expect((yield* Effect.flip(a.store(epochA, { messageId: "m2", payload: bytes("two") })))._tag).toBe("QueueFenced")
        expect((yield* Effect.flip(a.accept(epochA, "m1")))._tag).toBe("QueueFenced")
        expect((yield* b.store(epochB, { messageId: "m1", payload: bytes("x") })).alreadyStored).toBe(true)
        const { epoch: epochA2 } = yield* a.load
        expect((yield* Effect.flip(b.confirm(epochB, 1)))._tag).toBe("QueueFenced")
        yield* a.confirm(epochA2, 1)
        expect((yield* b.load).state.confirmedSeq).toBe(1)
      }))

    it.scoped("two pools racing on one producer queue: every write is either fenced or seen", () =>
      Effect.gen(function*() {
        const queueName = `race-${uniqueSuffix()}`
        const a = yield* buildProducer(client, queueName)
        const b = yield* buildProducer(pgClientLayer(), queueName)
        const { epoch } = yield* a.load
        const ids = Array.from({ length: 30 }, (_, i) => `m${i}`)
        yield* a.storeBatch(epoch, ids.map((id) => ({ messageId: id, payload: bytes(id) })))
        const [accepts, loaded] = yield* Effect.all([
          Effect.all(ids.map((id) => Effect.either(a.accept(epoch, id))), { concurrency: "unbounded" }),
          b.load
        ], { concurrency: "unbounded" })
        const accepted = ids.filter((_, i) => accepts[i]._tag === "Right")
        expect(loaded.state.unconfirmed.map((entry) => entry.messageId)).toEqual(accepted)
      }))

    it.scopedLive("a confirm racing an accept of an entry in its range: the entry ends confirmed, or loaded to be confirmed later", () =>
      Effect.gen(function*() {
        const other = Context.get(yield* Layer.build(pgClientLayer()), PgClient.PgClient)
        const message = (id: string) => ({ messageId: id, payload: bytes(id) })
        for (let round = 0; round < 8; round++) {
          const queueName = `confirm-race-${uniqueSuffix()}`
          const queue = yield* buildProducer(client, queueName)
          // the accept runs on a pool of its own, so it really overlaps the confirm
          const accepting = yield* buildProducer(pgClientLayer(), queueName)
          const { epoch } = yield* queue.load
          const early = Array.from({ length: 300 }, (_, i) => `a${i}`)
          const later = Array.from({ length: 300 }, (_, i) => `b${i}`)
          yield* queue.storeAccepted!(epoch, early.map(message))
          yield* queue.store(epoch, message("held"))
          yield* queue.storeAccepted!(epoch, later.map(message))
          yield* Effect.all([queue.confirm(epoch, 601), Effect.delay(accepting.accept(epoch, "held"), Duration.millis(round))], {
            concurrency: "unbounded"
          })
          const { state } = yield* queue.load
          const rows = yield* other<{ readonly state: number }>`SELECT state FROM ${other(`${tablePrefix}producer_entries`)}
            WHERE queue = ${queueName} AND business_id = 'held'`
          const loaded = state.unconfirmed.map((entry) => entry.messageId)
          expect(loaded.filter((id) => id !== "held")).toEqual([])
          expect(rows[0].state === 2 || loaded.includes("held")).toBe(true)
        }
      }))

    it.scoped("two independently built work queues (two pools) on one queue name fence each other", () =>
      Effect.gen(function*() {
        const queueName = `shared-${uniqueSuffix()}`
        const a = yield* buildWork(client, queueName)
        const b = yield* buildWork(pgClientLayer(), queueName)
        const { epoch: epochA } = yield* a.load
        yield* a.store(epochA, { messageId: "j1", payload: bytes("one") })
        yield* a.accept(epochA, "j1")
        const { epoch: epochB, state } = yield* b.load
        expect(state.pending.map((entry) => entry.messageId)).toEqual(["j1"])
        expect((yield* Effect.flip(a.confirmMessage(epochA, "j1")))._tag).toBe("QueueFenced")
        yield* b.confirmMessage(epochB, "j1")
        expect((yield* a.load).state.pending).toEqual([])
      }))

    it.scopedLive("work queue: a failed attempt is recorded while a store in flight holds the queue row", () =>
      Effect.gen(function*() {
        const queueName = `busy-${uniqueSuffix()}`
        const queue = yield* buildWork(client, queueName)
        const { epoch } = yield* queue.load
        yield* queue.storeAccepted!(epoch, ["a", "b"].map((id) => ({ messageId: id, payload: bytes(id) })))
        // Another session updates the queue row as a store does (moving its cursor) and keeps its
        // transaction open: failures are written beside the stores, so they must not wait for it.
        const other = Context.get(yield* Layer.build(pgClientLayer()), PgClient.PgClient)
        const held = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const queues = other(`${tablePrefix}work_queues`)
        yield* Effect.forkScoped(other.withTransaction(Effect.zipRight(
          Effect.zipRight(other`UPDATE ${queues} SET current_seq = current_seq WHERE name = ${queueName}`, Deferred.succeed(held, undefined)),
          Deferred.await(release)
        )))
        yield* Deferred.await(held)
        const recorded = yield* Effect.either(Effect.timeout(
          queue.recordFailureBatch(epoch, [
            { messageId: "a", attempts: 1, lastError: "boom", notBefore: 1_000 },
            { messageId: "b", attempts: 2, lastError: "boom", notBefore: 2_000 }
          ]),
          Duration.seconds(5)
        ))
        yield* Deferred.succeed(release, undefined)
        expect(recorded._tag).toBe("Right")
        expect((yield* queue.load).state.pending.map((entry) => [entry.messageId, entry.attempts, entry.notBefore]))
          .toEqual([["a", 1, 1_000], ["b", 2, 2_000]])
      }))

    it.scopedLive("a queue's backlog signal keeps working when another queue of the prefix stops listening", () =>
      Effect.gen(function*() {
        const producer = yield* Effect.provide(SqlProducerQueue.makeSql({ queueName: `a-${uniqueSuffix()}`, tablePrefix }), client)
        const work = yield* Effect.provide(SqlWorkQueue.makeWorkSql({ queueName: `b-${uniqueSuffix()}`, tablePrefix }), client)
        const heard = yield* Deferred.make<void>()
        yield* Effect.forkScoped(Effect.zipRight(Stream.runHead(work.backlogSignal!), Deferred.succeed(heard, undefined)))
        // another subscriber on the same channel comes and goes (a controller restarting, say)
        const other = yield* Effect.forkScoped(Stream.runDrain(producer.backlogSignal!))
        yield* Effect.sleep(Duration.millis(300))
        yield* Fiber.interrupt(other)
        for (let round = 0; round < 50 && !(yield* Deferred.isDone(heard)); round++) {
          yield* work.enqueue([{ messageId: `j${round}`, payload: bytes("j") }])
          yield* Effect.sleep(Duration.millis(100))
        }
        expect(yield* Deferred.isDone(heard)).toBe(true)
      }))

    it.scoped("building layers concurrently runs the migrations once, safely", () =>
      Effect.gen(function*() {
        const prefix = `rt_${uniqueSuffix()}_`
        yield* Effect.all(
          Array.from({ length: 4 }, (_, i) =>
            Layer.build(SqlWorkQueue.layerWorkSql({ queueName: `m${i}`, tablePrefix: prefix }).pipe(
              Layer.provide(pgClientLayer())
            ))),
          { concurrency: "unbounded" }
        )
        yield* Effect.provide(dropTables(prefix), client)
      }))
  })
}

describePostgres(probe, "durable queues on PostgreSQL (conformance and SQL specifics)", suites)
