/**
 * `enqueue` and the backlog on the TestClock (memory queues): a durable producer commits
 * messages with no consumer or worker in sight; the flow delivers the backlog in order once one
 * comes; concurrent enqueues share transactions; first write wins; writers that bypass the
 * producer (another process, in production) are picked up by the queue's signal or, without
 * one, by polling; a backlog message the queue refuses is skipped, not a stopper; memory holds
 * one page of a long backlog.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Exit, Fiber, Layer, Logger, LogLevel, Option, Schema, Scope, Stream, TestClock } from "effect"
import * as Consumer from "../src/Consumer.js"
import type { DurableProducerQueueService, EnqueueRequest } from "../src/DurableQueue/DurableProducerQueue.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import * as MemoryWorkQueue from "../src/DurableQueue/MemoryWorkQueue.js"
import { QueueRejected } from "../src/DurableQueue/QueueErrors.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { advanceBy, advanceUntil } from "./support/Harness.js"

const Order = Schema.Struct({ id: Schema.Number })
const encodeOrder = Schema.encodeSync(Schema.parseJson(Order))
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))
const quiet = <A, E, R>(effect: Effect.Effect<A, E, R>) => Logger.withMinimumLogLevel(effect, LogLevel.Error)
const orders = (from: number, count: number) => Array.from({ length: count }, (_, index) => ({ payload: { id: from + index }, messageId: `order-${from + index}` }))

/** A backlog request as a writer in another process would make it (JSON, as the producer's codec). */
const written = (id: number): EnqueueRequest => ({ messageId: `order-${id}`, payload: new TextEncoder().encode(encodeOrder({ id })) })

/** Counts the queue's enqueue transactions; `refuse` makes the queue refuse one message's store. */
const counting = (inner: DurableProducerQueueService, refuse?: string) => {
  const calls: Array<number> = []
  const queue: DurableProducerQueueService = {
    ...inner,
    enqueue: (requests) => Effect.suspend(() => {
      calls.push(requests.length)
      return inner.enqueue(requests)
    }),
    storeAccepted: (epoch, requests) =>
      requests.some((request) => request.messageId === refuse)
        ? Effect.fail(new QueueRejected({ operation: "storeAccepted", cause: new Error(`${refuse} is refused`) }))
        : inner.storeAccepted!(epoch, requests)
  }
  return { queue, calls }
}

const collect = (consumer: Consumer.Consumer<{ readonly id: number }>, into: Array<number>) =>
  Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void into.push(delivery.payload.id))))

describe("enqueue: point-to-point", () => {
  it.scoped("resolves once committed with no consumer; the backlog is delivered in order when one comes", () =>
    quiet(Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue })
      const results = yield* producer.enqueueAll(orders(0, 50))
      const one = yield* producer.enqueue({ id: 50 }, { messageId: "order-50" })
      expect(results.map((result) => result.messageId)).toEqual(orders(0, 50).map((order) => order.messageId))
      expect(one).toMatchObject({ _tag: "Enqueued", messageId: "order-50", alreadyStored: false })
      expect((yield* queue.inspect({ limit: 0 })).backlog).toBe(51)
      yield* TestClock.adjust("10 seconds")
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      const done: Array<number> = []
      yield* collect(consumer, done)
      yield* advanceUntil(() => done.length === 51, 10, 10_000)
      expect(done).toEqual(Array.from({ length: 51 }, (_, id) => id))
      const left = yield* queue.inspect({ limit: 0 })
      expect(left.backlog).toBe(0)
    }).pipe(Effect.provide(system()))))

  it.scoped("concurrent enqueues share transactions, each caller with its own results; first write wins", () =>
    quiet(Effect.gen(function*() {
      const { calls, queue } = counting(yield* MemoryProducerQueue.makeMemory)
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue })
      const results = yield* Effect.forEach(
        Array.from({ length: 200 }, (_, id) => id),
        (id) => producer.enqueue({ id }, { messageId: `order-${id % 150}` }),
        { concurrency: "unbounded" }
      )
      expect(results.map((result) => result.messageId)).toEqual(Array.from({ length: 200 }, (_, id) => `order-${id % 150}`))
      expect(results.filter((result) => result.alreadyStored).length).toBe(50)
      expect(calls.reduce((sum, size) => sum + size, 0)).toBe(200)
      // The first caller goes alone, the second beside it (two transactions run at once); everyone
      // who came meanwhile shares the next ones.
      expect(calls.length).toBeLessThanOrEqual(4)
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      const done: Array<number> = []
      yield* collect(consumer, done)
      yield* advanceUntil(() => done.length === 150, 10, 10_000)
      expect(done).toEqual(Array.from({ length: 150 }, (_, id) => id))
    }).pipe(Effect.provide(system()))))

  it.scoped("a bad id or an unencodable payload fails the call and commits nothing; no durable queue is a typed error", () =>
    quiet(Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue })
      const blank = yield* Effect.either(producer.enqueueAll([{ payload: { id: 1 } }, { payload: { id: 2 }, messageId: " " }]))
      expect(Either.isLeft(blank) && blank.left._tag).toBe("ProducerContractError")
      const unencodable = yield* Effect.either(producer.enqueue({ id: "x" } as never))
      expect(Either.isLeft(unencodable) && unencodable.left._tag).toBe("PayloadEncodeError")
      expect((yield* queue.inspect({ limit: 0 })).backlog).toBe(0)
      const plain = yield* Producer.make({ name: "q", consumer: "d", payload: Order })
      const refused = yield* Effect.either(plain.enqueue({ id: 1 }))
      expect(Either.isLeft(refused) && refused.left._tag).toBe("ReliableConfigError")
      expect(Either.isLeft(refused) && refused.left.message).toContain("enqueue needs one")
    }).pipe(Effect.provide(system()))))

  it.scoped("messages written to the backlog by others are picked up at once by the queue's signal", () =>
    quiet(Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue, backlogPollInterval: "1 hour" })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      const done: Array<number> = []
      yield* collect(consumer, done)
      yield* TestClock.adjust("1 second")
      yield* queue.enqueue([written(1), written(2), written(3)])
      yield* advanceUntil(() => done.length === 3, 10, 1_000)
      expect(done).toEqual([1, 2, 3])
    }).pipe(Effect.provide(system()))))

  it.scoped("without a signal the backlog is polled every backlogPollInterval", () =>
    quiet(Effect.gen(function*() {
      const inner = yield* MemoryProducerQueue.makeMemory
      const queue: DurableProducerQueueService = { ...inner, backlogSignal: undefined }
      yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue, backlogPollInterval: "5 seconds" })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      const done: Array<number> = []
      yield* collect(consumer, done)
      yield* TestClock.adjust("1 second")
      yield* queue.enqueue([written(7)])
      yield* advanceBy(3_500, 100)
      expect(done).toEqual([])
      yield* advanceUntil(() => done.length === 1, 100, 2_000)
      expect(done).toEqual([7])
    }).pipe(Effect.provide(system()))))

  it.scoped("a backlog message the queue refuses is skipped and left in the backlog; the rest flows", () =>
    quiet(Effect.gen(function*() {
      const { queue } = counting(yield* MemoryProducerQueue.makeMemory, "order-2")
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue })
      yield* producer.enqueueAll(orders(0, 5))
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      const done: Array<number> = []
      yield* collect(consumer, done)
      yield* advanceUntil(() => done.length === 4, 10, 10_000)
      expect(done).toEqual([0, 1, 3, 4])
      const left = yield* queue.inspect({ limit: 10, states: ["Backlog"] })
      expect(left.entries.map((entry) => entry.messageId)).toEqual(["order-2"])
    }).pipe(Effect.provide(system()))))

  it.scoped("a long backlog with no consumer is read a page at a time: nothing more is taken in", () =>
    quiet(Effect.gen(function*() {
      const inner = yield* MemoryProducerQueue.makeMemory
      const reads: Array<number> = []
      const queue: DurableProducerQueueService = {
        ...inner,
        backlog: (limit) => Effect.tap(inner.backlog(limit), (page) => Effect.sync(() => void reads.push(page.length)))
      }
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue })
      yield* Effect.forEach([0, 1, 2, 3, 4], (page) => producer.enqueueAll(orders(page * 1000, 1000)), { discard: true })
      yield* TestClock.adjust("1 minute")
      // One page waits for demand in the ingress; the feeder reads no further.
      expect(reads.every((size) => size <= 1000)).toBe(true)
      expect(reads.filter((size) => size > 0).length).toBe(1)
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order, window: 500 })
      const done: Array<number> = []
      yield* collect(consumer, done)
      yield* advanceUntil(() => done.length === 5000, 10, 60_000)
      expect(done).toEqual(Array.from({ length: 5000 }, (_, id) => id))
    }).pipe(Effect.provide(system()))))

  it.scoped("sends and the backlog share the flow; a closed endpoint refuses enqueue with EndpointClosed", () =>
    quiet(Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      const producerScope = yield* Scope.make()
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue }).pipe(Scope.extend(producerScope))
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      const done: Array<number> = []
      yield* collect(consumer, done)
      yield* producer.enqueueAll(orders(0, 3))
      const sent = yield* Effect.fork(producer.sendAll(orders(100, 3)))
      yield* advanceUntil(() => done.length === 6, 10, 10_000)
      yield* Fiber.join(sent)
      expect([...done].sort((a, b) => a - b)).toEqual([0, 1, 2, 100, 101, 102])
      yield* Scope.close(producerScope, Exit.void)
      const closed = yield* Effect.either(producer.enqueue({ id: 9 }))
      expect(Either.isLeft(closed) && closed.left._tag).toBe("EndpointClosed")
    }).pipe(Effect.provide(system()))))
})

/**
 * A queue whose enqueue transactions wait for the test: each call is recorded with its ids and
 * commits (into the memory queue) only when the test releases it.
 */
const gated = (inner: DurableProducerQueueService) => {
  const calls: Array<{ readonly ids: ReadonlyArray<string>; readonly release: Deferred.Deferred<void> }> = []
  const queue: DurableProducerQueueService = {
    ...inner,
    enqueue: (requests) =>
      Effect.flatMap(Deferred.make<void>(), (release) => {
        calls.push({ ids: requests.map((request) => request.messageId), release })
        return Effect.zipRight(Deferred.await(release), inner.enqueue(requests))
      })
  }
  return { queue, calls, release: (index: number) => Deferred.succeed(calls[index].release, undefined) }
}

describe("enqueue: pipelined group commit", () => {
  it.scoped("the next group's transaction runs while one commits; each caller resolves only after its own commit", () =>
    quiet(Effect.gen(function*() {
      const inner = yield* MemoryProducerQueue.makeMemory
      const { calls, queue, release } = gated(inner)
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue })
      const a = yield* Effect.fork(producer.enqueue({ id: 1 }, { messageId: "a" }))
      yield* TestClock.adjust("1 millis")
      const b = yield* Effect.fork(producer.enqueue({ id: 2 }, { messageId: "b" }))
      yield* TestClock.adjust("1 millis")
      const c = yield* Effect.fork(producer.enqueue({ id: 3 }, { messageId: "c" }))
      yield* TestClock.adjust("1 millis")
      // a's transaction has not committed, and b's runs beside it; c waits for a free slot
      expect(calls.map((call) => call.ids)).toEqual([["a"], ["b"]])
      yield* release(1)
      yield* TestClock.adjust("1 millis")
      expect((yield* Fiber.join(b)).messageId).toBe("b")
      expect(yield* Fiber.poll(a)).toEqual(Option.none())
      // b's slot went to c, while a still commits
      expect(calls.map((call) => call.ids)).toEqual([["a"], ["b"], ["c"]])
      expect(yield* Fiber.poll(c)).toEqual(Option.none())
      yield* release(0)
      yield* release(2)
      expect((yield* Fiber.join(a)).messageId).toBe("a")
      expect((yield* Fiber.join(c)).messageId).toBe("c")
      expect((yield* inner.backlog(10)).map((entry) => entry.messageId)).toEqual(["b", "a", "c"])
    }).pipe(Effect.provide(system()))))

  it.scoped("a caller's id that a running transaction holds waits for it (first write wins, no two writes of one id at once)", () =>
    quiet(Effect.gen(function*() {
      const { calls, queue, release } = gated(yield* MemoryProducerQueue.makeMemory)
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue })
      const first = yield* Effect.fork(producer.enqueue({ id: 1 }, { messageId: "x" }))
      yield* TestClock.adjust("1 millis")
      const again = yield* Effect.fork(producer.enqueue({ id: 2 }, { messageId: "x" }))
      yield* TestClock.adjust("1 millis")
      expect(calls.map((call) => call.ids)).toEqual([["x"]])
      yield* release(0)
      yield* TestClock.adjust("1 millis")
      expect(calls.map((call) => call.ids)).toEqual([["x"], ["x"]])
      yield* release(1)
      expect((yield* Fiber.join(first)).alreadyStored).toBe(false)
      expect((yield* Fiber.join(again)).alreadyStored).toBe(true)
    }).pipe(Effect.provide(system()))))

  it.scoped("one caller's sequential enqueues keep their order among many concurrent callers", () =>
    quiet(Effect.gen(function*() {
      const inner = yield* MemoryProducerQueue.makeMemory
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: inner })
      const mine = Effect.forEach(Array.from({ length: 50 }, (_, id) => id), (id) => producer.enqueue({ id }, { messageId: `mine-${id}` }), { discard: true })
      const others = Effect.forEach(Array.from({ length: 500 }, (_, id) => id), (id) => producer.enqueue({ id: 1000 + id }), { concurrency: "unbounded", discard: true })
      yield* Effect.all([mine, others], { concurrency: "unbounded" })
      const order = (yield* inner.backlog(1000)).map((entry) => entry.messageId).filter((id) => id.startsWith("mine-"))
      expect(order).toEqual(Array.from({ length: 50 }, (_, id) => `mine-${id}`))
    }).pipe(Effect.provide(system()))))
})

describe("enqueue: an endpoint closing mid-transaction", () => {
  it.scoped("callers whose transaction is cut short by the endpoint's scope closing fail with EndpointClosed; none waits forever", () =>
    quiet(Effect.gen(function*() {
      const inner = yield* MemoryProducerQueue.makeMemory
      const queue: DurableProducerQueueService = { ...inner, enqueue: () => Effect.never }
      const producerScope = yield* Scope.make()
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue }).pipe(Scope.extend(producerScope))
      // the first caller's transaction starts at once; the next two wait for it
      const callers = yield* Effect.forEach([0, 1, 2], (id) => Effect.fork(producer.enqueue({ id })))
      yield* TestClock.adjust("10 millis")
      yield* Scope.close(producerScope, Exit.void)
      const errors = yield* Effect.forEach(callers, (caller) => Effect.flip(Fiber.join(caller)))
      expect(errors.map((error) => error._tag)).toEqual(["EndpointClosed", "EndpointClosed", "EndpointClosed"])
    }).pipe(Effect.provide(system()))))
})

describe("enqueue: work-pulling", () => {
  it.scoped("resolves with no worker; workers that come later take the backlog", () =>
    quiet(Effect.gen(function*() {
      const queue = yield* MemoryWorkQueue.makeWorkMemory
      const producer = yield* WorkPulling.producer({ name: "jobs", payload: Order, durableWorkQueue: queue })
      yield* producer.enqueueAll(orders(0, 40))
      yield* TestClock.adjust("1 hour")
      const worker = yield* WorkPulling.worker({ name: "w", producer: "jobs", payload: Order })
      const done: Array<number> = []
      yield* Effect.forkScoped(worker.run((delivery) => Effect.sync(() => void done.push(delivery.payload.id))))
      yield* advanceUntil(() => done.length === 40, 10, 10_000)
      expect([...done].sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, id) => id))
    }).pipe(Effect.provide(system()))))
})

describe("streams in and out", () => {
  it.scoped("producer.sink sends each chunk as one sendAll; consumer.stream confirms what the next stage handled", () =>
    quiet(Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order, window: 200 })
      const handled: Array<number> = []
      const pipeline = yield* Effect.fork(consumer.stream.pipe(
        Stream.mapEffect((order) => Effect.sync(() => void handled.push(order.id))),
        Stream.take(1000),
        Stream.runDrain
      ))
      const sent = yield* Effect.fork(Stream.range(0, 1000).pipe(
        Stream.rechunk(64),
        Stream.map((id) => ({ id })),
        Stream.run(producer.sink)
      ))
      yield* advanceUntil(() => handled.length >= 1000, 10, 10_000)
      expect(yield* Fiber.join(sent)).toBe(1001)
      yield* Fiber.join(pipeline)
      expect(handled.slice(0, 1000)).toEqual(Array.from({ length: 1000 }, (_, id) => id))
      // The stream ended holding message 999: it was given back, and the 1001st message is still to come.
      const stats = yield* consumer.stats
      expect(stats.delivered).toBeGreaterThanOrEqual(1000)
    }).pipe(Effect.provide(system()))))

  it.scoped("a 100k-element stream through producer.sink is delivered exactly as one sendAll of the same 100k: same order, same seqs", () =>
    quiet(Effect.gen(function*() {
      const total = 100_000
      const delivered = (name: string) =>
        Effect.gen(function*() {
          const consumer = yield* Consumer.make({ name: `${name}-in`, producer: `${name}-out`, payload: Order, window: 1000 })
          const seen: Array<readonly [number, number]> = []
          yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push([delivery.seq, delivery.payload.id]))))
          return seen
        })
      const viaSink = yield* delivered("sink")
      const viaSendAll = yield* delivered("all")
      const sinkProducer = yield* Producer.make({ name: "sink-out", consumer: "sink-in", payload: Order })
      const allProducer = yield* Producer.make({ name: "all-out", consumer: "all-in", payload: Order })
      const sent = yield* Effect.fork(Stream.range(0, total - 1).pipe(Stream.map((id) => ({ id })), Stream.run(sinkProducer.sink)))
      const stored = yield* Effect.fork(allProducer.sendAll(Array.from({ length: total }, (_, id) => ({ payload: { id } }))))
      yield* advanceUntil(() => viaSink.length === total && viaSendAll.length === total, 10, 60_000)
      expect(yield* Fiber.join(sent)).toBe(total)
      expect((yield* Fiber.join(stored)).map((result) => result.seq)).toEqual(viaSendAll.map(([seq]) => seq))
      expect(viaSink).toEqual(viaSendAll)
      expect(viaSink.map(([, id]) => id)).toEqual(Array.from({ length: total }, (_, id) => id))
    }).pipe(Effect.provide(system()))), 120_000)

  it.scoped("the message held when a stream stage fails is delivered again", () =>
    quiet(Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      yield* Effect.forkScoped(producer.sendAll(orders(0, 5)))
      const first: Array<number> = []
      const failed = yield* Effect.fork(Effect.either(consumer.stream.pipe(
        Stream.mapEffect((order) => order.id === 2 ? Effect.fail("broken") : Effect.sync(() => void first.push(order.id))),
        Stream.runDrain
      )))
      yield* advanceUntil(() => failed.unsafePoll() !== null, 10, 5_000)
      expect(first).toEqual([0, 1])
      const second: Array<number> = []
      yield* Effect.forkScoped(consumer.stream.pipe(Stream.mapEffect((order) => Effect.sync(() => void second.push(order.id))), Stream.runDrain))
      yield* advanceUntil(() => second.length === 3, 10, 10_000)
      expect(second).toEqual([2, 3, 4])
    }).pipe(Effect.provide(system()))))

  it.scoped("producer.enqueueSink fills the backlog from a stream", () =>
    quiet(Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue })
      const count = yield* Stream.range(0, 2500).pipe(Stream.rechunk(500), Stream.map((id) => ({ id })), Stream.run(producer.enqueueSink))
      expect(count).toBe(2501)
      expect((yield* queue.inspect({ limit: 0 })).backlog).toBe(2501)
    }).pipe(Effect.provide(system()))))
})
