/**
 * Every option's default, one row each, read from an endpoint made without that option and
 * checked through what the flow does on the TestClock (never by importing the constant): the
 * demand a consumer asks for, when it re-registers and re-delivers, when a producer re-offers a
 * grant, how many durable attempts come before a restart and how far apart, when a lookup counts
 * as unanswered, how a large payload travels, and whether confirmations are published.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Fiber, Layer, Option, Queue, Schema } from "effect"
import type { Scope } from "effect"
import * as Consumer from "../src/Consumer.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import * as MemoryWorkQueue from "../src/DurableQueue/MemoryWorkQueue.js"
import { QueueBackendError } from "../src/DurableQueue/QueueErrors.js"
import type { EndpointKind } from "../src/internal/EndpointRegistry.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { Transport } from "../src/Transport/Transport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { addressOf, advanceTo, advanceUntil, drain, fakeEndpoint, inject, layerRecording, recorded, settle } from "./support/Harness.js"
import type { Recorder } from "./support/Harness.js"
import { spy } from "./support/QueueSpy.js"
import { spyWork } from "./support/WorkQueueSpy.js"

const Payload = Schema.Struct({ n: Schema.Number })
type Needs = ReliableSystem.ReliableSystem | Scope.Scope
type Check = Effect.Effect<void, unknown, Needs | Recorder>

const consumer = Consumer.make({ name: "c", producer: "p", payload: Payload })
const worker = WorkPulling.worker({ name: "c", producer: "p", payload: Payload })

/** The demand a consumer-side endpoint asks for once a (fake) producer binds it. */
const firstDemand = (kind: EndpointKind, endpoint: Effect.Effect<unknown, unknown, Needs>): Check =>
  Effect.gen(function*() {
    const fake = yield* fakeEndpoint("p", kind, "c")
    yield* endpoint
    yield* settle
    const [registration] = yield* drain(fake.inbox)
    const nonce = (registration.message as { readonly nonce: string }).nonce
    yield* inject(fake.address, registration.from, { _tag: "RegistrationAck", sessionId: "s1", nextSeq: 1, nonce })
    yield* settle
    const [request] = yield* drain(fake.inbox)
    expect(request.message).toMatchObject({ _tag: "Request", confirmedSeq: 0, requestUpToSeq: 50 })
  })

/** When a consumer-side endpoint whose producer never answers registers again. */
const registrationTimes = (kind: EndpointKind, endpoint: Effect.Effect<unknown, unknown, Needs>): Check =>
  Effect.gen(function*() {
    yield* fakeEndpoint("p", kind, "c")
    yield* endpoint
    yield* settle
    const times = Effect.map(recorded("RegisterConsumer"), (list) => list.map((entry) => entry.at))
    yield* advanceTo(1_999)
    expect(yield* times).toEqual([0])
    yield* advanceTo(4_000)
    expect(yield* times).toEqual([0, 2_000, 4_000])
  })

/** When a producer-side endpoint offers an unanswered grant again (a fake consumer-side peer grants demand). */
const grantReoffer = (peerKind: EndpointKind, producer: Effect.Effect<Producer.Producer<{ readonly n: number }>, unknown, Needs>): Check =>
  Effect.gen(function*() {
    const fake = yield* fakeEndpoint("c", peerKind, "p")
    const endpoint = yield* producer
    yield* settle
    const address = yield* addressOf("p")
    yield* inject(fake.address, address, { _tag: "RegisterConsumer", nonce: "n1" })
    yield* settle
    const [ack] = yield* drain(fake.inbox)
    const sessionId = (ack.message as { readonly sessionId: string }).sessionId
    yield* inject(fake.address, address, { _tag: "Request", sessionId, nonce: "n1", confirmedSeq: 0, requestUpToSeq: 5, viaTimeout: false })
    yield* settle
    const grant = yield* endpoint.requestNext
    const offeredAt = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    const again = yield* Effect.fork(endpoint.requestNext)
    yield* advanceTo(offeredAt + 499)
    expect(Option.isNone(yield* Fiber.poll(again))).toBe(true)
    yield* advanceTo(offeredAt + 500)
    expect((yield* Fiber.join(again)).token).toBe(grant.token)
  })

/**
 * How a durable producer retries a failing write: three attempts 100ms apart, then a restart
 * (a second `load`). `stores()` counts the attempts, `loads()` the loads.
 */
const retriesThenRestart = (options: {
  readonly failThree: () => void
  readonly stores: () => number
  readonly loads: () => number
  readonly send: Effect.Effect<unknown, unknown, Needs>
}): Check =>
  Effect.gen(function*() {
    const start = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    options.failThree()
    yield* Effect.forkScoped(options.send)
    yield* settle
    const seen = () => [options.stores(), options.loads()]
    expect(seen()).toEqual([1, 1])
    yield* advanceTo(start + 99)
    expect(seen()).toEqual([1, 1])
    yield* advanceTo(start + 100)
    expect(seen()).toEqual([2, 1])
    yield* advanceTo(start + 199)
    expect(seen()).toEqual([2, 1])
    yield* advanceTo(start + 200)
    // The third attempt failed too: the controller restarted and loaded again.
    expect(options.stores()).toBeGreaterThanOrEqual(3)
    expect(options.loads()).toBe(2)
  })

const backendDown = new QueueBackendError({ operation: "store", cause: "down" })

/** Sends one message to a handler that confirms it; once the producer counts it confirmed, no notice was published. */
const noNoticeForOneConfirmed = (
  producer: Producer.Producer<{ readonly n: number }>,
  endpoint: Consumer.Consumer<{ readonly n: number }>,
  confirmed: Effect.Effect<number, unknown, Needs>
): Check =>
  Effect.gen(function*() {
    const confirmations = yield* producer.subscribeConfirmations
    yield* Effect.forkScoped(endpoint.run(() => Effect.void))
    yield* Effect.forkScoped(producer.send({ n: 1 }))
    let count = 0
    for (let step = 0; step < 100 && count < 1; step++) {
      yield* advanceTo((yield* Effect.clockWith((clock) => clock.currentTimeMillis)) + 100)
      count = yield* confirmed
    }
    expect(count).toBe(1)
    expect(yield* Queue.size(confirmations)).toBe(0)
  })

interface Row {
  readonly option: string
  readonly side: string
  readonly seedDefault: string
  readonly observed: string
  readonly check: Check
}

const rows: ReadonlyArray<Row> = [
  {
    option: "window",
    side: "consumer",
    seedDefault: "50",
    observed: "the first request after binding asks up to seq 50",
    check: firstDemand("Producer", consumer)
  },
  {
    option: "window",
    side: "worker",
    seedDefault: "50",
    observed: "the first request after binding asks up to seq 50",
    check: firstDemand("WorkProducer", worker)
  },
  {
    option: "resendInterval",
    side: "consumer",
    seedDefault: "2s",
    observed: "an unanswered consumer registers again every 2s",
    check: registrationTimes("Producer", consumer)
  },
  {
    option: "resendInterval",
    side: "worker",
    seedDefault: "2s",
    observed: "an unanswered worker registers again every 2s",
    check: registrationTimes("WorkProducer", worker)
  },
  {
    option: "resendInterval",
    side: "consumer",
    seedDefault: "2s",
    observed: "a consumer whose producer went quiet asks again (a resend request) every 2s",
    check: Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Payload })
      const endpoint = yield* consumer
      yield* Effect.forkScoped(endpoint.run(() => Effect.void))
      yield* producer.send({ n: 7 })
      yield* settle
      const quietAt = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
      const resendRequests = Effect.map(recorded("Request"), (list) =>
        list.filter((entry) => entry.envelope.message.viaTimeout && entry.at > quietAt).map((entry) => entry.at))
      // The first tick (at 2s) still heard the send; from then on every tick hears nothing.
      yield* advanceTo(quietAt + 3_999)
      expect(yield* resendRequests).toEqual([])
      yield* advanceTo(quietAt + 8_000)
      expect(yield* resendRequests).toEqual([4_000, 6_000, 8_000])
    })
  },
  {
    option: "retryInterval",
    side: "producer",
    seedDefault: "500ms",
    observed: "an unanswered RequestNext is offered again 500ms later, not before",
    check: grantReoffer("Consumer", Producer.make({ name: "p", consumer: "c", payload: Payload }))
  },
  {
    option: "retryInterval",
    side: "work-pulling producer",
    seedDefault: "500ms",
    observed: "an unanswered RequestNext is offered again 500ms later, not before",
    check: grantReoffer("Worker", WorkPulling.producer({ name: "p", payload: Payload }))
  },
  {
    option: "queueRetry",
    side: "producer",
    seedDefault: "3 attempts, 100ms",
    observed: "a failing store is tried 3 times 100ms apart, then the controller restarts (loads again)",
    check: Effect.gen(function*() {
      const watched = spy(yield* MemoryProducerQueue.makeMemory)
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Payload, durableQueue: watched.queue })
      const endpoint = yield* consumer
      yield* Effect.forkScoped(endpoint.run(() => Effect.void))
      yield* producer.send({ n: 0 })
      const count = (operation: string) => watched.calls.filter((call) => call.operation === operation).length
      const storesBefore = count("store")
      yield* retriesThenRestart({
        failThree: () => watched.failNext("store", backendDown, 3),
        stores: () => count("store") - storesBefore,
        loads: () => count("load"),
        send: producer.send({ n: 1 })
      })
    })
  },
  {
    option: "queueRetry",
    side: "work-pulling producer",
    seedDefault: "3 attempts, 100ms",
    observed: "a failing store is tried 3 times 100ms apart, then the controller restarts (loads again)",
    check: Effect.gen(function*() {
      const watched = spyWork(yield* MemoryWorkQueue.makeWorkMemory)
      const producer = yield* WorkPulling.producer({ name: "p", payload: Payload, durableWorkQueue: watched.queue })
      const endpoint = yield* worker
      yield* Effect.forkScoped(endpoint.run(() => Effect.void))
      yield* producer.send({ n: 0 })
      const count = (operation: string) => watched.calls.filter((call) => call.operation === operation).length
      const storesBefore = count("storeAccepted")
      yield* retriesThenRestart({
        failThree: () => watched.failNext("storeAccepted", backendDown, 3),
        stores: () => count("storeAccepted") - storesBefore,
        loads: () => count("load"),
        send: producer.send({ n: 1 })
      })
    })
  },
  {
    option: "lookupTimeout",
    side: "system",
    seedDefault: "500ms",
    observed: "a lookup a silent node never answers is still pending at 499ms and unanswered at 500ms",
    check: Effect.gen(function*() {
      const context = yield* Layer.build(ReliableSystem.layer().pipe(
        Layer.provide(Layer.succeed(Transport, MemoryTransport.makeNode(MemoryTransport.makeHub(), "a")))
      ))
      const system = Context.get(context, ReliableSystem.ReliableSystem).internal
      const start = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
      const asking = yield* Effect.fork(system.lookup("orders-in", "silent"))
      yield* advanceTo(start + 499)
      expect(system.lookupStats()).toMatchObject({ pending: 1, unanswered: 0 })
      yield* advanceTo(start + 500)
      expect(asking.unsafePoll()).not.toBeNull()
      expect(yield* Fiber.join(asking)).toBeUndefined()
      expect(system.lookupStats()).toMatchObject({ pending: 0, unanswered: 1 })
    })
  },
  {
    option: "chunkSize",
    side: "producer",
    seedDefault: "off",
    observed: "a payload larger than the largest chunk size travels as one message without chunk marks",
    check: Effect.gen(function*() {
      const Bytes = Schema.Uint8ArrayFromSelf
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Bytes })
      const endpoint = yield* Consumer.make({ name: "c", producer: "p", payload: Bytes })
      const sizes: Array<number> = []
      yield* Effect.forkScoped(endpoint.run((delivery) => Effect.sync(() => void sizes.push(delivery.payload.length))))
      // 16 MiB: above every chunk size an option could give (at most 16 MiB - 64 KiB).
      const size = 16 * 1024 * 1024
      yield* Effect.forkScoped(producer.send(new Uint8Array(size).fill(7)))
      yield* advanceUntil(() => sizes.length === 1, 100, 10_000)
      expect(sizes).toEqual([size])
      const sent = yield* recorded("SequencedMessage")
      expect(sent.map((entry) => [entry.envelope.message.payload.length, entry.envelope.message.chunk])).toEqual([[size, undefined]])
    })
  },
  {
    option: "deliveryConfirmation",
    side: "producer",
    seedDefault: "off",
    observed: "a message the consumer confirmed publishes no DeliveryConfirmed",
    check: Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Payload })
      yield* noNoticeForOneConfirmed(producer, yield* consumer, Effect.map(producer.stats, (stats) => stats.confirmed))
    })
  },
  {
    option: "deliveryConfirmation",
    side: "work-pulling producer",
    seedDefault: "off",
    observed: "a job a worker confirmed publishes no DeliveryConfirmed",
    check: Effect.gen(function*() {
      const producer = yield* WorkPulling.producer({ name: "p", payload: Payload })
      yield* noNoticeForOneConfirmed(producer, yield* worker, Effect.map(WorkPulling.stats("p"), (stats) => stats.confirmed))
    })
  }
]

describe("option defaults, observed on flows made without the option", () => {
  for (const row of rows) {
    it.scoped(`${row.option} (${row.side}) defaults to ${row.seedDefault}: ${row.observed}`, () =>
      row.check.pipe(Effect.provide(layerRecording())))
  }
})
