/**
 * The operator functions of `DurableQueue` (dead letters, inspection with a Schema, typed errors
 * for bad options) and the Config layers of the SQL queues.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Config, ConfigProvider, Context, Effect, Either, Layer, Schema } from "effect"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { InspectOptions } from "../../src/DurableQueue/DurableProducerQueue.js"
import { DurableProducerQueue } from "../../src/DurableQueue/DurableProducerQueue.js"
import { DurableWorkQueue } from "../../src/DurableQueue/DurableWorkQueue.js"
import * as MemoryProducerQueue from "../../src/DurableQueue/MemoryProducerQueue.js"
import * as Operators from "../../src/DurableQueue/Operators.js"
import * as SqlProducerQueue from "../../src/DurableQueue/SqlProducerQueue.js"
import * as SqlWorkQueue from "../../src/DurableQueue/SqlWorkQueue.js"
import * as Writer from "../../src/DurableQueue/Writer.js"
import { sharedClient, uniqueSuffix } from "./SqlTestSupport.js"

const Order = Schema.Struct({ orderId: Schema.Number })

/** A memory queue with orders 1 (confirmed), 2 (dead-lettered), 3 (accepted) and 4 (in the backlog), plus bytes no Schema reads. */
const populated = Effect.gen(function*() {
  const queue = yield* MemoryProducerQueue.makeMemory
  const writer = yield* Writer.writerMemory(queue, Order)
  yield* writer.enqueueAll([1, 2, 3].map((orderId) => ({ payload: { orderId }, messageId: `o${orderId}` })))
  const { epoch } = yield* queue.load
  const backlog = yield* queue.backlog(10)
  yield* queue.storeAccepted!(epoch, backlog.map((entry) => ({ ...entry, fromBacklog: true })))
  yield* queue.confirm(epoch, 1)
  yield* queue.deadLetter(epoch, { messageId: "o2", attempts: 5, lastError: "boom", at: 42 })
  yield* writer.enqueue({ orderId: 4 }, { messageId: "o4" })
  yield* queue.enqueue([{ messageId: "junk", payload: new TextEncoder().encode("not json") }])
  return queue
})

describe("DurableQueue operators", () => {
  it.effect("list, requeue and discard dead letters", () =>
    Effect.gen(function*() {
      const queue = yield* populated
      const letters = yield* Operators.deadLetters(queue, { limit: 10 })
      expect(letters.map((letter) => [letter.messageId, letter.attempts, letter.lastError])).toEqual([["o2", 5, "boom"]])
      expect(yield* Operators.requeueDeadLetter(queue, "o2")).toBe(true)
      expect((yield* queue.backlog(10)).map((entry) => entry.messageId)).toEqual(["o4", "junk", "o2"])
      expect(yield* Operators.discardDeadLetter(queue, "o2")).toBe(false)
    }))

  it.effect("inspect with a Schema decodes each payload, or says why it cannot", () =>
    Effect.gen(function*() {
      const queue = yield* populated
      const inspection = yield* Operators.inspect(queue, { limit: 10 }, Order)
      expect([inspection.backlog, inspection.unconfirmed, inspection.deadLettered]).toEqual([2, 1, 1])
      const values = inspection.entries.map((entry) => [
        entry.messageId,
        entry.state,
        Either.isRight(entry.value) ? entry.value.right.orderId : entry.value.left._tag
      ])
      expect(values).toEqual([
        ["o1", "Confirmed", "PayloadDecodeError"],
        ["o2", "DeadLettered", 2],
        ["o3", "Accepted", 3],
        ["o4", "Backlog", 4],
        ["junk", "Backlog", "PayloadDecodeError"]
      ])
      const plain = yield* Operators.inspect(queue, { limit: 1, states: ["Accepted"] })
      expect(plain.entries.map((entry) => [entry.messageId, "value" in entry])).toEqual([["o3", false]])
    }))

  it.effect("bad options are ReliableConfigError naming the option, before the queue is asked", () =>
    Effect.gen(function*() {
      const queue = yield* populated
      const option = (effect: Effect.Effect<unknown, { readonly _tag: string }>) =>
        Effect.map(Effect.flip(effect), (error) => [error._tag, "option" in error ? error.option : undefined])
      const inspect = (options: unknown) => option(Operators.inspect(queue, options as InspectOptions))
      expect(yield* inspect({ limit: -1 })).toEqual(["ReliableConfigError", "limit"])
      expect(yield* inspect({ limit: 1.5 })).toEqual(["ReliableConfigError", "limit"])
      expect(yield* inspect({ limit: Number.NaN })).toEqual(["ReliableConfigError", "limit"])
      expect(yield* inspect({ limit: 1, afterSeq: -2 })).toEqual(["ReliableConfigError", "afterSeq"])
      expect(yield* inspect({ limit: 1, states: ["Pending"] })).toEqual(["ReliableConfigError", "states"])
      expect(yield* inspect({ limit: 1, state: ["Accepted"] })).toEqual(["ReliableConfigError", "state"])
      expect(yield* option(Operators.deadLetters(queue, { limit: 0 }))).toEqual(["ReliableConfigError", "limit"])
      expect(yield* option(Operators.inspect(queue, { limit: 1 }, "Order" as unknown as typeof Order))).toEqual(["ReliableConfigError", "schema"])
    }))
})

describe("SQL queue Config layers", () => {
  const filename = join(tmpdir(), `effect-reliable-config-${uniqueSuffix()}.db`)
  const client = sharedClient(() => SqliteClient.layer({ filename }), Effect.sync(() => {
    for (const suffix of ["", "-wal", "-shm"]) rmSync(`${filename}${suffix}`, { force: true })
  }))
  const config = { queueName: Config.string("QUEUE_NAME"), tablePrefix: Config.string("TABLE_PREFIX") }
  const withEnvironment = (entries: Record<string, string>) =>
    Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(entries))))

  it.scoped("read the queue name and table prefix from Config", () =>
    Effect.gen(function*() {
      const environment = withEnvironment({ QUEUE_NAME: "from-env", TABLE_PREFIX: "cfg_" })
      const producer = Context.get(
        yield* Layer.build(SqlProducerQueue.layerSqlConfig(config).pipe(Layer.provide(Layer.merge(client, environment)))),
        DurableProducerQueue
      )
      const work = Context.get(
        yield* Layer.build(SqlWorkQueue.layerWorkSqlConfig(config).pipe(Layer.provide(Layer.merge(client, environment)))),
        DurableWorkQueue
      )
      yield* producer.enqueue([{ messageId: "m", payload: new Uint8Array([1]) }])
      yield* work.enqueue([{ messageId: "j", payload: new Uint8Array([2]) }])
      // the same queue as one built with those options directly
      const direct = yield* Effect.provide(SqlProducerQueue.makeSql({ queueName: "from-env", tablePrefix: "cfg_" }), client)
      expect((yield* direct.backlog(10)).map((entry) => entry.messageId)).toEqual(["m"])
    }))

  it.scoped("a value Config lacks is ConfigError; one the queue refuses is ReliableConfigError", () =>
    Effect.gen(function*() {
      const build = (entries: Record<string, string>) =>
        Effect.flip(Layer.build(SqlProducerQueue.layerSqlConfig(config).pipe(Layer.provide(Layer.merge(client, withEnvironment(entries))))))
      expect((yield* build({ QUEUE_NAME: "q" }))._tag).toBe("ConfigError")
      expect(yield* build({ QUEUE_NAME: "q", TABLE_PREFIX: "bad-prefix" })).toMatchObject({ _tag: "ReliableConfigError", option: "tablePrefix" })
    }))
})
