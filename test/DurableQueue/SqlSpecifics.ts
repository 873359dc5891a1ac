/**
 * What the SQL queues do beyond the conformance suites, on either dialect: backlog rows whose ids
 * got stored meanwhile are swept, and inspection reads beside a writer at full speed without
 * failing or fencing it.
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { Layer } from "effect"
import type { QueueEpoch, QueueOperatorService, StoreRequest } from "../../src/DurableQueue/DurableProducerQueue.js"
import * as SqlProducerQueue from "../../src/DurableQueue/SqlProducerQueue.js"
import * as SqlWorkQueue from "../../src/DurableQueue/SqlWorkQueue.js"
import { uniqueSuffix } from "./SqlTestSupport.js"

const bytes = (text: string) => new TextEncoder().encode(text)

/** What the tests need of either kind. */
interface Subject extends QueueOperatorService {
  readonly epoch: Effect.Effect<QueueEpoch, unknown>
  readonly storeAccepted: (epoch: QueueEpoch, requests: ReadonlyArray<StoreRequest>) => Effect.Effect<unknown, unknown>
  /** Confirms the messages just stored: up to their last seq, or by id. */
  readonly confirm: (epoch: QueueEpoch, upToSeq: number, messageIds: ReadonlyArray<string>) => Effect.Effect<void, unknown>
}

const kinds: ReadonlyArray<{ readonly name: string; readonly make: (queueName: string, tablePrefix: string) => Effect.Effect<Subject, unknown, SqlClient> }> = [
  {
    name: "producer queue",
    make: (queueName, tablePrefix) =>
      Effect.map(SqlProducerQueue.makeSql({ queueName, tablePrefix }), (queue) => ({
        ...queue,
        epoch: Effect.map(queue.load, (loaded) => loaded.epoch),
        storeAccepted: queue.storeAccepted!,
        confirm: (epoch, upToSeq) => queue.confirm(epoch, upToSeq)
      }))
  },
  {
    name: "work queue",
    make: (queueName, tablePrefix) =>
      Effect.map(SqlWorkQueue.makeWorkSql({ queueName, tablePrefix }), (queue) => ({
        ...queue,
        epoch: Effect.map(queue.load, (loaded) => loaded.epoch),
        storeAccepted: queue.storeAccepted!,
        confirm: (epoch, _upToSeq, messageIds) => queue.confirmBatch(epoch, messageIds)
      }))
  }
]

export const sqlSpecifics = (client: Layer.Layer<SqlClient>, tablePrefix: string): void => {
  for (const kind of kinds) {
    it.scoped(`${kind.name}: a backlog row whose id a plain store took is swept by the next store from the backlog`, () =>
      Effect.gen(function*() {
        const queue = yield* kind.make(`sweep-${uniqueSuffix()}`, tablePrefix)
        yield* queue.enqueue(["x", "y", "z"].map((id) => ({ messageId: id, payload: bytes(id) })))
        const epoch = yield* queue.epoch
        yield* queue.storeAccepted(epoch, [{ messageId: "x", payload: bytes("sent") }])
        expect((yield* queue.backlog(10)).map((entry) => entry.messageId)).toEqual(["y", "z"])
        expect((yield* queue.inspect({ limit: 0 })).backlog).toBe(3)
        yield* queue.storeAccepted(epoch, [{ messageId: "y", payload: bytes("y"), fromBacklog: true }])
        expect((yield* queue.inspect({ limit: 0 })).backlog).toBe(1)
        expect((yield* queue.backlog(10)).map((entry) => entry.messageId)).toEqual(["z"])
      }).pipe(Effect.provide(client)))

    it.scoped(`${kind.name}: inspection beside a writer at full speed neither fails nor fences it`, () =>
      Effect.gen(function*() {
        const queue = yield* kind.make(`inspect-${uniqueSuffix()}`, tablePrefix)
        const epoch = yield* queue.epoch
        let written = 0
        const writer = Effect.gen(function*() {
          for (let round = 0; round < 150; round++) {
            const ids = Array.from({ length: 10 }, (_, i) => `m${round}-${i}`)
            yield* queue.storeAccepted(epoch, ids.map((id) => ({ messageId: id, payload: bytes(id), at: round })))
            written += ids.length
            yield* queue.confirm(epoch, written, ids)
            // SQLite answers without yielding: let the inspector in
            yield* Effect.yieldNow()
          }
        })
        let inspections = 0
        const inspector = Effect.gen(function*() {
          while (written < 1_500) {
            const inspection = yield* queue.inspect({ limit: 50, states: ["Accepted", "Confirmed"] })
            expect(inspection.unconfirmed).toBeLessThanOrEqual(10)
            yield* queue.deadLetters({ limit: 10 })
            yield* queue.backlog(10)
            inspections += 1
            yield* Effect.yieldNow()
          }
        })
        yield* Effect.all([writer, inspector], { concurrency: "unbounded" })
        expect(inspections).toBeGreaterThan(0)
        // the writer's epoch still holds, and everything it wrote is confirmed
        yield* queue.storeAccepted(epoch, [{ messageId: "last", payload: bytes("l") }])
        const inspection = yield* queue.inspect({ limit: 0 })
        expect([inspection.unconfirmed, inspection.stored]).toEqual([1, 0])
      }).pipe(Effect.provide(client)))
  }
}
