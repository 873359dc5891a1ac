/**
 * Guarantees of the seed behaviour that no other test exercised end to end: what a producer
 * respawned without a durable queue loses, that a failed handler confirms nothing, when
 * point-to-point `DeliveryConfirmed` repeats or is dropped, point-to-point registration fencing
 * through the real resolver, that requeueing after a worker loss writes nothing durable, and the
 * reserved endpoint namespace.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Layer, Logger, LogLevel, Option, Queue, Schedule, Schema, Scope } from "effect"
import * as Consumer from "../src/Consumer.js"
import type { DurableProducerQueueService } from "../src/DurableQueue/DurableProducerQueue.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import * as MemoryWorkQueue from "../src/DurableQueue/MemoryWorkQueue.js"
import type { EndpointKind } from "../src/internal/EndpointRegistry.js"
import * as Producer from "../src/Producer.js"
import type { ControllerAddress } from "../src/Protocol/Address.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import { FaultInjector, layerFaulty } from "../src/Transport/FaultyTransport.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { addressOf, advanceBy, advanceUntil, drain, fakeEndpoint, inject, layerRecording, recorded, settle } from "./support/Harness.js"
import { spyWork } from "./support/WorkQueueSpy.js"

const Order = Schema.Struct({ id: Schema.Number })
type Order = typeof Order.Type
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))
/** A memory transport whose links a test can cut (no random faults: every probability is 0). */
const cuttable = () => ReliableSystem.layer().pipe(Layer.provideMerge(layerFaulty({ seed: 1 })))

/** Lets the clock run for `millis` whatever happens (something late would show up meanwhile). */
const idle = (millis: number) => advanceBy(millis, 100)

/** Cuts the node's link to itself (every envelope between local controllers) while `effect` runs. */
const withLinkCut = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const injector = yield* FaultInjector
    const node = (yield* ReliableSystem.ReliableSystem).node
    yield* injector.cut(node, node)
    const result = yield* effect
    yield* injector.heal(node, node)
    return result
  })

/** The number of messages a producer's current controller counts as confirmed. */
const confirmedBy = (producer: Producer.Producer<Order>) => () => Effect.runSync(producer.stats).confirmed

describe("point-to-point: a producer respawned without a durable queue", () => {
  it.scoped("loses exactly the messages it held unconfirmed; confirmed ones are not delivered again; new messages flow in order", () =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      const seen: Array<number> = []
      yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.id))))
      for (const id of [0, 1, 2]) yield* producer.send({ id })
      yield* advanceUntil(() => confirmedBy(producer)() === 3, 100, 10_000)
      // 3 and 4 are handed to the controller (their sends return) but never reach the consumer.
      yield* withLinkCut(Effect.gen(function*() {
        for (const id of [3, 4]) yield* producer.send({ id })
        yield* idle(1_000)
        expect(confirmedBy(producer)()).toBe(3)
        yield* ReliableSystem.respawn("p")
      }))
      yield* Effect.forkScoped(Effect.forEach([5, 6, 7], (id) => producer.send({ id }), { discard: true }))
      yield* advanceUntil(() => seen.length >= 6, 100, 20_000)
      yield* idle(5_000)
      expect(seen).toEqual([0, 1, 2, 5, 6, 7])
    }).pipe(Effect.provide(cuttable())))

  it.scoped("drops the DeliveryConfirmed of messages the consumer confirmed after the old controller stopped hearing it", () =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, deliveryConfirmation: true })
      const notices = yield* producer.subscribeConfirmations
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      const gate = yield* Deferred.make<void>()
      const done: Array<number> = []
      yield* Effect.forkScoped(consumer.run((delivery) =>
        Effect.zipRight(delivery.payload.id >= 3 ? Deferred.await(gate) : Effect.void, Effect.sync(() => void done.push(delivery.payload.id)))
      ))
      yield* Effect.forkScoped(Effect.forEach([0, 1, 2, 3, 4], (id) => producer.send({ id }, { messageId: `m${id}` }), { discard: true }))
      yield* advanceUntil(() => confirmedBy(producer)() === 3, 100, 10_000)
      // The consumer processes and confirms 3 and 4, but its confirmations never arrive.
      yield* withLinkCut(Effect.gen(function*() {
        yield* Deferred.succeed(gate, undefined)
        yield* idle(1_000)
        expect(done).toEqual([0, 1, 2, 3, 4])
        yield* ReliableSystem.respawn("p")
      }))
      yield* Effect.forkScoped(producer.send({ id: 5 }, { messageId: "m5" }))
      yield* advanceUntil(() => done.includes(5), 100, 20_000)
      yield* idle(2_000)
      const reported = Chunk.toReadonlyArray(yield* Queue.takeAll(notices)).map((notice) => notice.messageId)
      expect(reported).toEqual(["m0", "m1", "m2", "m5"])
    }).pipe(Effect.provide(cuttable())))
})

describe("point-to-point confirmation is business-level", () => {
  it.scoped("a failed run handler confirms nothing: the same delivery comes again after the retry delay, the next only once it succeeded", () =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order, retry: Schedule.spaced("1 second") })
      const attempts: Array<[number, number]> = []
      let failures = 2
      yield* Effect.forkScoped(consumer.run((delivery) =>
        Effect.flatMap(Effect.clockWith((clock) => clock.currentTimeMillis), (now) => {
          attempts.push([delivery.payload.id, now])
          return delivery.payload.id === 1 && failures-- > 0 ? Effect.fail("not processed") : Effect.void
        })
      ))
      yield* Effect.forkScoped(Effect.forEach([1, 2], (id) => producer.send({ id }), { discard: true }))
      yield* advanceUntil(() => attempts.length === 4, 100, 10_000)
      yield* idle(2_000)
      expect(attempts.map(([id, at]) => [id, at - attempts[0][1]])).toEqual([[1, 0], [1, 1_000], [1, 2_000], [2, 2_000]])
      expect(confirmedBy(producer)()).toBe(2)
    }).pipe(Logger.withMinimumLogLevel(LogLevel.Error), Effect.provide(system())))
})

describe("point-to-point DeliveryConfirmed", () => {
  it.scoped("repeats, with the same store seq, when a reloaded message is confirmed again", () =>
    Effect.gen(function*() {
      // A queue whose watermark never lands: what a crash right after the consumer confirmed leaves.
      const inner = yield* MemoryProducerQueue.makeMemory
      const queue: DurableProducerQueueService = { ...inner, confirm: () => Effect.void }
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue, deliveryConfirmation: true })
      const notices = yield* producer.subscribeConfirmations
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      const done: Array<string> = []
      yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void done.push(delivery.messageId))))
      yield* Effect.forkScoped(producer.send({ id: 1 }, { messageId: "order-1" }))
      yield* advanceUntil(() => done.length === 1, 100, 10_000)
      yield* idle(500)
      yield* ReliableSystem.respawn("p")
      yield* advanceUntil(() => done.length === 2, 100, 10_000)
      yield* idle(500)
      expect(done).toEqual(["order-1", "order-1"])
      const reported = Chunk.toReadonlyArray(yield* Queue.takeAll(notices))
      expect(reported.map((notice) => [notice.messageId, notice.seq])).toEqual([["order-1", 1], ["order-1", 1]])
    }).pipe(Effect.provide(system())))
})

describe("point-to-point registration fencing, end to end", () => {
  /** Posts a registration to producer "p" as if `from` had sent it. */
  const registerAs = (from: ControllerAddress) =>
    Effect.gen(function*() {
      yield* inject(from, yield* addressOf("p"), { _tag: "RegisterConsumer", nonce: `${from.endpoint}-nonce` })
      yield* settle
    })

  it.scoped.each([
    ["an endpoint that is not the configured consumer", "ghost", undefined],
    ["the consumer's name with no endpoint behind it", "c", undefined],
    ["a stale incarnation of the consumer", "c", { kind: "Consumer", peer: "p", incarnation: "an-older-one" }],
    ["a consumer configured for another producer", "c", { kind: "Consumer", peer: "elsewhere" }],
    ["a work-pulling worker naming this producer", "c", { kind: "Worker", peer: "p" }],
    ["a producer", "c", { kind: "Producer", peer: "p" }]
  ] as const)("drops and counts a registration from %s, answering nothing", ([_, name, registered]) =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
      const node = (yield* ReliableSystem.ReliableSystem).node
      let from: ControllerAddress = { node, endpoint: name, incarnation: "spoof" }
      let inbox: Queue.Dequeue<unknown> | undefined
      if (registered !== undefined) {
        const fake = yield* fakeEndpoint(name, registered.kind as EndpointKind, registered.peer)
        inbox = fake.inbox
        from = "incarnation" in registered ? { ...fake.address, incarnation: registered.incarnation } : fake.address
      }
      yield* registerAs(from)
      expect((yield* producer.stats).dropped).toBe(1)
      expect(yield* recorded("RegistrationAck")).toEqual([])
      if (inbox !== undefined) expect(yield* Queue.size(inbox)).toBe(0)
    }).pipe(Effect.provide(layerRecording())))

  it.scoped("binds the live consumer configured for it; a spoofed incarnation cannot grant demand on its session", () =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
      const fake = yield* fakeEndpoint("c", "Consumer", "p")
      yield* registerAs(fake.address)
      const [answer] = yield* drain(fake.inbox)
      expect(answer.message).toMatchObject({ _tag: "RegistrationAck", nextSeq: 1, nonce: "c-nonce" })
      const { sessionId } = answer.message as { readonly sessionId: string }
      const request = { _tag: "Request", sessionId, nonce: "c-nonce", confirmedSeq: 0, requestUpToSeq: 5, viaTimeout: false } as const
      const grant = yield* Effect.fork(producer.requestNext)
      yield* inject({ ...fake.address, incarnation: "spoof" }, yield* addressOf("p"), request)
      yield* settle
      expect((yield* producer.stats).dropped).toBe(1)
      expect(Option.isNone(yield* Fiber.poll(grant))).toBe(true)
      // The same request from the bound controller grants demand.
      yield* inject(fake.address, yield* addressOf("p"), request)
      yield* settle
      expect(grant.unsafePoll()).not.toBeNull()
      expect((yield* Fiber.join(grant)).endpoint).toBe("p")
    }).pipe(Effect.provide(layerRecording())))
})

describe("work-pulling: requeueing after a worker loss", () => {
  it.scoped("writes nothing to the durable queue; the survivor's confirmations are the only writes", () =>
    Effect.gen(function*() {
      const watched = spyWork(yield* MemoryWorkQueue.makeWorkMemory)
      const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Order, durableWorkQueue: watched.queue })
      const lostScope = yield* Scope.make()
      // A lost worker: its scope closes at once, without waiting for its handler.
      const holder = yield* WorkPulling.worker({ name: "holder", producer: "dispatcher", payload: Order, window: 3, drainTimeout: 0 }).pipe(Scope.extend(lostScope))
      yield* Effect.forkIn(holder.run(() => Effect.never), lostScope)
      const ids = ["job-0", "job-1", "job-2"]
      yield* Effect.forkScoped(producer.sendAll(ids.map((messageId, id) => ({ payload: { id }, messageId }))))
      const service = yield* ReliableSystem.ReliableSystem
      const stats = () => Effect.runSync(WorkPulling.stats("dispatcher").pipe(Effect.provideService(ReliableSystem.ReliableSystem, service)))
      yield* advanceUntil(() => stats().perWorker[0]?.inFlight === 3, 100, 10_000)
      const mark = watched.calls.length
      yield* Scope.close(lostScope, Exit.void)
      yield* advanceUntil(() => stats().requeued === 3, 100, 10_000)
      expect(stats()).toMatchObject({ workers: 0, workersGone: 1, pending: 3 })
      expect(watched.calls.slice(mark)).toEqual([])
      // A new worker does the requeued jobs; confirming them is all that reaches the queue.
      const done: Array<string> = []
      const survivor = yield* WorkPulling.worker({ name: "survivor", producer: "dispatcher", payload: Order })
      yield* Effect.forkScoped(survivor.run((delivery) => Effect.sync(() => void done.push(delivery.messageId))))
      yield* advanceUntil(() => done.length === 3, 100, 10_000)
      yield* idle(500)
      expect([...done].sort()).toEqual(ids)
      const writes = watched.calls.slice(mark)
      expect(writes.every((call) => call.operation === "confirmMessage" || call.operation === "confirmBatch")).toBe(true)
      expect(writes.flatMap((call) => call.messageIds).sort()).toEqual(ids)
    }).pipe(Effect.provide(system())))
})

describe("reserved endpoint names", () => {
  const refused = (effect: Effect.Effect<unknown, { readonly _tag: string; readonly option?: string }, any>) =>
    Effect.map(Effect.flip(effect), (error) => [error._tag, error.option])

  it.scoped.each(["@system", "@controller", "@"])("%s is refused as an endpoint's own name and as the peer it names, by every constructor", (name) =>
    Effect.gen(function*() {
      expect(yield* refused(Producer.make({ name, consumer: "c", payload: Order }))).toEqual(["ReliableConfigError", "name"])
      expect(yield* refused(Producer.make({ name: "p", consumer: name, payload: Order }))).toEqual(["ReliableConfigError", "consumer"])
      expect(yield* refused(Consumer.make({ name, producer: "p", payload: Order }))).toEqual(["ReliableConfigError", "name"])
      expect(yield* refused(Consumer.make({ name: "c", producer: name, payload: Order }))).toEqual(["ReliableConfigError", "producer"])
      expect(yield* refused(WorkPulling.producer({ name, payload: Order }))).toEqual(["ReliableConfigError", "name"])
      expect(yield* refused(WorkPulling.worker({ name, producer: "dispatcher", payload: Order }))).toEqual(["ReliableConfigError", "name"])
      expect(yield* refused(WorkPulling.worker({ name: "w", producer: name, payload: Order }))).toEqual(["ReliableConfigError", "producer"])
      expect(yield* (yield* ReliableSystem.ReliableSystem).endpointNames).toEqual([])
    }).pipe(Effect.provide(system())))

  it.scoped("the refusal says why; a name with @ elsewhere is an ordinary name", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Consumer.make({ name: "@system", producer: "p", payload: Order }))
      expect(error.message).toContain("reserved")
      yield* Consumer.make({ name: "orders@eu", producer: "p", payload: Order })
      yield* Producer.make({ name: "p", consumer: "orders@eu", payload: Order })
    }).pipe(Effect.provide(system())))
})
