/**
 * Closing an endpoint fails its callers at once: every call waiting on it and every later call
 * fails with `EndpointClosed`, on the producer side (send, sendAll, requestNext, produce,
 * storedAck) and the consumer side (run, deliveries). Closing a consumer lets the handler in flight
 * finish and confirms it first.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Schema, Scope, Stream } from "effect"
import * as Consumer from "../src/Consumer.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import * as Producer from "../src/Producer.js"
import { Produced, RequestNext, StoredAck } from "../src/Protocol/Contract.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { advanceUntil, settle } from "./support/Harness.js"

const Order = Schema.Struct({ id: Schema.Number })
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

const tagOf = (exit: Exit.Exit<unknown, { readonly _tag: string }>) =>
  Exit.isFailure(exit) ? (exit.cause._tag === "Fail" ? exit.cause.error._tag : exit.cause._tag) : "Success"

const grant = new RequestNext({ endpoint: "p", controller: "x", token: "x:1" })

describe("EndpointClosed", () => {
  it.scoped("producer: calls waiting for demand and every later call fail with EndpointClosed", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      // No consumer: every send waits for demand.
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order }).pipe(Scope.extend(scope))
      const waiting = yield* Effect.forEach([
        producer.send({ id: 1 }),
        producer.sendAll([{ payload: { id: 2 } }]),
        producer.requestNext
      ], (call) => Effect.fork(call as Effect.Effect<unknown, { readonly _tag: string }>))
      yield* settle
      yield* Scope.close(scope, Exit.void)
      for (const fiber of waiting) expect(tagOf(yield* Fiber.await(fiber))).toBe("EndpointClosed")
      const later: ReadonlyArray<Effect.Effect<unknown, { readonly _tag: string }>> = [
        producer.send({ id: 3 }),
        producer.sendAll([{ payload: { id: 4 } }]),
        producer.requestNext,
        producer.produce(Produced.make(grant, "m", { id: 5 })),
        producer.storedAck(new StoredAck({ endpoint: "p", controller: "x", token: "x:1", messageId: "m", seq: 1 }))
      ]
      for (const call of later) expect(tagOf(yield* Effect.exit(call))).toBe("EndpointClosed")
    }).pipe(Effect.provide(system())))

  it.scoped("durable and work-pulling producers fail their waiting senders the same way", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const durable = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: yield* MemoryProducerQueue.makeMemory }).pipe(Scope.extend(scope))
      const pool = yield* WorkPulling.producer({ name: "w", payload: Order }).pipe(Scope.extend(scope))
      const waiting = yield* Effect.forEach([durable.send({ id: 1 }), pool.send({ id: 2 })], Effect.fork)
      yield* settle
      yield* Scope.close(scope, Exit.void)
      for (const fiber of waiting) expect(tagOf(yield* Fiber.await(fiber))).toBe("EndpointClosed")
    }).pipe(Effect.provide(system())))

  it.scoped("consumer: a run forked elsewhere and a deliveries stream end with EndpointClosed, and so does every later call", () =>
    Effect.gen(function*() {
      yield* Producer.make({ name: "p", consumer: "c", payload: Order })
      const scope = yield* Scope.make()
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order }).pipe(Scope.extend(scope))
      const running = yield* Effect.fork(consumer.run(() => Effect.void))
      const streaming = yield* Effect.fork(Stream.runDrain(consumer.deliveries))
      yield* settle
      yield* Scope.close(scope, Exit.void)
      expect(tagOf(yield* Fiber.await(running))).toBe("EndpointClosed")
      expect(tagOf(yield* Fiber.await(streaming))).toBe("EndpointClosed")
      expect(tagOf(yield* Effect.exit(consumer.run(() => Effect.void)))).toBe("EndpointClosed")
      expect(tagOf(yield* Effect.exit(Stream.runDrain(consumer.deliveries)))).toBe("EndpointClosed")
    }).pipe(Effect.provide(system())))

  it.scoped("closing a consumer lets the handler in flight finish and confirms it before the endpoint closes", () =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
      const scope = yield* Scope.make()
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order }).pipe(Scope.extend(scope))
      const gate = yield* Deferred.make<void>()
      const started: Array<number> = []
      const done: Array<number> = []
      yield* Effect.forkIn(consumer.run((delivery) =>
        Effect.zipRight(
          Effect.sync(() => void started.push(delivery.payload.id)),
          Effect.zipRight(Deferred.await(gate), Effect.sync(() => void done.push(delivery.payload.id)))
        )), scope)
      yield* producer.send({ id: 1 })
      yield* advanceUntil(() => started.length === 1, 10, 1_000)
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* settle
      expect(closing.unsafePoll()).toBeNull()
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(closing)
      expect(done).toEqual([1])
      yield* advanceUntil(() => Effect.runSync(producer.stats).confirmed === 1, 10, 1_000)
    }).pipe(Effect.provide(system())))
})
