/**
 * The everyday durable path (`send`, `sendAll`) stores and accepts in one durable step: the
 * queue's `storeAccepted` when it has one (one transaction per batch), a store then an accept
 * when it has not; a lost answer of `storeAccepted` is retried without losing the message.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Schema } from "effect"
import type { DurableProducerQueueService, StoreRequest } from "../src/DurableQueue/DurableProducerQueue.js"
import type { DurableWorkQueueService } from "../src/DurableQueue/DurableWorkQueue.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import * as MemoryWorkQueue from "../src/DurableQueue/MemoryWorkQueue.js"
import { QueueBackendError } from "../src/DurableQueue/QueueErrors.js"
import * as Consumer from "../src/Consumer.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { advanceUntil } from "./support/Harness.js"

const Order = Schema.Struct({ id: Schema.Number })
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

/** Records the writing calls; `loseNext` makes the next storeAccepted commit and then report failure. */
const recorder = () => {
  const calls: Array<string> = []
  let lose = 0
  const note = <A, E>(name: string, effect: Effect.Effect<A, E>): Effect.Effect<A, E | QueueBackendError> =>
    Effect.suspend(() => {
      calls.push(name)
      if (name !== "storeAccepted" || lose === 0) return effect
      lose--
      return Effect.zipRight(effect, Effect.fail(new QueueBackendError({ operation: name, cause: "answer lost" })))
    })
  return { calls, note, loseNext: () => void lose++ }
}

/** The producer queue, watched; `fused: false` hides its storeAccepted. */
const watchedProducerQueue = (inner: DurableProducerQueueService, fused: boolean) => {
  const { calls, loseNext, note } = recorder()
  const { storeAccepted, ...operations } = inner
  const queue: DurableProducerQueueService = {
    ...operations,
    load: inner.load,
    store: (epoch, request) => note("store", inner.store(epoch, request)),
    storeChunked: inner.storeChunked,
    storeBatch: (epoch, requests) => note("storeBatch", inner.storeBatch(epoch, requests)),
    accept: (epoch, messageId) => note("accept", inner.accept(epoch, messageId)),
    acceptBatch: (epoch, messageIds) => note("acceptBatch", inner.acceptBatch(epoch, messageIds)),
    confirm: inner.confirm,
    ...(fused && storeAccepted !== undefined
      ? { storeAccepted: (epoch: number, requests: ReadonlyArray<StoreRequest>) => note("storeAccepted", storeAccepted(epoch, requests)) }
      : {})
  }
  return { queue, calls, loseNext }
}

const watchedWorkQueue = (inner: DurableWorkQueueService) => {
  const { calls, loseNext, note } = recorder()
  const storeAccepted = inner.storeAccepted!
  const queue: DurableWorkQueueService = {
    ...inner,
    store: (epoch, request) => note("store", inner.store(epoch, request)),
    storeBatch: (epoch, requests) => note("storeBatch", inner.storeBatch(epoch, requests)),
    accept: (epoch, messageId) => note("accept", inner.accept(epoch, messageId)),
    acceptBatch: (epoch, messageIds) => note("acceptBatch", inner.acceptBatch(epoch, messageIds)),
    storeAccepted: (epoch, requests) => note("storeAccepted", storeAccepted(epoch, requests))
  }
  return { queue, calls, loseNext }
}

const pointToPoint = (queue: DurableProducerQueueService, messages: number) =>
  Effect.gen(function*() {
    const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue, retryInterval: "100 millis" })
    const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order, window: 20 })
    const seen: Array<number> = []
    yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.id))))
    return { producer, seen, all: Array.from({ length: messages }, (_, id) => id) }
  })

describe("durable store-and-accept on the everyday path", () => {
  it.scoped("send: one storeAccepted per message, no separate store or accept", () =>
    Effect.gen(function*() {
      const { calls, queue } = watchedProducerQueue(yield* MemoryProducerQueue.makeMemory, true)
      const { all, producer, seen } = yield* pointToPoint(queue, 5)
      for (const id of all) yield* producer.send({ id })
      yield* advanceUntil(() => seen.length === all.length, 50, 5_000)
      expect(seen).toEqual(all)
      expect(calls).toEqual(all.map(() => "storeAccepted"))
      // every message is accepted: a reload returns the unconfirmed ones
      const { state } = yield* queue.load
      expect(state.currentSeq).toBe(5)
    }).pipe(Effect.provide(system())))

  it.scoped("sendAll: one storeAccepted per batch", () =>
    Effect.gen(function*() {
      const { calls, queue } = watchedProducerQueue(yield* MemoryProducerQueue.makeMemory, true)
      const { all, producer, seen } = yield* pointToPoint(queue, 10)
      yield* producer.sendAll(all.map((id) => ({ payload: { id } })))
      yield* advanceUntil(() => seen.length === all.length, 50, 5_000)
      expect(seen).toEqual(all)
      expect(calls.every((call) => call === "storeAccepted")).toBe(true)
      expect(calls.length).toBeLessThan(all.length)
    }).pipe(Effect.provide(system())))

  it.scoped("a queue without storeAccepted gets a store, then an accept", () =>
    Effect.gen(function*() {
      const { calls, queue } = watchedProducerQueue(yield* MemoryProducerQueue.makeMemory, false)
      const { all, producer, seen } = yield* pointToPoint(queue, 3)
      for (const id of all) yield* producer.send({ id })
      yield* advanceUntil(() => seen.length === all.length, 50, 5_000)
      expect(seen).toEqual(all)
      expect(calls).toEqual(["store", "accept", "store", "accept", "store", "accept"])
    }).pipe(Effect.provide(system())))

  it.scoped("a storeAccepted that committed but lost its answer is retried, and the message still goes out", () =>
    Effect.gen(function*() {
      const { calls, loseNext, queue } = watchedProducerQueue(yield* MemoryProducerQueue.makeMemory, true)
      const { producer, seen } = yield* pointToPoint(queue, 2)
      yield* producer.send({ id: 0 })
      loseNext()
      // the retry waits out the queue retry interval on the test clock
      const sending = yield* Effect.fork(producer.send({ id: 1 }))
      yield* advanceUntil(() => seen.length === 2, 50, 5_000)
      const stored = yield* Fiber.join(sending)
      expect(seen).toEqual([0, 1])
      // the retry found its own first attempt: already stored and accepted, yet emitted once
      expect(calls).toEqual(["storeAccepted", "storeAccepted", "storeAccepted"])
      expect(stored).toMatchObject({ seq: 2, alreadyStored: true })
    }).pipe(Effect.provide(system())))

  it.scoped("work-pulling: one storeAccepted per batch, and a lost answer loses no job", () =>
    Effect.gen(function*() {
      const { calls, loseNext, queue } = watchedWorkQueue(yield* MemoryWorkQueue.makeWorkMemory)
      const producer = yield* WorkPulling.producer({ name: "d", payload: Order, durableWorkQueue: queue, retryInterval: "100 millis" })
      const worker = yield* WorkPulling.worker({ name: "w", producer: "d", payload: Order, window: 20 })
      const done: Array<number> = []
      yield* Effect.forkScoped(worker.run((delivery) => Effect.sync(() => void done.push(delivery.payload.id))))
      yield* producer.sendAll([0, 1, 2].map((id) => ({ payload: { id } })))
      loseNext()
      yield* Effect.fork(producer.sendAll([3, 4].map((id) => ({ payload: { id } }))))
      yield* advanceUntil(() => done.length === 5, 50, 5_000)
      expect([...done].sort()).toEqual([0, 1, 2, 3, 4])
      expect(calls.filter((call) => call !== "storeAccepted")).toEqual([])
    }).pipe(Effect.provide(system())))
})
