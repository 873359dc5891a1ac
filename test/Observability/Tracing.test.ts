/**
 * One trace from send to confirm: with an OpenTelemetry tracer installed (spans kept by an
 * in-memory exporter), a message's delivery span is a child of its send span and its confirm span
 * a child of the delivery span, across the memory transport, across TCP between two nodes, and
 * through a durable queue's reload by a new producer.
 */
import { NodeSdk } from "@effect/opentelemetry"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import type { ReadableSpan } from "@opentelemetry/sdk-trace-base"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Layer, Schema, Scope } from "effect"
import * as Consumer from "../../src/Consumer.js"
import * as MemoryProducerQueue from "../../src/DurableQueue/MemoryProducerQueue.js"
import { SpanNames } from "../../src/Observability/Tracing.js"
import * as Producer from "../../src/Producer.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as MemoryTransport from "../../src/Transport/MemoryTransport.js"
import { advanceUntil, settle } from "../support/Harness.js"
import { host, startNode, waitUntil } from "../support/Nodes.js"

const Order = Schema.Struct({ index: Schema.Number })

const tracing = (exporter: InMemorySpanExporter) =>
  NodeSdk.layer(() => ({ resource: { serviceName: "effect-reliable-test" }, spanProcessor: new SimpleSpanProcessor(exporter) }))

const memorySystem = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

const named = (exporter: InMemorySpanExporter, name: string) => exporter.getFinishedSpans().filter((span) => span.name === name)
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId
const messageIdOf = (span: ReadableSpan) => span.attributes["messaging.message.id"]

/** For each send span (by message id): the delivery span under it and the confirm span under that. */
const expectChains = (exporter: InMemorySpanExporter, messageIds: ReadonlyArray<string>) => {
  const sends = named(exporter, SpanNames.send)
  const delivers = named(exporter, SpanNames.deliver)
  const confirms = named(exporter, SpanNames.confirm)
  for (const messageId of messageIds) {
    const send = sends.find((span) => messageIdOf(span) === messageId)
    expect(send, `send span of ${messageId}`).toBeDefined()
    const under = delivers.filter((span) => messageIdOf(span) === messageId && parentOf(span) === send!.spanContext().spanId)
    expect(under.length, `deliver spans of ${messageId} under its send span`).toBeGreaterThan(0)
    for (const deliver of under) expect(deliver.spanContext().traceId).toBe(send!.spanContext().traceId)
    // The delivery that succeeded (an interrupted one has no confirm).
    const confirmed = under.filter((deliver) => confirms.some((span) => parentOf(span) === deliver.spanContext().spanId))
    expect(confirmed.length, `confirm span of ${messageId} under a deliver span`).toBe(1)
  }
  return delivers
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
      yield* advanceUntil(() => seen.length === 3 && named(exporter, SpanNames.confirm).length === 3, 10, 10_000)
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
      yield* waitUntil("three confirm spans", () => seen.length === 3 && named(exporter, SpanNames.confirm).length === 3, 20_000)
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
      yield* advanceUntil(() => seen.length === 1 && named(exporter, SpanNames.confirm).length === 1, 10, 10_000)
      expect(seen).toEqual([7])
      expect((yield* producer.stats).confirmed).toBe(1)
      // Two deliveries under the one send: the stalled consumer's, and the reloaded one confirmed.
      const delivers = expectChains(exporter, ["kept"])
      expect(delivers.length).toBe(2)
      // Each start of a controller, and every call on the durable queue, has its span.
      expect(named(exporter, SpanNames.restart).length).toBeGreaterThanOrEqual(4)
      const operations = new Set(named(exporter, SpanNames.queue).map((span) => span.attributes["effect_reliable.operation"]))
      expect([...operations]).toEqual(expect.arrayContaining(["load", "store"]))
    }).pipe(Effect.provide(memorySystem()), Effect.provide(tracing(exporter)))
  })
})
