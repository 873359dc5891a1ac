/**
 * Graceful shutdown: closing a durable producer's scope writes the watermark of every
 * confirmation it received, so a clean restart of the application redelivers nothing that was
 * confirmed (point-to-point and work-pulling).
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Schema, Scope } from "effect"
import * as Consumer from "../src/Consumer.js"
import type { DurableProducerQueueService } from "../src/DurableQueue/DurableProducerQueue.js"
import type { DurableWorkQueueService } from "../src/DurableQueue/DurableWorkQueue.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import * as MemoryWorkQueue from "../src/DurableQueue/MemoryWorkQueue.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { advanceBy, advanceUntil } from "./support/Harness.js"

const Order = Schema.Struct({ id: Schema.Number })
const system = ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

/** One run of an application on a durable queue: a producer and its consumer in one scope. */
const pointToPoint = (queue: DurableProducerQueueService, seen: Array<number>) =>
  Effect.gen(function*() {
    const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue })
    const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
    yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.id))))
    return producer
  })

const workPulling = (queue: DurableWorkQueueService, seen: Array<number>) =>
  Effect.gen(function*() {
    const producer = yield* WorkPulling.producer({ name: "p", payload: Order, durableWorkQueue: queue })
    const worker = yield* WorkPulling.worker({ name: "w", producer: "p", payload: Order })
    yield* Effect.forkScoped(worker.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.id))))
    return producer
  })

/** Runs the application, sends 200 orders, waits until each was handled, and shuts it down. */
const runOnce = <Q>(app: (queue: Q, seen: Array<number>) => Effect.Effect<Producer.Producer<typeof Order.Type>, unknown, ReliableSystem.ReliableSystem | Scope.Scope>, queue: Q) =>
  Effect.gen(function*() {
    const seen: Array<number> = []
    const scope = yield* Scope.make()
    const producer = yield* app(queue, seen).pipe(Scope.extend(scope), Effect.provide(system))
    yield* producer.sendAll(Array.from({ length: 200 }, (_, id) => ({ payload: { id }, messageId: `order-${id}` })))
    yield* advanceUntil(() => seen.length === 200, 10, 10_000)
    yield* Scope.close(scope, Exit.void)
    return seen
  })

/** Starts the application again on the same queue and collects what it redelivers. */
const restart = <Q>(app: (queue: Q, seen: Array<number>) => Effect.Effect<unknown, unknown, ReliableSystem.ReliableSystem | Scope.Scope>, queue: Q) =>
  Effect.gen(function*() {
    const seen: Array<number> = []
    yield* app(queue, seen).pipe(Effect.provide(system))
    yield* advanceBy(5_000, 100)
    return seen
  })

describe("graceful shutdown", () => {
  it.scoped("point-to-point: a clean restart redelivers none of the 200 confirmed messages", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      expect((yield* runOnce(pointToPoint, queue)).length).toBe(200)
      expect(yield* restart(pointToPoint, queue)).toEqual([])
    }))

  it.scoped("point-to-point: a handler still working at shutdown finishes and is confirmed; the restart redelivers nothing", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      const gate = yield* Deferred.make<void>()
      const started: Array<number> = []
      const done: Array<number> = []
      const scope = yield* Scope.make()
      const producer = yield* Effect.gen(function*() {
        const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue })
        const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
        yield* Effect.forkScoped(consumer.run((delivery) =>
          Effect.zipRight(
            Effect.sync(() => void started.push(delivery.payload.id)),
            Effect.zipRight(delivery.payload.id === 9 ? Deferred.await(gate) : Effect.void, Effect.sync(() => void done.push(delivery.payload.id)))
          )))
        return producer
      }).pipe(Scope.extend(scope), Effect.provide(system))
      yield* producer.sendAll(Array.from({ length: 10 }, (_, id) => ({ payload: { id }, messageId: `order-${id}` })))
      yield* advanceUntil(() => started.includes(9), 10, 10_000)
      // Shut down while the last handler still works; it finishes during the drain.
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* Effect.yieldNow()
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(closing)
      expect(done).toEqual(Array.from({ length: 10 }, (_, id) => id))
      expect(yield* restart(pointToPoint, queue)).toEqual([])
    }))

  it.scoped("work-pulling: a clean restart redelivers none of the 200 confirmed jobs", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryWorkQueue.makeWorkMemory
      expect((yield* runOnce(workPulling, queue)).length).toBe(200)
      expect(yield* restart(workPulling, queue)).toEqual([])
    }))
})
