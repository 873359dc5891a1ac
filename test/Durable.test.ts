/**
 * Durable point-to-point flows: what a producer crash, restart or respawn keeps, resubmission
 * under the same messageId, failure classification of durable errors, and fencing of a stale
 * producer incarnation.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Fiber, Layer, Queue, Schema, Scope } from "effect"
import type { DurableProducerQueueService } from "../src/DurableQueue/DurableProducerQueue.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import { QueueBackendError, QueueConflict } from "../src/DurableQueue/QueueErrors.js"
import * as Consumer from "../src/Consumer.js"
import { Produced, StoredAck } from "../src/Protocol/Contract.js"
import type { RequestNext } from "../src/Protocol/Contract.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { Transport } from "../src/Transport/Transport.js"
import { advanceBy, advanceUntil, settle } from "./support/Harness.js"
import { spy } from "./support/QueueSpy.js"

const Order = Schema.Struct({ id: Schema.Number })
type Order = typeof Order.Type
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

/** A consumer in its own scope, recording (messageId, id) pairs; close the scope to stop it. */
const startConsumer = (seen: Array<{ readonly messageId: string; readonly id: number }>, name = "c") =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const consumer = yield* Consumer.make({ name, producer: "p", payload: Order, resendInterval: "200 millis" }).pipe(Scope.extend(scope))
    yield* Effect.forkIn(consumer.run((delivery) => Effect.sync(() => void seen.push({ messageId: delivery.messageId, id: delivery.payload.id }))), scope)
    return scope
  })

const durableProducer = (queue: DurableProducerQueueService, overrides: Partial<Producer.ProducerOptions<Order, Order>> = {}) =>
  Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue, retryInterval: "100 millis", ...overrides })

const ids = (seen: ReadonlyArray<{ readonly id: number }>) => seen.map((entry) => entry.id)

/** Waits for the next grant while the clock moves (a new controller needs the consumer's next tick). */
const nextGrant = (producer: Producer.Producer<Order>) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(producer.requestNext)
    let grant: RequestNext | undefined
    yield* advanceUntil(() => {
      const polled = fiber.unsafePoll()
      if (polled !== null && polled._tag === "Success") grant = polled.value
      return grant !== undefined
    }, 50, 10_000)
    return grant!
  })

describe("durable point-to-point", () => {
  it.scoped("a respawned producer reloads and redelivers every stored, unconfirmed message before new ones", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      const producer = yield* durableProducer(queue)
      const seen: Array<{ messageId: string; id: number }> = []
      const consumerScope = yield* startConsumer(seen)
      yield* producer.send({ id: 0 })
      yield* advanceUntil(() => seen.length === 1, 50, 5_000)
      // The consumer goes away: the next messages are stored and accepted but never confirmed.
      yield* Scope.close(consumerScope, Exit.void)
      const pending = yield* Effect.forkScoped(Effect.forEach([1, 2, 3], (id) => producer.send({ id }), { discard: true }))
      yield* advanceBy(1_000, 100)
      // The producer crashes (a fresh controller, a fresh epoch) before anything is confirmed.
      yield* ReliableSystem.respawn("p")
      yield* startConsumer(seen)
      yield* advanceUntil(() => new Set(ids(seen)).size === 4, 50, 20_000)
      yield* pending.await
      yield* producer.send({ id: 4 })
      yield* advanceUntil(() => ids(seen).includes(4), 50, 5_000)
      const after = ids(seen).slice(1)
      expect(after.slice(-1)[0]).toBe(4)
      expect([...new Set(after)]).toEqual([1, 2, 3, 4])
    }).pipe(Effect.provide(system())))

  it.scoped("a resubmission after a crash gets its original seq and is not dispatched twice", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      const producer = yield* durableProducer(queue)
      const seen: Array<{ messageId: string; id: number }> = []
      yield* startConsumer(seen)
      // The producer stores m1 but crashes before its StoredAck: m1 is stored, not accepted.
      const grant = yield* producer.requestNext
      const stored = yield* producer.produce(Produced.make(grant, "m1", { id: 1 }))
      expect(stored).toMatchObject({ seq: 1, alreadyStored: false })
      yield* ReliableSystem.respawn("p")
      yield* advanceBy(1_000, 100)
      expect(seen).toEqual([]) // load returns accepted messages only
      // Its own source still holds m1 (never marked), so it resubmits m1 under the same id.
      const again = yield* nextGrant(producer)
      const restored = yield* producer.produce(Produced.make(again, "m1", { id: 999 }))
      expect(restored).toMatchObject({ seq: 1, alreadyStored: true, messageId: "m1" })
      yield* producer.storedAck(StoredAck.make(restored))
      yield* advanceUntil(() => seen.length === 1, 50, 5_000)
      expect(seen).toEqual([{ messageId: "m1", id: 1 }]) // the first write's payload
      // Let the confirmation watermark reach the queue (it is written once the lane pauses).
      yield* advanceBy(500, 100)
      // A second crash, then a resubmission of the already accepted m1: same seq, no second dispatch.
      yield* ReliableSystem.respawn("p")
      const third = yield* nextGrant(producer)
      const resubmitted = yield* producer.produce(Produced.make(third, "m1", { id: 1 }))
      expect(resubmitted).toMatchObject({ seq: 1, alreadyStored: true })
      yield* producer.storedAck(StoredAck.make(resubmitted))
      yield* Effect.forkScoped(producer.send({ id: 2 }, { messageId: "m2" }))
      yield* advanceUntil(() => seen.length === 2, 50, 5_000)
      yield* advanceBy(1_000, 100)
      expect(seen.map((entry) => entry.messageId)).toEqual(["m1", "m2"])
    }).pipe(Effect.provide(system())))

  it.scoped("a restart after everything was confirmed resumes at the right seq and grants demand once", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      const producer = yield* durableProducer(queue)
      const seen: Array<{ messageId: string; id: number }> = []
      yield* startConsumer(seen)
      for (const id of [1, 2, 3]) yield* producer.send({ id })
      yield* advanceUntil(() => seen.length === 3, 50, 5_000)
      yield* advanceBy(500, 100)
      yield* ReliableSystem.respawn("p")
      const grant = yield* nextGrant(producer)
      const stored = yield* producer.produce(Produced.make(grant, "m4", { id: 4 }))
      expect(stored.seq).toBe(4)
      yield* producer.storedAck(StoredAck.make(stored))
      const next = yield* producer.send({ id: 5 })
      expect(next.seq).toBe(5)
      yield* advanceUntil(() => seen.length === 5, 50, 5_000)
      expect(ids(seen)).toEqual([1, 2, 3, 4, 5])
    }).pipe(Effect.provide(system())))

  it.scoped("stores before Stored, accepts before emitting, and coalesces confirmations to the highest watermark", () =>
    Effect.gen(function*() {
      const watched = spy(yield* MemoryProducerQueue.makeMemory)
      watched.delay("confirm", 300)
      const producer = yield* durableProducer(watched.queue)
      const seen: Array<{ messageId: string; id: number }> = []
      yield* startConsumer(seen)
      yield* producer.sendAll(Array.from({ length: 30 }, (_, id) => ({ payload: { id }, messageId: `m${id}` })))
      yield* advanceUntil(() => seen.length === 30, 50, 20_000)
      yield* advanceBy(2_000, 100)
      const operations = watched.calls.map((call) => call.operation)
      expect(operations[0]).toBe("load")
      // Every message was stored and accepted before it reached the consumer (batched here).
      const stored = watched.calls.filter((c) => c.operation === "store" || c.operation === "storeBatch").flatMap((c) => [c.argument].flat())
      const accepted = watched.calls.filter((c) => c.operation === "accept" || c.operation === "acceptBatch").flatMap((c) => [c.argument].flat())
      expect(new Set(stored)).toEqual(new Set(seen.map((entry) => entry.messageId)))
      expect(new Set(accepted)).toEqual(new Set(stored))
      // Confirmations are persisted one at a time, coalesced: fewer calls than messages, rising, ending at 30.
      const confirms = watched.calls.filter((c) => c.operation === "confirm").map((c) => c.argument as number)
      expect(confirms.length).toBeLessThan(30)
      expect([...confirms].sort((a, b) => a - b)).toEqual(confirms)
      expect(confirms.slice(-1)[0]).toBe(30)
      const reloaded = yield* queue_load(watched.queue)
      expect(reloaded.state.confirmedSeq).toBe(30)
    }).pipe(Effect.provide(system())))

  describe("failures", () => {
    it.scoped.each([
      ["store", "Store"],
      ["accept", "Accept"]
    ] as const)("a QueueConflict from %s is terminal: one event at that stage, the endpoint stays usable", ([operation, stage]) =>
      Effect.gen(function*() {
        const watched = spy(yield* MemoryProducerQueue.makeMemory)
        const failures = yield* ReliableSystem.subscribeFailures
        const producer = yield* durableProducer(watched.queue)
        const seen: Array<{ messageId: string; id: number }> = []
        yield* startConsumer(seen)
        yield* producer.send({ id: 1 })
        watched.failNext(operation, new QueueConflict({ message: "integrity violated" }), 100)
        const pending = yield* Effect.forkScoped(producer.send({ id: 2 }))
        yield* advanceBy(1_000, 100)
        const events = Chunk.toReadonlyArray(yield* Queue.takeAll(failures))
        expect(events).toHaveLength(1)
        expect(events[0]).toMatchObject({ endpointName: "p", role: "Producer", stage })
        watched.failNext(operation, new QueueConflict({ message: "" }), 0)
        yield* ReliableSystem.respawn("p")
        // At least once: a confirmation the stopped controller never persisted is redelivered.
        yield* advanceUntil(() => new Set(ids(seen)).size === 2, 50, 10_000)
        yield* pending.await
        expect([...new Set(ids(seen))]).toEqual([1, 2])
      }).pipe(Effect.provide(system())))

    it.scoped("a QueueConflict while persisting a confirmation is terminal at stage Confirm", () =>
      Effect.gen(function*() {
        const watched = spy(yield* MemoryProducerQueue.makeMemory)
        const failures = yield* ReliableSystem.subscribeFailures
        const producer = yield* durableProducer(watched.queue)
        const seen: Array<{ messageId: string; id: number }> = []
        yield* startConsumer(seen)
        watched.failNext("confirm", new QueueConflict({ message: "watermark beyond the queue" }), 100)
        yield* producer.send({ id: 1 })
        yield* advanceBy(1_000, 100)
        const events = Chunk.toReadonlyArray(yield* Queue.takeAll(failures))
        expect(events.map((event) => event.stage)).toEqual(["Confirm"])
      }).pipe(Effect.provide(system())))

    it.scoped("a backend error is retried under queueRetry; once retries run out the controller restarts and reloads", () =>
      Effect.gen(function*() {
        const watched = spy(yield* MemoryProducerQueue.makeMemory)
        const failures = yield* ReliableSystem.subscribeFailures
        const producer = yield* durableProducer(watched.queue, { queueRetry: { attempts: 3, interval: "100 millis" } })
        const seen: Array<{ messageId: string; id: number }> = []
        yield* startConsumer(seen)
        yield* producer.send({ id: 1 })
        // Two failures: the third attempt succeeds, no restart.
        watched.failNext("store", new QueueBackendError({ operation: "store", cause: "blip" }), 2)
        yield* Effect.forkScoped(producer.send({ id: 2 }))
        yield* advanceUntil(() => seen.length === 2, 50, 5_000)
        expect(watched.calls.filter((call) => call.operation === "load")).toHaveLength(1)
        // Three failures exhaust the retries: the controller restarts (a second load) and the send completes.
        watched.failNext("store", new QueueBackendError({ operation: "store", cause: "down" }), 3)
        yield* Effect.forkScoped(producer.send({ id: 3 }))
        // At least once: confirmations the old controller had not persisted yet come again.
        yield* advanceUntil(() => new Set(ids(seen)).size === 3, 50, 10_000)
        expect(watched.calls.map((call) => call.operation).join(" "), "calls").toContain("load")
        expect(watched.calls.filter((call) => call.operation === "load"), watched.calls.map((call) => call.operation).join(" ")).toHaveLength(2)
        expect(yield* Queue.size(failures)).toBe(0)
        expect([...new Set(ids(seen))]).toEqual([1, 2, 3])
      }).pipe(Effect.provide(system())))

    it.scoped("a reload that keeps failing is retried until the queue answers: one degraded and one recovered event, no failure", () =>
      Effect.gen(function*() {
        const watched = spy(yield* MemoryProducerQueue.makeMemory)
        const failures = yield* ReliableSystem.subscribeFailures
        const health = yield* ReliableSystem.subscribeHealth
        const producer = yield* durableProducer(watched.queue, { queueRetry: { attempts: 2, interval: "100 millis" } })
        const seen: Array<{ readonly messageId: string; readonly id: number }> = []
        yield* startConsumer(seen)
        yield* producer.send({ id: 1 })
        watched.failNext("accept", new QueueBackendError({ operation: "accept", cause: "down" }), 2)
        watched.failNext("load", new QueueBackendError({ operation: "load", cause: "still down" }), 12)
        const pending = yield* Effect.forkScoped(producer.send({ id: 2 }))
        yield* advanceUntil(() => watched.calls.filter((call) => call.operation === "load").length >= 6, 100, 10_000)
        expect((yield* producer.stats).degraded).toBe(true)
        // The queue answers again: the flow resumes by itself, without a respawn.
        yield* advanceUntil(() => ids(seen).includes(2), 100, 30_000)
        yield* Fiber.join(pending)
        expect((yield* producer.stats).degraded).toBe(false)
        expect(Chunk.toReadonlyArray(yield* Queue.takeAll(failures))).toEqual([])
        const events = Chunk.toReadonlyArray(yield* Queue.takeAll(health))
        expect(events.map((event) => event._tag)).toEqual(["ReliableDegraded", "ReliableRecovered"])
        expect(events[0]).toMatchObject({ endpointName: "p", role: "Producer", stage: "Accept" })
      }).pipe(Effect.provide(system())))

    it.scoped("a stale producer incarnation on a shared queue is fenced and publishes a terminal event", () =>
      Effect.gen(function*() {
        const queue = yield* MemoryProducerQueue.makeMemory
        const hub = MemoryTransport.makeHub()
        const nodeSystem = (node: string) =>
          ReliableSystem.make().pipe(Effect.provideService(Transport, MemoryTransport.makeNode(hub, node)))
        const systemA = yield* nodeSystem("a")
        const systemB = yield* nodeSystem("b")
        const onA = <X, E>(effect: Effect.Effect<X, E, ReliableSystem.ReliableSystem | Scope.Scope>) =>
          Effect.provideService(effect, ReliableSystem.ReliableSystem, systemA)
        const onB = <X, E>(effect: Effect.Effect<X, E, ReliableSystem.ReliableSystem | Scope.Scope>) =>
          Effect.provideService(effect, ReliableSystem.ReliableSystem, systemB)
        const failuresA = yield* systemA.subscribeFailures
        const seenA: Array<{ messageId: string; id: number }> = []
        const producerA = yield* onA(durableProducer(queue))
        yield* onA(startConsumer(seenA))
        yield* producerA.send({ id: 1 })
        yield* advanceUntil(() => seenA.length === 1, 50, 5_000)
        // A second incarnation of the same producer (another node) loads the queue: a newer epoch.
        const seenB: Array<{ messageId: string; id: number }> = []
        const producerB = yield* onB(durableProducer(queue))
        yield* onB(startConsumer(seenB))
        yield* producerB.send({ id: 2 })
        yield* Effect.forkScoped(producerA.send({ id: 3 }))
        yield* advanceBy(1_000, 100)
        const events = Chunk.toReadonlyArray(yield* Queue.takeAll(failuresA))
        expect(events).toHaveLength(1)
        expect(events[0]).toMatchObject({ endpointName: "p", stage: "Store" })
        expect((events[0].cause as { _tag: string })._tag).toBe("QueueFenced")
        yield* advanceUntil(() => seenB.some((entry) => entry.id === 2), 50, 5_000)
        expect(ids(seenA)).toEqual([1])
      }).pipe(Effect.provide(system())))
  })

  it.scoped("settles", () => settle)
})

const queue_load = (queue: DurableProducerQueueService) => queue.load
