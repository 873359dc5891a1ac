/**
 * Durable point-to-point flows on SQLite (a temp file) and PostgreSQL: `send` one message at a
 * time (a store and an accept transaction per message) and the batched path (`sendAll`: one
 * storeBatch and one acceptBatch per batch of up to half the window).
 */
import { PgClient } from "@effect/sql-pg"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { SqlClient } from "@effect/sql/SqlClient"
import { Deferred, Duration, Effect, Layer, Redacted, Schema } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Consumer from "../src/Consumer.js"
import * as SqlProducerQueue from "../src/DurableQueue/SqlProducerQueue.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { dropTables } from "./pgTables.js"
import { measure } from "./Row.js"

const Order = Schema.Struct({ orderId: Schema.Number, customer: Schema.String })

const flow = (messages: number, window: number, batch: number, tablePrefix: string) =>
  Effect.gen(function*() {
    const queue = yield* SqlProducerQueue.makeSql({ queueName: "bench", tablePrefix })
    const producer = yield* Producer.make({ name: "bench-out", consumer: "bench-in", payload: Order, durableQueue: queue })
    const consumer = yield* Consumer.make({ name: "bench-in", producer: "bench-out", payload: Order, window })
    const done = yield* Deferred.make<void>()
    let received = 0
    yield* Effect.forkScoped(consumer.run(() =>
      Effect.sync(() => {
        if (++received === messages) Deferred.unsafeDone(done, Effect.void)
      })
    ))
    const payload = (orderId: number) => ({ orderId, customer: "c-42" })
    if (batch === 1) {
      for (let orderId = 0; orderId < messages; orderId++) yield* producer.send(payload(orderId))
    } else {
      for (let first = 0; first < messages; first += batch) {
        const count = Math.min(batch, messages - first)
        yield* producer.sendAll(Array.from({ length: count }, (_, index) => ({ payload: payload(first + index) })))
      }
    }
    yield* Deferred.await(done)
  }).pipe(Effect.scoped)

const system = ReliableSystem.layer().pipe(Layer.provide(MemoryTransport.layerMemory))

const sqlite = <A, E>(effect: Effect.Effect<A, E, SqlClient | ReliableSystem.ReliableSystem>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), "effect-reliable-bench-"))),
    (directory) => Effect.provide(effect, Layer.merge(system, SqliteClient.layer({ filename: join(directory, "queue.sqlite") }))),
    (directory) => Effect.sync(() => rmSync(directory, { recursive: true, force: true }))
  )

const pgUrl = process.env.RELIABLE_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"

const postgres = <A, E>(effect: (prefix: string) => Effect.Effect<A, E, SqlClient | ReliableSystem.ReliableSystem>) => {
  const prefix = `bench_${Date.now().toString(36)}_`
  return Effect.ensuring(effect(prefix), dropTables(prefix)).pipe(
    Effect.provide(Layer.merge(system, PgClient.layer({ url: Redacted.make(pgUrl), connectTimeout: Duration.seconds(5) })))
  )
}

const label = (backend: string, messages: number, batched: boolean, window: number) =>
  `durable ${backend} ${batched ? "sendAll batches" : "send one at a time"}, window ${window}, ${messages.toLocaleString("en")} msgs`

export const sqliteSend = (messages: number) =>
  sqlite(measure(label("SQLite", messages, false, 50), messages, flow(messages, 50, 1, "reliable_")))

export const sqliteSendAll = (messages: number) =>
  sqlite(measure(label("SQLite", messages, true, 1000), messages, flow(messages, 1000, 1000, "reliable_")))

export const postgresSend = (messages: number) =>
  postgres((prefix) => measure(label("PostgreSQL", messages, false, 50), messages, flow(messages, 50, 1, prefix)))

export const postgresSendAll = (messages: number) =>
  postgres((prefix) => measure(label("PostgreSQL", messages, true, 1000), messages, flow(messages, 1000, 1000, prefix)))
