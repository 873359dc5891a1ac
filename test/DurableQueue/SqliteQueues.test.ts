import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DurableProducerQueue } from "../../src/DurableQueue/DurableProducerQueue.js"
import { DurableWorkQueue } from "../../src/DurableQueue/DurableWorkQueue.js"
import { producerQueueConformance } from "../../src/DurableQueue/ProducerQueueConformance.js"
import * as SqlProducerQueue from "../../src/DurableQueue/SqlProducerQueue.js"
import * as SqlWorkQueue from "../../src/DurableQueue/SqlWorkQueue.js"
import { workQueueConformance } from "../../src/DurableQueue/WorkQueueConformance.js"
import { sqlSpecifics } from "./SqlSpecifics.js"
import { freshProducerQueue, freshWorkQueue, sharedClient, uniqueSuffix } from "./SqlTestSupport.js"

const filename = join(tmpdir(), `effect-reliable-${uniqueSuffix()}.db`)
const tablePrefix = "reliable_"
const client = sharedClient(() => SqliteClient.layer({ filename }), Effect.sync(() => {
  for (const suffix of ["", "-wal", "-shm"]) rmSync(`${filename}${suffix}`, { force: true })
}))

producerQueueConformance("SQLite", freshProducerQueue(client, tablePrefix))
workQueueConformance("SQLite", freshWorkQueue(client, tablePrefix))

describe("SQL queues on SQLite", () => {
  sqlSpecifics(client, tablePrefix)

  // a second, independent client on the same file: what a second process would have
  const otherClient = () => SqliteClient.layer({ filename })
  const bytes = (text: string) => new TextEncoder().encode(text)

  it.scoped("two independently built producer queues on one queue name fence each other", () =>
    Effect.gen(function*() {
      const options = { queueName: `shared-${uniqueSuffix()}`, tablePrefix }
      const build = (clientLayer: Layer.Layer<any, unknown>) =>
        Effect.map(
          Layer.build(SqlProducerQueue.layerSql(options).pipe(Layer.provide(clientLayer))),
          (context) => Context.get(context, DurableProducerQueue)
        )
      const a = yield* build(client)
      const b = yield* build(otherClient())
      const { epoch: epochA } = yield* a.load
      yield* a.store(epochA, { messageId: "m1", payload: bytes("one") })
      yield* a.accept(epochA, "m1")
      const { epoch: epochB, state } = yield* b.load
      expect(epochB).toBeGreaterThan(epochA)
      expect(state.unconfirmed.map((entry) => entry.messageId)).toEqual(["m1"])
      expect((yield* Effect.flip(a.store(epochA, { messageId: "m2", payload: bytes("two") })))._tag).toBe("QueueFenced")
      expect((yield* b.store(epochB, { messageId: "m1", payload: bytes("x") })).alreadyStored).toBe(true)
      const { epoch: epochA2 } = yield* a.load
      expect((yield* Effect.flip(b.confirm(epochB, 1)))._tag).toBe("QueueFenced")
      yield* a.confirm(epochA2, 1)
      expect((yield* b.load).state.confirmedSeq).toBe(1)
    }))

  it.scoped("two independently built work queues on one queue name fence each other", () =>
    Effect.gen(function*() {
      const options = { queueName: `shared-${uniqueSuffix()}`, tablePrefix }
      const build = (clientLayer: Layer.Layer<any, unknown>) =>
        Effect.map(
          Layer.build(SqlWorkQueue.layerWorkSql(options).pipe(Layer.provide(clientLayer))),
          (context) => Context.get(context, DurableWorkQueue)
        )
      const a = yield* build(client)
      const b = yield* build(otherClient())
      const { epoch: epochA } = yield* a.load
      yield* a.store(epochA, { messageId: "j1", payload: bytes("one") })
      yield* a.accept(epochA, "j1")
      const { epoch: epochB, state } = yield* b.load
      expect(state.pending.map((entry) => entry.messageId)).toEqual(["j1"])
      expect((yield* Effect.flip(a.confirmMessage(epochA, "j1")))._tag).toBe("QueueFenced")
      yield* b.confirmMessage(epochB, "j1")
      expect((yield* a.load).state.pending).toEqual([])
    }))

  it.scoped("queues with different table prefixes share a database file independently", () =>
    Effect.gen(function*() {
      const queueName = `same-${uniqueSuffix()}`
      const build = (prefix: string) =>
        Effect.map(
          Layer.build(SqlProducerQueue.layerSql({ queueName, tablePrefix: prefix }).pipe(Layer.provide(client))),
          (context) => Context.get(context, DurableProducerQueue)
        )
      const a = yield* build("alpha_")
      const b = yield* build("beta_")
      const { epoch } = yield* a.load
      yield* a.store(epoch, { messageId: "m", payload: bytes("m") })
      expect((yield* b.load).state.currentSeq).toBe(0)
      expect((yield* a.load).state.currentSeq).toBe(1)
    }))

  it.effect("an invalid table prefix fails the layer with a config error naming the option", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Effect.scoped(Layer.build(SqlProducerQueue.layerSql({ queueName: "q", tablePrefix: "bad-prefix;" }).pipe(
          Layer.provide(client)
        )))
      )
      expect(error).toMatchObject({ _tag: "ReliableConfigError", option: "tablePrefix" })
    }))
})
