/**
 * Every timer rule, driven by TestClock: each fires at its configured interval and not before.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Option, Queue, Schema, Stream } from "effect"
import { Produced, StoredAck } from "../src/Protocol/Contract.js"
import * as Consumer from "../src/Consumer.js"
import * as Producer from "../src/Producer.js"
import { addressOf, advanceTo, drain, fakeEndpoint, inject, layerRecording, recorded, settle } from "./support/Harness.js"

const Payload = Schema.Struct({ n: Schema.Number })

describe("timers", () => {
  it.scoped("a consumer without a session re-registers every resend interval, not before", () =>
    Effect.gen(function*() {
      yield* fakeEndpoint("p", "Producer", "c")
      yield* Consumer.make({ name: "c", producer: "p", payload: Payload, resendInterval: "1 second" })
      yield* settle
      const count = () => Effect.map(recorded("RegisterConsumer"), (list) => list.length)
      expect(yield* count()).toBe(1)
      yield* advanceTo(999)
      expect(yield* count()).toBe(1)
      yield* advanceTo(1000)
      expect(yield* count()).toBe(2)
      yield* advanceTo(1999)
      expect(yield* count()).toBe(2)
      yield* advanceTo(2000)
      const registrations = yield* recorded("RegisterConsumer")
      expect(registrations.map((entry) => entry.at)).toEqual([0, 1000, 2000])
      // Each registration carries a fresh nonce.
      expect(new Set(registrations.map((entry) => entry.envelope.message.nonce)).size).toBe(3)
    }).pipe(Effect.provide(layerRecording())))

  it.scoped("a consumer with a silent producer asks again on the first tick without traffic; it registers again only with a new producer controller", () =>
    Effect.gen(function*() {
      const fake = yield* fakeEndpoint("p", "Producer", "c")
      yield* Consumer.make({ name: "c", producer: "p", payload: Payload, resendInterval: "1 second" })
      yield* settle
      const [registration] = yield* drain(fake.inbox)
      const consumer = registration.from
      yield* inject(fake.address, consumer, { _tag: "RegistrationAck", sessionId: "s1", nextSeq: 1, nonce: (registration.message as { nonce: string }).nonce })
      yield* settle
      // Traffic since the last tick: the tick at 1s stays quiet; the tick at 2s asks again for
      // what it requested (a resend request) and finds the same producer controller.
      yield* advanceTo(1000)
      const resendRequests = Effect.map(recorded("Request"), (list) => list.filter((entry) => entry.envelope.message.viaTimeout && entry.at > 0).map((entry) => entry.at))
      expect(yield* resendRequests).toEqual([])
      yield* advanceTo(2000)
      expect(yield* resendRequests).toEqual([2000])
      expect((yield* recorded("RegisterConsumer")).map((entry) => entry.at)).toEqual([0])
    }).pipe(Effect.provide(layerRecording())))

  it.scoped("a quiet, healthy flow registers once in 60 seconds, even while the consumer holds its only delivery", () =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Payload })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Payload })
      const held: Array<number> = []
      yield* Effect.forkScoped(Stream.runForEach(consumer.deliveries, (delivery) => Effect.sync(() => void held.push(delivery.payload.n))))
      yield* producer.send({ n: 1 })
      yield* advanceTo(60_000)
      expect(held).toEqual([1])
      expect((yield* recorded("RegisterConsumer")).length).toBe(1)
      expect((yield* consumer.stats).registrations).toBe(1)
    }).pipe(Effect.provide(layerRecording())))

  it.scoped("a gap asks for a resend at once, then again each resend interval while it stays open", () =>
    Effect.gen(function*() {
      const fake = yield* fakeEndpoint("p", "Producer", "c")
      yield* Consumer.make({ name: "c", producer: "p", payload: Payload, resendInterval: "1 second", window: 10 })
      yield* settle
      const [registration] = yield* drain(fake.inbox)
      const consumer = registration.from
      yield* inject(fake.address, consumer, { _tag: "RegistrationAck", sessionId: "s1", nextSeq: 1, nonce: (registration.message as { nonce: string }).nonce })
      yield* advanceTo(100)
      yield* inject(fake.address, consumer, {
        _tag: "SequencedMessage",
        sessionId: "s1",
        messageId: "m2",
        seq: 2,
        payload: new TextEncoder().encode(JSON.stringify({ n: 2 }))
      })
      yield* settle
      const timeouts = () => Effect.map(recorded("Request"), (list) => list.filter((e) => e.envelope.message.viaTimeout).map((e) => e.at))
      // The request after registration (at 0), then the gap request at once (at 100).
      expect(yield* timeouts()).toEqual([0, 100])
      yield* advanceTo(1000)
      expect(yield* timeouts()).toEqual([0, 100])
      yield* advanceTo(2000)
      expect(yield* timeouts()).toEqual([0, 100, 2000])
    }).pipe(Effect.provide(layerRecording())))

  it.scoped("a slow stream consumer is never handed a delivery again while it works on it: no redeliveries on a fault-free flow", () =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Payload })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Payload, resendInterval: "1 second" })
      const seen: Array<number> = []
      // Three seconds per delivery against a one-second resend interval.
      yield* Effect.forkScoped(Stream.runForEach(consumer.deliveries, (delivery) =>
        Effect.zipRight(Effect.sleep("3 seconds"), Effect.zipRight(Effect.sync(() => void seen.push(delivery.payload.n)), delivery.confirm))))
      yield* Effect.forkScoped(Effect.forEach([1, 2, 3, 4, 5], (n) => producer.send({ n }), { discard: true }))
      yield* advanceTo(60_000)
      expect(seen).toEqual([1, 2, 3, 4, 5])
      expect((yield* consumer.stats).redelivered).toBe(0)
    }).pipe(Effect.provide(layerRecording())))

  it.scoped("an unanswered RequestNext is offered again with the same token after the retry interval, not before", () =>
    Effect.gen(function*() {
      const fake = yield* fakeEndpoint("c", "Consumer", "p")
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Payload, retryInterval: "500 millis" })
      yield* settle
      const address = yield* addressOf("p")
      yield* inject(fake.address, address, { _tag: "RegisterConsumer", nonce: "n1" })
      yield* settle
      const [ack] = yield* drain(fake.inbox)
      const sessionId = (ack.message as { sessionId: string }).sessionId
      yield* inject(fake.address, address, { _tag: "Request", sessionId, nonce: "n1", confirmedSeq: 0, requestUpToSeq: 5, viaTimeout: false })
      yield* settle
      const grant = yield* producer.requestNext
      const again = yield* Effect.fork(producer.requestNext)
      yield* advanceTo(499)
      expect(Option.isNone(yield* Fiber.poll(again))).toBe(true)
      yield* advanceTo(500)
      const retried = yield* Fiber.join(again)
      expect(retried.token).toBe(grant.token)
    }).pipe(Effect.provide(layerRecording())))

  it.scoped("an unacknowledged Stored is offered again after the retry interval and answered with the same Stored", () =>
    Effect.gen(function*() {
      const fake = yield* fakeEndpoint("c", "Consumer", "p")
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Payload, retryInterval: "500 millis" })
      yield* settle
      const address = yield* addressOf("p")
      yield* inject(fake.address, address, { _tag: "RegisterConsumer", nonce: "n1" })
      yield* settle
      const sessionId = ((yield* drain(fake.inbox))[0].message as { sessionId: string }).sessionId
      yield* inject(fake.address, address, { _tag: "Request", sessionId, nonce: "n1", confirmedSeq: 0, requestUpToSeq: 5, viaTimeout: false })
      yield* settle
      const grant = yield* producer.requestNext
      yield* advanceTo(100)
      const stored = yield* producer.produce(Produced.make(grant, "m1", { n: 1 }))
      const resent = yield* Effect.fork(producer.requestNext)
      yield* advanceTo(599)
      expect(Option.isNone(yield* Fiber.poll(resent))).toBe(true)
      yield* advanceTo(600)
      const retried = yield* Fiber.join(resent)
      expect(retried.token).toBe(grant.token)
      // The retried grant must receive the same Produced, which answers the same Stored.
      expect(yield* producer.produce(Produced.make(retried, "m1", { n: 1 }))).toEqual(stored)
      yield* producer.storedAck(StoredAck.make(stored))
      yield* settle
      const messages = (yield* drain(fake.inbox)).filter((envelope) => envelope.message._tag === "SequencedMessage")
      expect(messages).toHaveLength(1)
      expect(yield* Queue.size(fake.inbox)).toBe(0)
    }).pipe(Effect.provide(layerRecording())))
})
