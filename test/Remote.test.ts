/**
 * Remoting-only flows between two nodes in one process, each a reliable system on its own TCP
 * transport on 127.0.0.1 (live clock: real sockets). Peer resolution through node lookups,
 * start order both ways, a peer down for many resend intervals, restarted peers, payload Schemas
 * on both sides, the frame limit, garbage on the port, and configuration errors.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either, Fiber, Layer, Queue, Schema } from "effect"
import type { Scope } from "effect"
import * as Net from "node:net"
import * as Consumer from "../src/Consumer.js"
import { MaxFrameSize } from "../src/Transport/internal/FrameCodec.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { deliveryViolation } from "./support/Delivery.js"
import type { Received } from "./support/Delivery.js"
import { host, startNode, waitUntil } from "./support/Nodes.js"
import type { Node } from "./support/Nodes.js"

const Order = Schema.Struct({ id: Schema.Number })
type Order = typeof Order.Type
const Blob = Schema.Struct({ id: Schema.Number, data: Schema.String })

const fast = { resendInterval: "100 millis" } as const

const producerOn = (node: Node, peer: Node | number, options: Partial<Producer.ProducerOptions<Order, Order>> = {}) =>
  node.run(Producer.make({
    name: "orders-out",
    consumer: "orders-in",
    payload: Order,
    retryInterval: "50 millis",
    remoteConsumer: { host, port: typeof peer === "number" ? peer : peer.port },
    ...options
  }))

/** A consumer on `node` whose handler records every delivery under the given incarnation. */
const consumerOn = (node: Node, peer: Node | number, received: Array<Received>, incarnation: number, window = 20) =>
  Effect.gen(function*() {
    const consumer = yield* node.run(Consumer.make({
      name: "orders-in",
      producer: "orders-out",
      payload: Order,
      window,
      remoteProducer: { host, port: typeof peer === "number" ? peer : peer.port },
      ...fast
    }))
    yield* node.run(Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void received.push({ incarnation, index: delivery.payload.id })))))
    return consumer
  })

const sendRange = (producer: Producer.Producer<Order>, from: number, to: number) =>
  Effect.forEach(Array.from({ length: to - from }, (_, offset) => from + offset), (id) => producer.send({ id }, { messageId: `order-${id}` }), {
    discard: true
  })

const distinct = (received: ReadonlyArray<Received>) => new Set(received.map((entry) => entry.index)).size

describe("remoting-only flows (two nodes over TCP)", () => {
  it.scopedLive("a producer and a consumer on two nodes find each other by address, exactly once on the fault-free path", () =>
    Effect.gen(function*() {
      const a = yield* startNode()
      const b = yield* startNode()
      const producer = yield* producerOn(a, b)
      const received: Array<Received> = []
      const consumer = yield* consumerOn(b, a, received, 1)
      yield* sendRange(producer, 0, 500)
      yield* waitUntil("500 deliveries", () => received.length === 500)
      expect(deliveryViolation(received, 500, true)).toBeUndefined()
      // Every message once, none again. Lookups: the consumer resolving the producer, the producer
      // fencing the consumer; a consumer that heard nothing for a whole (100 ms) tick on a loaded
      // machine resolves its producer again (and, with no answer yet, registers again), so more
      // are fine as long as every one was answered.
      const stats = yield* consumer.stats
      expect(stats.registrations).toBeGreaterThanOrEqual(1)
      expect(stats.redelivered).toBe(0)
      const [onA, onB] = [a.system.internal.lookupStats(), b.system.internal.lookupStats()]
      expect(onA.asked).toBeGreaterThanOrEqual(1)
      expect(onB.asked).toBeGreaterThanOrEqual(1)
      expect(onA).toMatchObject({ answered: onA.asked, served: onB.asked, pending: 0 })
      expect(onB).toMatchObject({ answered: onB.asked, served: onA.asked, pending: 0 })
    }))

  it.scopedLive("consumer first: its node retries lookups while the producer's node is down, and the flow forms once it is up", () =>
    Effect.gen(function*() {
      const reserved = yield* startNode()
      const port = reserved.port
      yield* reserved.stop
      const b = yield* startNode({ lookupTimeout: "100 millis" })
      const received: Array<Received> = []
      yield* consumerOn(b, port, received, 1)
      // Down for many resend intervals: every one of these lookups went unanswered.
      yield* waitUntil("10 unanswered lookups", () => b.system.internal.lookupStats().unanswered >= 10)
      expect(received).toEqual([])
      const a = yield* startNode({ port })
      const producer = yield* producerOn(a, b)
      yield* sendRange(producer, 0, 50)
      yield* waitUntil("50 deliveries", () => received.length === 50)
      expect(deliveryViolation(received, 50, true)).toBeUndefined()
      expect(b.system.internal.lookupStats().pending).toBe(0)
    }))

  it.scopedLive("producer first: sends wait for demand while the consumer's node is down, then flow once it starts", () =>
    Effect.gen(function*() {
      const reserved = yield* startNode()
      const port = reserved.port
      yield* reserved.stop
      const a = yield* startNode()
      const producer = yield* producerOn(a, port)
      const sending = yield* Effect.fork(sendRange(producer, 0, 50))
      const downSince = Date.now()
      yield* waitUntil("several resend intervals", () => Date.now() - downSince >= 600)
      expect((yield* producer.stats).sent).toBe(0)
      const b = yield* startNode({ port })
      const received: Array<Received> = []
      yield* consumerOn(b, a, received, 1)
      yield* Fiber.join(sending)
      yield* waitUntil("50 deliveries", () => received.length === 50)
      expect(deliveryViolation(received, 50, true)).toBeUndefined()
    }))

  it.scopedLive("a consumer node down mid-flow for many resend intervals and restarted on its address resyncs; nothing is lost", () =>
    Effect.gen(function*() {
      const a = yield* startNode()
      let b = yield* startNode()
      const port = b.port
      const producer = yield* producerOn(a, b)
      const received: Array<Received> = []
      yield* consumerOn(b, a, received, 1, 10)
      const sending = yield* Effect.fork(sendRange(producer, 0, 400))
      yield* waitUntil("some deliveries", () => received.length >= 100)
      yield* b.stop
      const downSince = Date.now()
      yield* waitUntil("the producer node sees the connection gone", () => a.transport.stats().connectedPeers === 0)
      yield* waitUntil("ten resend intervals", () => Date.now() - downSince >= 1000)
      b = yield* startNode({ port })
      yield* consumerOn(b, a, received, 2, 10)
      yield* Fiber.join(sending)
      yield* waitUntil("every message", () => distinct(received) === 400)
      expect(deliveryViolation(received, 400)).toBeUndefined()
    }))

  it.scopedLive("a restarted producer node (new incarnation, new session) is found again by the consumer's lookups", () =>
    Effect.gen(function*() {
      let a = yield* startNode()
      const port = a.port
      const b = yield* startNode()
      let producer = yield* producerOn(a, b)
      const received: Array<Received> = []
      yield* consumerOn(b, a, received, 1)
      yield* sendRange(producer, 0, 20)
      yield* waitUntil("first 20", () => received.length === 20)
      yield* a.stop
      a = yield* startNode({ port })
      producer = yield* producerOn(a, b)
      yield* sendRange(producer, 20, 40)
      yield* waitUntil("all 40", () => received.length === 40)
      expect(deliveryViolation(received, 40, true)).toBeUndefined()
    }))

  it.scopedLive("a payload the consumer's Schema cannot decode is dead-lettered on the consumer's node; the flow goes on", () =>
    Effect.gen(function*() {
      const Picky = Schema.Struct({ id: Schema.Number }).pipe(Schema.filter((order) => order.id < 100 || "id too large"))
      const a = yield* startNode()
      const b = yield* startNode()
      const failures = yield* b.run(ReliableSystem.subscribeFailures)
      const deadLetters = yield* b.run(ReliableSystem.subscribeDeadLetters)
      const producer = yield* producerOn(a, b)
      const consumer = yield* b.run(Consumer.make({ name: "orders-in", producer: "orders-out", payload: Picky, remoteProducer: { host, port: a.port }, ...fast }))
      const seen: Array<number> = []
      yield* b.run(Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.id)))))
      yield* producer.send({ id: 1 })
      yield* producer.send({ id: 500 }, { messageId: "poison" })
      yield* producer.send({ id: 2 })
      const dead = yield* Queue.take(deadLetters).pipe(Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new Error("no dead letter") }))
      expect(dead).toMatchObject({ endpointName: "orders-in", messageId: "poison" })
      yield* waitUntil("the message after the dead letter", () => seen.includes(2))
      expect(seen).toEqual([1, 2])
      expect(yield* Queue.size(failures)).toBe(0)
    }))

  describe("frame limit", () => {
    it.scopedLive("a message above 16 MiB without chunking fails its send with FrameTooLarge; the flow carries on", () =>
      Effect.gen(function*() {
        const a = yield* startNode()
        const b = yield* startNode()
        const producer = yield* a.run(Producer.make({ name: "blobs-out", consumer: "blobs-in", payload: Blob, remoteConsumer: { host, port: b.port } }))
        const consumer = yield* b.run(Consumer.make({ name: "blobs-in", producer: "blobs-out", payload: Blob, remoteProducer: { host, port: a.port } }))
        const seen: Array<number> = []
        yield* b.run(Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.id)))))
        const error = yield* Effect.flip(producer.send({ id: 1, data: "x".repeat(MaxFrameSize + 1024) }, { messageId: "huge" }))
        expect(error._tag).toBe("FrameTooLarge")
        expect(error).toMatchObject({ messageId: "huge", maxFrameSize: MaxFrameSize })
        expect(error.message).toContain("chunkSize")
        // The refused message took nothing: the next send goes through at once, and a large one that fits does too.
        yield* producer.send({ id: 2, data: "small" })
        yield* producer.send({ id: 3, data: "y".repeat(MaxFrameSize - 64 * 1024) })
        yield* waitUntil("both delivered", () => seen.length === 2, Duration.seconds(30))
        expect(seen).toEqual([2, 3])
        expect(a.transport.stats().refusedOversize).toBe(0)
      }))

    it.scopedLive("whatever passes the producer's check fits its frame: the largest accepted message is delivered", () =>
      Effect.gen(function*() {
        const maxFrameSize = 8 * 1024
        const a = yield* startNode({ maxFrameSize })
        const b = yield* startNode({ maxFrameSize })
        const producer = yield* a.run(Producer.make({ name: "blobs-out", consumer: "blobs-in", payload: Blob, remoteConsumer: { host, port: b.port } }))
        const consumer = yield* b.run(Consumer.make({ name: "blobs-in", producer: "blobs-out", payload: Blob, remoteProducer: { host, port: a.port } }))
        const seen: Array<number> = []
        yield* b.run(Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.data.length)))))
        // Binary search for the largest payload the producer accepts; refusals store nothing.
        let low = 0
        let high = maxFrameSize
        while (low < high) {
          const size = Math.ceil((low + high) / 2)
          const attempt = yield* Effect.either(producer.send({ id: size, data: "z".repeat(size) }))
          if (Either.isRight(attempt)) {
            low = size
            seen.length = 0
          } else {
            expect(attempt.left._tag).toBe("FrameTooLarge")
            high = size - 1
          }
        }
        expect(low).toBeGreaterThan(maxFrameSize - 3 * 1024)
        yield* producer.send({ id: -1, data: "z".repeat(low) })
        yield* waitUntil("the largest accepted message", () => seen.includes(low))
        expect(a.transport.stats().refusedOversize).toBe(0)
      }))

    it.scopedLive("with chunking, a payload far above the frame limit crosses in chunks", () =>
      Effect.gen(function*() {
        const maxFrameSize = 64 * 1024
        const a = yield* startNode({ maxFrameSize })
        const b = yield* startNode({ maxFrameSize })
        const producer = yield* a.run(Producer.make({
          name: "blobs-out",
          consumer: "blobs-in",
          payload: Blob,
          chunkSize: 32 * 1024,
          remoteConsumer: { host, port: b.port }
        }))
        const consumer = yield* b.run(Consumer.make({ name: "blobs-in", producer: "blobs-out", payload: Blob, window: 50, remoteProducer: { host, port: a.port } }))
        const seen: Array<number> = []
        yield* b.run(Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.data.length)))))
        yield* producer.send({ id: 1, data: "c".repeat(1024 * 1024) })
        yield* waitUntil("the chunked message", () => seen.length === 1)
        expect(seen).toEqual([1024 * 1024])
        // Chunks that cannot fit the transport's frame could never cross: refused at construction.
        const error = yield* Effect.flip(a.run(Producer.make({
          name: "big-chunks",
          consumer: "blobs-in",
          payload: Blob,
          chunkSize: 62 * 1024,
          remoteConsumer: { host, port: b.port }
        })))
        expect(error).toMatchObject({ _tag: "ReliableConfigError", option: "chunkSize" })
      }))
  })

  it.scopedLive("garbage bytes on a node's port close that connection only; the flow carries on", () =>
    Effect.gen(function*() {
      const a = yield* startNode()
      const b = yield* startNode()
      const producer = yield* producerOn(a, b)
      const received: Array<Received> = []
      yield* consumerOn(b, a, received, 1)
      yield* sendRange(producer, 0, 50)
      for (const target of [a, b]) {
        yield* Effect.async<void>((resume) => {
          const socket = Net.createConnection({ host, port: target.port }, () => {
            socket.write(Buffer.from("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + "\u0000".repeat(64)))
          })
          socket.on("error", () => {})
          socket.on("close", () => resume(Effect.void))
        })
      }
      yield* sendRange(producer, 50, 100)
      yield* waitUntil("100 deliveries", () => received.length === 100)
      expect(deliveryViolation(received, 100, true)).toBeUndefined()
      expect(a.transport.stats().handshakesRefused + b.transport.stats().handshakesRefused).toBe(2)
    }))
})

describe("remoting configuration", () => {
  const memorySystem = ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))
  const tagOf = (effect: Effect.Effect<unknown, { readonly _tag: string; readonly option?: string }, any>) =>
    Effect.map(Effect.flip(effect), (error) => [error._tag, error.option])

  it.scoped("a peer address needs a remoting transport", () =>
    Effect.gen(function*() {
      expect(yield* tagOf(Producer.make({ name: "p", consumer: "c", payload: Order, remoteConsumer: { host, port: 7000 } })))
        .toEqual(["ReliablePeerRemotingRequired", "remoteConsumer"])
      expect(yield* tagOf(Consumer.make({ name: "c", producer: "p", payload: Order, remoteProducer: { host, port: 7000 } })))
        .toEqual(["ReliablePeerRemotingRequired", "remoteProducer"])
      // The names were never claimed: the same endpoints without peer addresses are fine.
      yield* Producer.make({ name: "p", consumer: "c", payload: Order })
      yield* Consumer.make({ name: "c", producer: "p", payload: Order })
    }).pipe(Effect.provide(memorySystem)))

  it.scoped("a peer address on a clustered system is a conflict", () =>
    Effect.gen(function*() {
      const system = yield* ReliableSystem.ReliableSystem
      const clustered = Layer.succeed(ReliableSystem.ReliableSystem, { ...system, internal: { ...system.internal, clustered: true } })
      const check = <A, E>(effect: Effect.Effect<A, E, ReliableSystem.ReliableSystem | Scope.Scope>) => Effect.provide(effect, clustered)
      expect(yield* tagOf(check(Producer.make({ name: "p", consumer: "c", payload: Order, remoteConsumer: { host, port: 7000 } }))))
        .toEqual(["ReliablePeerClusterConflict", "remoteConsumer"])
      expect(yield* tagOf(check(Consumer.make({ name: "c", producer: "p", payload: Order, remoteProducer: { host, port: 7000 } }))))
        .toEqual(["ReliablePeerClusterConflict", "remoteProducer"])
    }).pipe(Effect.provide(memorySystem)))

  it.scopedLive("malformed peer addresses and work-pulling workers with a peer address are rejected", () =>
    Effect.gen(function*() {
      const a = yield* startNode()
      yield* a.run(Effect.gen(function*() {
        expect(yield* tagOf(Producer.make({ name: "p", consumer: "c", payload: Order, remoteConsumer: { host: " ", port: 7000 } })))
          .toEqual(["ReliableConfigError", "remoteConsumer.host"])
        expect(yield* tagOf(Producer.make({ name: "p", consumer: "c", payload: Order, remoteConsumer: { host, port: 0 } })))
          .toEqual(["ReliableConfigError", "remoteConsumer.port"])
        expect(yield* tagOf(Consumer.make({ name: "c", producer: "p", payload: Order, remoteProducer: { host, port: 70_000 } })))
          .toEqual(["ReliableConfigError", "remoteProducer.port"])
        const worker = { name: "w", producer: "d", payload: Order, remoteProducer: { host, port: 7000 } }
        expect(yield* tagOf(WorkPulling.worker(worker as WorkPulling.WorkerOptions<Order, Order>)))
          .toEqual(["ReliableConfigError", "remoteProducer"])
        yield* Producer.make({ name: "p", consumer: "c", payload: Order, remoteConsumer: { host, port: 7000 } })
      }))
    }))

  it.scopedLive("a flow follows one resolution authority: a local consumer cannot register with a producer configured for a remote one", () =>
    Effect.gen(function*() {
      const a = yield* startNode()
      const b = yield* startNode()
      const producer = yield* producerOn(a, b)
      const received: Array<Received> = []
      // Same names, but on the producer's own node: the producer asks node b, which has no such consumer.
      const local = yield* a.run(Consumer.make({ name: "orders-in", producer: "orders-out", payload: Order, ...fast }))
      yield* a.run(Effect.forkScoped(local.run((delivery) => Effect.sync(() => void received.push({ incarnation: 0, index: delivery.payload.id })))))
      const sending = yield* Effect.fork(producer.send({ id: 1 }))
      yield* waitUntil("several registrations refused", () => a.system.internal.lookupStats().answered >= 3)
      expect(received).toEqual([])
      expect((yield* producer.stats).dropped).toBeGreaterThan(0)
      yield* consumerOn(b, a, received, 1)
      yield* Fiber.join(sending)
      yield* waitUntil("delivered on the configured node", () => received.length === 1)
      expect(received).toEqual([{ incarnation: 1, index: 1 }])
    }))
})
