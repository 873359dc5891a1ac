/**
 * The public endpoints end to end on the memory transport: contract misuse, terminal failures and
 * respawn, restarts of either side, start order, and configuration checks.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Layer, Queue, Schema, Scope } from "effect"
import * as Consumer from "../src/Consumer.js"
import { Produced, RequestNext, StoredAck } from "../src/Protocol/Contract.js"
import { decodeEnvelope } from "../src/Protocol/WireMessage.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { addressOf, advanceBy, advanceUntil, settle } from "./support/Harness.js"

const Order = Schema.Struct({ id: Schema.Number })
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

/** Collects what a consumer's `run` handler sees. */
const collect = <A>(consumer: Consumer.Consumer<A>) =>
  Effect.gen(function*() {
    const seen: Array<A> = []
    const fiber = yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload))))
    return { seen, fiber }
  })

describe("endpoints", () => {
  describe("contract misuse", () => {
    it.scoped("answers misuse with typed errors and keeps the flow running", () =>
      Effect.gen(function*() {
        const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
        const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
        const { seen } = yield* collect(consumer)
        const grant = yield* producer.requestNext
        const reason = (effect: Effect.Effect<unknown, { readonly _tag: string; readonly reason?: string }>) =>
          Effect.map(Effect.flip(effect), (error) => error.reason)
        expect(yield* reason(producer.produce(Produced.make(grant, "", { id: 1 })))).toBe("BlankMessageId")
        expect(yield* reason(producer.produce(Produced.make(grant, "ReliableChunk:0/1:x", { id: 1 })))).toBe("ReservedMessageId")
        expect(yield* reason(producer.produce(Produced.make(grant, "m", undefined as never)))).toBe("MissingPayload")
        expect(yield* reason(producer.produce(Produced.make(new RequestNext({ ...grant, endpoint: "q" }), "m", { id: 1 })))).toBe("ForeignGrant")
        expect(yield* reason(producer.produce(Produced.make(new RequestNext({ ...grant, token: "nope" }), "m", { id: 1 })))).toBe("StaleGrant")
        const stored = yield* producer.produce(Produced.make(grant, "m1", { id: 1 }))
        expect(yield* reason(producer.produce(Produced.make(grant, "m2", { id: 2 })))).toBe("TokenAlreadyAnswered")
        expect(yield* reason(producer.storedAck(StoredAck.make({ ...stored, seq: 99 } as never)))).toBe("UnknownStored")
        yield* producer.storedAck(StoredAck.make(stored))
        yield* producer.storedAck(StoredAck.make(stored))
        yield* producer.send({ id: 2 })
        yield* advanceUntil(() => seen.length === 2, 100, 10_000)
        expect(seen).toEqual([{ id: 1 }, { id: 2 }])
      }).pipe(Effect.provide(system())))

    it.scoped("a grant of an earlier controller is stale after respawn", () =>
      Effect.gen(function*() {
        const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
        yield* Consumer.make({ name: "c", producer: "p", payload: Order })
        const grant = yield* producer.requestNext
        yield* ReliableSystem.respawn("p")
        const error = yield* Effect.flip(producer.produce(Produced.make(grant, "m1", { id: 1 })))
        expect(error).toMatchObject({ _tag: "ProducerContractError", reason: "StaleGrant" })
      }).pipe(Effect.provide(system())))

    it.scoped("drops and counts messages of the wrong direction or from a stale session", () =>
      Effect.gen(function*() {
        const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
        const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
        const { seen } = yield* collect(consumer)
        yield* producer.send({ id: 1 })
        yield* advanceUntil(() => seen.length === 1, 100, 10_000)
        const systemService = yield* ReliableSystem.ReliableSystem
        const producerAddress = yield* addressOf("p")
        const consumerAddress = yield* addressOf("c")
        systemService.internal.transport.post([
          { from: consumerAddress, to: producerAddress, message: { _tag: "RegistrationAck", sessionId: "x", nextSeq: 1, nonce: "n" } },
          { from: consumerAddress, to: producerAddress, message: { _tag: "Ack", sessionId: "old-session", nonce: "n", confirmedSeq: 1 } }
        ])
        yield* settle
        expect((yield* producer.stats).dropped).toBe(2)
        yield* producer.send({ id: 2 })
        yield* advanceUntil(() => seen.length === 2, 100, 10_000)
      }).pipe(Effect.provide(system())))

    it("rejects malformed envelopes at the decoding boundary", () => {
      expect(decodeEnvelope({ from: {}, to: {}, message: { _tag: "Request" } })).toBeUndefined()
      expect(decodeEnvelope("garbage")).toBeUndefined()
      const address = { node: "n", endpoint: "e", incarnation: "i" }
      expect(decodeEnvelope({ from: address, to: address, message: { _tag: "Ack", sessionId: "s", nonce: "n", confirmedSeq: -1 } })).toBeUndefined()
      expect(decodeEnvelope({ from: address, to: address, message: { _tag: "Ack", sessionId: "s", nonce: "n", confirmedSeq: 3 } })).toBeDefined()
    })
  })

  describe("terminal failures", () => {
    it.scoped("a payload that fails to encode fails that send only: nothing stored, no event, the flow goes on", () =>
      Effect.gen(function*() {
        const Whole = Schema.Struct({ id: Schema.Int })
        const failures = yield* ReliableSystem.subscribeFailures
        const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Whole })
        const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Whole })
        const { seen } = yield* collect(consumer)
        const error = yield* Effect.flip(producer.send({ id: 1.5 }))
        expect(error).toMatchObject({ _tag: "PayloadEncodeError", endpointName: "p" })
        // The very next send goes through: nothing stopped, nothing was published.
        yield* producer.send({ id: 2 })
        yield* advanceUntil(() => seen.length === 1, 100, 5_000)
        expect(seen).toEqual([{ id: 2 }])
        // sendAll checks the whole batch before storing anything: all or nothing.
        const batch = yield* Effect.flip(producer.sendAll([{ payload: { id: 3 } }, { payload: { id: 3.5 } }, { payload: { id: 4 } }]))
        expect(batch._tag).toBe("PayloadEncodeError")
        yield* producer.sendAll([{ payload: { id: 5 } }, { payload: { id: 6 } }])
        yield* advanceUntil(() => seen.length === 3, 100, 5_000)
        expect(seen).toEqual([{ id: 2 }, { id: 5 }, { id: 6 }])
        expect(yield* Queue.size(failures)).toBe(0)
      }).pipe(Effect.provide(system())))

    it.scoped("on the contract path a payload that fails to encode fails that produce; the grant stays good", () =>
      Effect.gen(function*() {
        const Whole = Schema.Struct({ id: Schema.Int })
        const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Whole })
        const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Whole })
        const { seen } = yield* collect(consumer)
        const grant = yield* producer.requestNext
        expect((yield* Effect.flip(producer.produce(Produced.make(grant, "m-1", { id: 0.5 }))))._tag).toBe("PayloadEncodeError")
        const stored = yield* producer.produce(Produced.make(grant, "m-1", { id: 1 }))
        yield* producer.storedAck(StoredAck.make(stored))
        yield* advanceUntil(() => seen.length === 1, 100, 5_000)
        expect(seen).toEqual([{ id: 1 }])
      }).pipe(Effect.provide(system())))

    it.scoped("a payload the consumer cannot decode is dead-lettered: one event, no failure, the flow goes on in order", () =>
      Effect.gen(function*() {
        const Picky = Schema.Struct({ id: Schema.Number }).pipe(Schema.filter((order) => order.id < 100 || "id too large"))
        const failures = yield* ReliableSystem.subscribeFailures
        const deadLetters = yield* ReliableSystem.subscribeDeadLetters
        const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, deliveryConfirmation: true })
        const confirmations = yield* producer.subscribeConfirmations
        const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Picky })
        const { seen } = yield* collect(consumer)
        yield* producer.sendAll([{ payload: { id: 1 } }, { payload: { id: 500 }, messageId: "poison" }, { payload: { id: 2 } }])
        yield* advanceUntil(() => seen.length === 2, 100, 10_000)
        yield* advanceBy(1_000, 100)
        expect(seen).toEqual([{ id: 1 }, { id: 2 }])
        const dead = Chunk.toReadonlyArray(yield* Queue.takeAll(deadLetters))
        expect(dead).toHaveLength(1)
        expect(dead[0]).toMatchObject({ _tag: "DeliveryDeadLettered", endpointName: "c", messageId: "poison", attempts: 0 })
        expect((dead[0].cause as { readonly _tag: string })._tag).toBe("PayloadDecodeError")
        expect(yield* Queue.size(failures)).toBe(0)
        // The dead letter is settled, not confirmed as processed.
        expect(Chunk.toReadonlyArray(yield* Queue.takeAll(confirmations)).map((c) => c.messageId)).not.toContain("poison")
      }).pipe(Effect.provide(system())))

    it.scoped("respawn of an unknown endpoint is a typed error", () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(ReliableSystem.respawn("nobody"))
        expect(error).toMatchObject({ _tag: "EndpointNotFound", name: "nobody" })
      }).pipe(Effect.provide(system())))
  })

  describe("restarts and start order", () => {
    it.scoped("a consumer restarted under the same name resyncs and continues, at least once", () =>
      Effect.gen(function*() {
        const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
        const seen: Array<number> = []
        const start = Effect.gen(function*() {
          const scope = yield* Scope.make()
          const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order, window: 4 }).pipe(Scope.extend(scope))
          yield* Effect.forkIn(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.id))), scope)
          return scope
        })
        let scope = yield* start
        yield* Effect.forkScoped(Effect.forEach(Array.from({ length: 20 }, (_, id) => id), (id) => producer.send({ id }), { discard: true }))
        yield* advanceUntil(() => seen.length >= 7, 100, 10_000)
        yield* Scope.close(scope, Exit.void)
        scope = yield* start
        yield* advanceUntil(() => new Set(seen).size === 20, 100, 30_000)
        expect(seen.slice(-1)[0]).toBe(19)
        yield* Scope.close(scope, Exit.void)
      }).pipe(Effect.provide(system())))

    it.scoped("a producer respawned without a durable queue once everything was confirmed: the flow resumes in order", () =>
      Effect.gen(function*() {
        const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
        const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
        const { seen } = yield* collect(consumer)
        for (let id = 0; id < 5; id++) yield* producer.send({ id })
        yield* advanceUntil(() => seen.length === 5, 100, 10_000)
        yield* ReliableSystem.respawn("p")
        // The new controller has a new session: sends wait until the consumer re-registers on its tick.
        yield* Effect.forkScoped(Effect.forEach([5, 6, 7, 8, 9], (id) => producer.send({ id }), { discard: true }))
        yield* advanceUntil(() => seen.length === 10, 100, 20_000)
        expect(seen.map((order) => order.id)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
      }).pipe(Effect.provide(system())))

    it.scoped.each(["consumer first", "producer first"])("endpoints started %s connect", (order) =>
      Effect.gen(function*() {
        const makeProducer = Producer.make({ name: "p", consumer: "c", payload: Order })
        const makeConsumer = Consumer.make({ name: "c", producer: "p", payload: Order })
        let consumer: Consumer.Consumer<{ readonly id: number }>
        let producer: Producer.Producer<{ readonly id: number }>
        if (order === "consumer first") {
          consumer = yield* makeConsumer
          yield* advanceBy(3_000, 500)
          producer = yield* makeProducer
        } else {
          producer = yield* makeProducer
          yield* advanceBy(3_000, 500)
          consumer = yield* makeConsumer
        }
        const { seen } = yield* collect(consumer)
        yield* Effect.forkScoped(producer.send({ id: 1 }))
        yield* advanceUntil(() => seen.length === 1, 100, 10_000)
      }).pipe(Effect.provide(system())))
  })

  describe("configuration", () => {
    const option = (effect: Effect.Effect<unknown, { readonly _tag: string; readonly option?: string }, any>) =>
      Effect.map(Effect.flip(effect), (error) => [error._tag, error.option])

    it.scoped("rejects bad options with typed errors", () =>
      Effect.gen(function*() {
        const consumer = (overrides: Partial<Consumer.ConsumerOptions<{ readonly id: number }, { readonly id: number }>>) =>
          Consumer.make({ name: "c", producer: "p", payload: Order, ...overrides })
        const producer = (overrides: Partial<Producer.ProducerOptions<{ readonly id: number }, { readonly id: number }>>) =>
          Producer.make({ name: "p", consumer: "c", payload: Order, ...overrides })
        expect(yield* option(consumer({ window: 0 }))).toEqual(["ReliableConfigError", "window"])
        expect(yield* option(consumer({ window: 10_001 }))).toEqual(["ReliableConfigError", "window"])
        expect(yield* option(consumer({ window: 1.5 }))).toEqual(["ReliableConfigError", "window"])
        expect(yield* option(consumer({ resendInterval: 0 }))).toEqual(["ReliableConfigError", "resendInterval"])
        expect(yield* option(consumer({ resendInterval: "-1 seconds" as never }))).toEqual(["ReliableConfigError", "resendInterval"])
        expect(yield* option(consumer({ name: " " }))).toEqual(["ReliableConfigError", "name"])
        expect(yield* option(consumer({ producer: "" }))).toEqual(["ReliableConfigError", "producer"])
        expect(yield* option(producer({ retryInterval: "0 millis" }))).toEqual(["ReliableConfigError", "retryInterval"])
        expect(yield* option(producer({ chunkSize: 100 }))).toEqual(["ReliableConfigError", "chunkSize"])
        expect(yield* option(producer({ queueRetry: { attempts: 0, interval: "1 second" } }))).toEqual(["ReliableConfigError", "queueRetry.attempts"])
        yield* consumer({ window: 10_000 })
        expect(yield* option(consumer({}))).toEqual(["ReliableConfigError", "name"])
        expect(yield* option(producer({ name: "c" }))).toEqual(["ReliableConfigError", "name"])
      }).pipe(Effect.provide(system())))

    it.scoped("a name is free again once its endpoint's scope closes", () =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        yield* Consumer.make({ name: "c", producer: "p", payload: Order }).pipe(Scope.extend(scope))
        yield* Scope.close(scope, Exit.void)
        yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      }).pipe(Effect.provide(system())))
  })
})
