/**
 * A durable flow heals from backend trouble by itself, on the TestClock: a queue call that never
 * answers times out and is retried like a refused connection; a reload that keeps failing is
 * retried under the capped backoff; a store the queue refuses for its content fails its sender
 * only, restarts nothing and leaves other senders going.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Fiber, Layer, Queue, Schema } from "effect"
import * as Consumer from "../src/Consumer.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import { QueueBackendError, QueueRejected } from "../src/DurableQueue/QueueErrors.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { advanceBy, advanceUntil } from "./support/Harness.js"
import { spy } from "./support/QueueSpy.js"

const Order = Schema.Struct({ id: Schema.Number })
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

const flow = (options: { readonly fused?: boolean } = {}) =>
  Effect.gen(function*() {
    const watched = spy(yield* MemoryProducerQueue.makeMemory, options)
    const failures = yield* ReliableSystem.subscribeFailures
    const health = yield* ReliableSystem.subscribeHealth
    const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: watched.queue })
    const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order, resendInterval: "200 millis" })
    const seen: Array<number> = []
    yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.id))))
    const loads = () => watched.calls.filter((call) => call.operation === "load").length
    const events = Effect.map(Queue.takeAll(health), (chunk) => Chunk.toReadonlyArray(chunk).map((event) => event._tag))
    return { watched, failures, events, producer, seen, loads }
  })

describe("healing", () => {
  it.scoped("a store that never answers times out, is retried, and the flow resumes when the queue answers again", () =>
    Effect.gen(function*() {
      const { events, failures, loads, producer, seen, watched } = yield* flow({ fused: true })
      yield* producer.send({ id: 1 })
      yield* advanceUntil(() => seen.length === 1, 50, 5_000)
      watched.delay("storeAccepted", 3_600_000)
      watched.delay("load", 3_600_000)
      const pending = yield* Effect.fork(producer.send({ id: 2 }))
      // Three attempts of 5 s each (the default timeout), then a restart and reloads that hang too.
      yield* advanceUntil(() => loads() === 3, 500, 60_000)
      expect((yield* producer.stats).degraded).toBe(true)
      watched.delay("storeAccepted", 0)
      watched.delay("load", 0)
      yield* advanceUntil(() => seen.includes(2), 100, 30_000)
      expect((yield* Fiber.join(pending)).messageId).toBeDefined()
      expect(yield* events).toEqual(["ReliableDegraded", "ReliableRecovered"])
      expect(yield* Queue.size(failures)).toBe(0)
    }).pipe(Effect.provide(system())))

  it.scoped("a call that times out makes the endpoint degraded at once, not only after its retries", () =>
    Effect.gen(function*() {
      const { events, producer, seen, watched } = yield* flow({ fused: true })
      yield* producer.send({ id: 1 })
      yield* advanceUntil(() => seen.length === 1, 50, 5_000)
      watched.delay("storeAccepted", 3_600_000)
      yield* Effect.fork(producer.send({ id: 2 }))
      // One timeout (5 s), far from the three attempts (15 s) after which the controller restarts.
      yield* advanceBy(5_500, 100)
      expect((yield* producer.stats).degraded).toBe(true)
      expect(yield* events).toEqual(["ReliableDegraded"])
      watched.delay("storeAccepted", 0)
      yield* advanceUntil(() => seen.includes(2), 100, 30_000)
      expect(yield* events).toEqual(["ReliableRecovered"])
    }).pipe(Effect.provide(system())))

  it.scoped("a reload that keeps failing is retried with a capped backoff: about one second apart at most", () =>
    Effect.gen(function*() {
      const { events, loads, producer, seen, watched } = yield* flow()
      yield* producer.send({ id: 1 })
      yield* advanceUntil(() => seen.length === 1, 50, 5_000)
      watched.failNext("accept", new QueueBackendError({ operation: "accept", cause: "down" }), 3)
      watched.failNext("load", new QueueBackendError({ operation: "load", cause: "down" }), 1_000)
      yield* Effect.fork(producer.send({ id: 2 }))
      yield* advanceUntil(() => loads() >= 3, 50, 10_000)
      // Sixty seconds of outage: the attempts are never more than a second apart.
      const before = loads()
      yield* advanceBy(60_000, 100)
      const during = loads() - before
      expect(during).toBeGreaterThanOrEqual(55)
      expect(during).toBeLessThanOrEqual(70)
      watched.failNext("load", new QueueBackendError({ operation: "load", cause: "down" }), 0)
      yield* advanceUntil(() => seen.includes(2), 50, 3_000)
      expect(yield* events).toEqual(["ReliableDegraded", "ReliableRecovered"])
    }).pipe(Effect.provide(system())))

  it.scoped("a message the queue refuses fails its own send only: nothing restarts, other senders go on", () =>
    Effect.gen(function*() {
      const { events, failures, loads, producer, seen, watched } = yield* flow({ fused: true })
      yield* producer.send({ id: 1 })
      yield* advanceUntil(() => seen.length === 1, 50, 5_000)
      watched.failNext("storeAccepted", new QueueRejected({ operation: "storeAccepted", cause: "value too long" }))
      const refused = yield* Effect.exit(producer.send({ id: 2 }, { messageId: "refused" }))
      expect(Exit.isFailure(refused) && JSON.stringify(refused.cause)).toContain("MessageRejected")
      yield* producer.send({ id: 3 })
      yield* advanceUntil(() => seen.length === 2, 50, 5_000)
      expect(seen).toEqual([1, 3])
      expect(loads()).toBe(1)
      expect(yield* events).toEqual([])
      expect(yield* Queue.size(failures)).toBe(0)
    }).pipe(Effect.provide(system())))
})
