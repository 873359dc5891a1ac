/**
 * Group commit on a durable producer: senders that wait together go to the queue in one
 * store-and-accept, each resolving with its own `Stored`, with answers identical to sending one
 * by one (including first-write-wins for a repeated id), and the flow delivers them in order.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Schema } from "effect"
import * as Consumer from "../src/Consumer.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { advanceUntil } from "./support/Harness.js"
import { spy } from "./support/QueueSpy.js"

const Order = Schema.Struct({ id: Schema.Number })
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

describe("group commit", () => {
  it.scoped("200 concurrent senders on a durable producer share store-and-accept steps, each answered in arrival order", () =>
    Effect.gen(function*() {
      const watched = spy(yield* MemoryProducerQueue.makeMemory, { fused: true })
      watched.delay("storeAccepted", 5)
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: watched.queue })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order, window: 1000 })
      const seen: Array<number> = []
      yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.id))))
      yield* advanceUntil(() => watched.calls.some((call) => call.operation === "load"), 10, 1_000)
      const fibers = yield* Effect.forEach(Array.from({ length: 200 }, (_, id) => id), (id) =>
        Effect.fork(producer.send({ id }, { messageId: `order-${id}` })))
      yield* advanceUntil(() => seen.length === 200, 5, 10_000)
      const stored = yield* Effect.forEach(fibers, Fiber.join)
      expect(stored.map((answer) => answer.messageId)).toEqual(fibers.map((_, id) => `order-${id}`))
      expect(stored.map((answer) => answer.seq)).toEqual(fibers.map((_, id) => id + 1))
      expect(seen).toEqual(fibers.map((_, id) => id))
      const steps = watched.calls.filter((call) => call.operation === "storeAccepted")
      expect(steps.length).toBeLessThanOrEqual(3)
      expect((steps.at(-1)!.argument as ReadonlyArray<string>).length).toBeGreaterThan(100)
    }).pipe(Effect.provide(system())))

  it.scoped("a repeated id among waiting senders answers as one by one would: the first write wins", () =>
    Effect.gen(function*() {
      const watched = spy(yield* MemoryProducerQueue.makeMemory, { fused: true })
      watched.delay("storeAccepted", 5)
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: watched.queue })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order, window: 1000 })
      const seen: Array<number> = []
      yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.id))))
      yield* advanceUntil(() => watched.calls.some((call) => call.operation === "load"), 10, 1_000)
      const first = yield* Effect.fork(producer.send({ id: 0 }, { messageId: "warm-up" }))
      const fibers = yield* Effect.forEach([1, 2, 3], (id) => Effect.fork(producer.send({ id }, { messageId: id === 3 ? "dup" : id === 1 ? "dup" : "other" })))
      yield* advanceUntil(() => seen.length === 3, 5, 10_000)
      yield* Fiber.join(first)
      const [a, b, c] = yield* Effect.forEach(fibers, Fiber.join)
      expect(a).toMatchObject({ messageId: "dup", seq: 2, alreadyStored: false })
      expect(b).toMatchObject({ messageId: "other", seq: 3, alreadyStored: false })
      expect(c).toMatchObject({ messageId: "dup", seq: 2, alreadyStored: true })
      expect(seen).toEqual([0, 1, 2])
    }).pipe(Effect.provide(system())))
})
