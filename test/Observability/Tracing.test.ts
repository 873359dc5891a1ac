/**
 * One trace from send to confirm: with an OpenTelemetry tracer installed (spans kept by an
 * in-memory exporter), a message's delivery span is a child of its send span, its confirm span a
 * child of the delivery span, and the producer's confirmed span a child of the send span; a
 * durable store's span is a child of the send span it serves. Across the memory transport, TCP
 * between two nodes, a durable queue's reload by a new producer, the contract's `produce`,
 * `deliveries` and `stream` takes, and work-pulling.
 */
import { NodeSdk } from "@effect/opentelemetry"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import type { ReadableSpan } from "@opentelemetry/sdk-trace-base"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Layer, Schema, Scope, Stream } from "effect"
import * as Consumer from "../../src/Consumer.js"
import * as MemoryProducerQueue from "../../src/DurableQueue/MemoryProducerQueue.js"
import * as MemoryWorkQueue from "../../src/DurableQueue/MemoryWorkQueue.js"
import { SpanNames } from "../../src/Observability/Tracing.js"
import * as Producer from "../../src/Producer.js"
import { Produced, StoredAck } from "../../src/Protocol/Contract.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as MemoryTransport from "../../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../../src/WorkPulling.js"
import { advanceUntil, settle } from "../support/Harness.js"
import { host, startNode, waitUntil } from "../support/Nodes.js"

const Order = Schema.Struct({ index: Schema.Number })

const tracing = (exporter: InMemorySpanExporter) =>
  NodeSdk.layer(() => ({ resource: { serviceName: "effect-reliable-test" }, spanProcessor: new SimpleSpanProcessor(exporter) }))

const memorySystem = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

const named = (exporter: InMemorySpanExporter, name: string) => exporter.getFinishedSpans().filter((span) => span.name === name)
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId
const messageIdOf = (span: ReadableSpan) => span.attributes["messaging.message.id"]

const spanIdOf = (span: ReadableSpan) => span.spanContext().spanId

/**
 * For each send span (by message id): the delivery span under it, the confirm span under that,
 * and the producer's confirmed span under the send span, all in its trace.
 */
const expectChains = (exporter: InMemorySpanExporter, messageIds: ReadonlyArray<string>, sendName: string = SpanNames.send) => {
  const sends = named(exporter, sendName)
  const delivers = named(exporter, SpanNames.deliver)
  const confirms = named(exporter, SpanNames.confirm)
  const confirmed = named(exporter, SpanNames.confirmed)
  for (const messageId of messageIds) {
    const send = sends.find((span) => messageIdOf(span) === messageId)
    expect(send, `${sendName} span of ${messageId}`).toBeDefined()
    const traceId = send!.spanContext().traceId
    const under = delivers.filter((span) => messageIdOf(span) === messageId && parentOf(span) === spanIdOf(send!))
    expect(under.length, `deliver spans of ${messageId} under its send span`).toBeGreaterThan(0)
    for (const deliver of under) expect(deliver.spanContext().traceId).toBe(traceId)
    // The delivery that succeeded (an interrupted one has no confirm).
    const done = under.filter((deliver) => confirms.some((span) => parentOf(span) === spanIdOf(deliver)))
    expect(done.length, `confirm span of ${messageId} under a deliver span`).toBe(1)
    const told = confirmed.filter((span) => messageIdOf(span) === messageId)
    expect(told.length, `confirmed span of ${messageId}`).toBe(1)
    expect(parentOf(told[0]), `confirmed span of ${messageId} under its send span`).toBe(spanIdOf(send!))
    expect(told[0].spanContext().traceId).toBe(traceId)
  }
  return delivers
}

/** The durable queue's store spans: each a child of the send span of a message it stored. */
const expectStoresUnderSends = (exporter: InMemorySpanExporter, messageIds: ReadonlyArray<string>) => {
  const sends = named(exporter, SpanNames.send).filter((span) => messageIds.includes(messageIdOf(span) as string))
  const stores = named(exporter, SpanNames.queue).filter((span) => span.attributes["effect_reliable.operation"] === "store")
  for (const send of sends) {
    const under = stores.filter((span) => parentOf(span) === spanIdOf(send))
    expect(under.length, `store span under the send span of ${messageIdOf(send)}`).toBe(1)
    expect(under[0].spanContext().traceId).toBe(send.spanContext().traceId)
  }
  expect(sends.length).toBe(messageIds.length)
}

describe("traces across the wire", () => {
  it.scoped("memory transport: send -> deliver -> confirm, one trace per message", () => {
    const exporter = new InMemorySpanExporter()
    return Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "out", consumer: "in", payload: Order })
      const consumer = yield* Consumer.make({ name: "in", producer: "out", payload: Order })
      const seen: Array<number> = []
      yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.index))))
      yield* settle
      yield* Effect.forEach([0, 1, 2], (index) => producer.send({ index }, { messageId: `m-${index}` }), { discard: true })
      yield* advanceUntil(() => seen.length === 3 && named(exporter, SpanNames.confirmed).length === 3, 10, 10_000)
      expectChains(exporter, ["m-0", "m-1", "m-2"])
    }).pipe(Effect.provide(memorySystem()), Effect.provide(tracing(exporter)))
  })

  it.scopedLive("TCP transport between two nodes: the delivery span on the consumer's node is a child of the send span", () => {
    const exporter = new InMemorySpanExporter()
    return Effect.gen(function*() {
      const a = yield* startNode()
      const b = yield* startNode()
      const producer = yield* a.run(Producer.make({ name: "out", consumer: "in", payload: Order, remoteConsumer: { host, port: b.port } }))
      const consumer = yield* b.run(Consumer.make({ name: "in", producer: "out", payload: Order, remoteProducer: { host, port: a.port } }))
      const seen: Array<number> = []
      yield* b.run(Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.index)))))
      yield* Effect.forEach([0, 1, 2], (index) => producer.send({ index }, { messageId: `t-${index}` }), { discard: true })
      yield* waitUntil("three confirmed spans", () => seen.length === 3 && named(exporter, SpanNames.confirmed).length === 3, 20_000)
      expectChains(exporter, ["t-0", "t-1", "t-2"])
    }).pipe(Effect.provide(tracing(exporter)))
  }, 30_000)

  it.scoped("durable reload: a new producer on the queue delivers the stored message under its original send span", () => {
    const exporter = new InMemorySpanExporter()
    return Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      // A first producer stores and sends the message; its consumer's handler never finishes.
      const first = yield* Scope.make()
      const stalled = yield* Scope.make()
      yield* Consumer.make({ name: "in", producer: "out", payload: Order, drainTimeout: "10 millis" }).pipe(
        Scope.extend(stalled),
        Effect.flatMap((consumer) => Effect.forkIn(consumer.run(() => Effect.never), stalled))
      )
      yield* Producer.make({ name: "out", consumer: "in", payload: Order, durableQueue: queue }).pipe(
        Scope.extend(first),
        Effect.flatMap((producer) => Effect.forkIn(producer.send({ index: 7 }, { messageId: "kept" }), first))
      )
      yield* advanceUntil(() => named(exporter, SpanNames.send).length === 1, 10, 10_000)
      yield* Effect.forkScoped(Scope.close(stalled, Exit.void))
      yield* advanceUntil(() => named(exporter, SpanNames.deliver).length === 1, 10, 10_000)
      yield* Scope.close(first, Exit.void)

      // A new producer reloads it from the queue and a new consumer confirms it.
      const producer = yield* Producer.make({ name: "out", consumer: "in", payload: Order, durableQueue: queue })
      const consumer = yield* Consumer.make({ name: "in", producer: "out", payload: Order })
      const seen: Array<number> = []
      yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.index))))
      yield* advanceUntil(() => seen.length === 1 && named(exporter, SpanNames.confirmed).length === 1, 10, 10_000)
      expect(seen).toEqual([7])
      expect((yield* producer.stats).confirmed).toBe(1)
      // Two deliveries under the one send: the stalled consumer's, and the reloaded one confirmed.
      const delivers = expectChains(exporter, ["kept"])
      expect(delivers.length).toBe(2)
      expectStoresUnderSends(exporter, ["kept"])
      // Each start of a controller, and every call on the durable queue, has its span.
      expect(named(exporter, SpanNames.restart).length).toBeGreaterThanOrEqual(4)
      const operations = new Set(named(exporter, SpanNames.queue).map((span) => span.attributes["effect_reliable.operation"]))
      expect([...operations]).toEqual(expect.arrayContaining(["load", "store"]))
    }).pipe(Effect.provide(memorySystem()), Effect.provide(tracing(exporter)))
  })

  it.scoped("durable queue on the memory transport: each store span is a child of the send span it stored, a batch's links the other senders", () => {
    const exporter = new InMemorySpanExporter()
    return Effect.gen(function*() {
      const queue = yield* MemoryProducerQueue.makeMemory
      const producer = yield* Producer.make({ name: "out", consumer: "in", payload: Order, durableQueue: queue })
      const consumer = yield* Consumer.make({ name: "in", producer: "out", payload: Order })
      const seen: Array<number> = []
      yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.index))))
      yield* settle
      yield* Effect.forEach([0, 1, 2], (index) => producer.send({ index }, { messageId: `d-${index}` }), { discard: true })
      yield* advanceUntil(() => seen.length === 3 && named(exporter, SpanNames.confirmed).length === 3, 10, 10_000)
      expectChains(exporter, ["d-0", "d-1", "d-2"])
      expectStoresUnderSends(exporter, ["d-0", "d-1", "d-2"])

      // Concurrent senders are group-committed: one store, under the first sender's span, linked to the others.
      yield* Effect.forEach([3, 4, 5], (index) => producer.send({ index }, { messageId: `d-${index}` }), { concurrency: "unbounded", discard: true })
      yield* advanceUntil(() => seen.length === 6 && named(exporter, SpanNames.confirmed).length === 6, 10, 10_000)
      const sends = named(exporter, SpanNames.send).filter((span) => ["d-3", "d-4", "d-5"].includes(messageIdOf(span) as string))
      const stores = named(exporter, SpanNames.queue).filter((span) =>
        span.attributes["effect_reliable.operation"] === "store" && sends.some((send) => parentOf(span) === spanIdOf(send))
      )
      const linked = new Set(stores.flatMap((store) => [parentOf(store), ...store.links.map((link) => link.context.spanId)]))
      for (const send of sends) expect(linked.has(spanIdOf(send)), `a store names the send span of ${messageIdOf(send)}`).toBe(true)
    }).pipe(Effect.provide(memorySystem()), Effect.provide(tracing(exporter)))
  })

  it.scoped("the contract API: produce -> deliver -> confirm, and the producer's confirmed span under produce", () => {
    const exporter = new InMemorySpanExporter()
    return Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "out", consumer: "in", payload: Order })
      const consumer = yield* Consumer.make({ name: "in", producer: "out", payload: Order })
      const seen: Array<number> = []
      yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.index))))
      yield* settle
      for (const index of [0, 1]) {
        const grant = yield* producer.requestNext
        const stored = yield* producer.produce(Produced.make(grant, `p-${index}`, { index }))
        yield* producer.storedAck(StoredAck.make(stored))
      }
      yield* advanceUntil(() => seen.length === 2 && named(exporter, SpanNames.confirmed).length === 2, 10, 10_000)
      expectChains(exporter, ["p-0", "p-1"], SpanNames.produce)
    }).pipe(Effect.provide(memorySystem()), Effect.provide(tracing(exporter)))
  })

  it.scoped("deliveries: a taken delivery is in a deliver span under its send span until it is confirmed", () => {
    const exporter = new InMemorySpanExporter()
    return Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "out", consumer: "in", payload: Order })
      const consumer = yield* Consumer.make({ name: "in", producer: "out", payload: Order })
      const seen: Array<number> = []
      yield* Effect.forkScoped(Stream.runForEach(consumer.deliveries, (delivery) =>
        Effect.zipRight(Effect.sync(() => void seen.push(delivery.payload.index)), delivery.confirm)))
      yield* settle
      yield* Effect.forEach([0, 1, 2], (index) => producer.send({ index }, { messageId: `q-${index}` }), { discard: true })
      yield* advanceUntil(() => seen.length === 3 && named(exporter, SpanNames.confirmed).length === 3, 10, 10_000)
      expectChains(exporter, ["q-0", "q-1", "q-2"])
    }).pipe(Effect.provide(memorySystem()), Effect.provide(tracing(exporter)))
  })

  it.scoped("stream: a message is in a deliver span under its send span until the stream pulls the next (its confirmation)", () => {
    const exporter = new InMemorySpanExporter()
    return Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "out", consumer: "in", payload: Order })
      const consumer = yield* Consumer.make({ name: "in", producer: "out", payload: Order })
      const seen: Array<number> = []
      yield* Effect.forkScoped(Stream.runForEach(consumer.stream, (order) => Effect.sync(() => void seen.push(order.index))))
      yield* settle
      yield* Effect.forEach([0, 1, 2], (index) => producer.send({ index }, { messageId: `s-${index}` }), { discard: true })
      yield* advanceUntil(() => seen.length === 3 && named(exporter, SpanNames.confirmed).length === 3, 10, 10_000)
      expectChains(exporter, ["s-0", "s-1", "s-2"])
    }).pipe(Effect.provide(memorySystem()), Effect.provide(tracing(exporter)))
  })

  it.scoped("work-pulling with a durable work queue: send -> store, send -> deliver -> confirm, send -> confirmed", () => {
    const exporter = new InMemorySpanExporter()
    return Effect.gen(function*() {
      const queue = yield* MemoryWorkQueue.makeWorkMemory
      const producer = yield* WorkPulling.producer({ name: "jobs", payload: Order, durableWorkQueue: queue })
      const seen: Array<number> = []
      for (const name of ["w1", "w2"]) {
        const worker = yield* WorkPulling.worker({ name, producer: "jobs", payload: Order })
        yield* Effect.forkScoped(worker.run((delivery) => Effect.sync(() => void seen.push(delivery.payload.index))))
      }
      yield* settle
      yield* Effect.forEach([0, 1, 2, 3], (index) => producer.send({ index }, { messageId: `j-${index}` }), { discard: true })
      yield* advanceUntil(() => seen.length === 4 && named(exporter, SpanNames.confirmed).length === 4, 10, 10_000)
      expectChains(exporter, ["j-0", "j-1", "j-2", "j-3"])
      expectStoresUnderSends(exporter, ["j-0", "j-1", "j-2", "j-3"])
    }).pipe(Effect.provide(memorySystem()), Effect.provide(tracing(exporter)))
  })

  it.scoped("without a tracer, or with tracing switched off for the sender, a message carries no trace context", () => {
    const exporter = new InMemorySpanExporter()
    const flow = (switchedOff: boolean) =>
      Effect.gen(function*() {
        const producer = yield* Producer.make({ name: "out", consumer: "in", payload: Order })
        const consumer = yield* Consumer.make({ name: "in", producer: "out", payload: Order })
        const traces: Array<string | undefined> = []
        yield* Effect.forkScoped(Stream.runForEach(consumer.deliveries, (delivery) =>
          Effect.zipRight(Effect.sync(() => void traces.push((delivery as { readonly trace?: string }).trace)), delivery.confirm)))
        yield* settle
        yield* producer.send({ index: 0 }).pipe(Effect.withTracerEnabled(!switchedOff))
        yield* advanceUntil(() => traces.length === 1, 10, 10_000)
        return traces
      }).pipe(Effect.scoped, Effect.provide(memorySystem()))
    return Effect.gen(function*() {
      expect(yield* flow(false)).toEqual([undefined])
      expect(yield* Effect.provide(flow(true), tracing(exporter))).toEqual([undefined])
      expect(named(exporter, SpanNames.send)).toEqual([])
    })
  })
})
