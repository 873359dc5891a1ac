/**
 * Watching a flow (`npx tsx examples/observability.ts`): traces, metrics and the operations page.
 *
 * An order flow with a durable producer queue runs for a few seconds (`RUN_SECONDS`, default 6)
 * with OpenTelemetry installed through `@effect/opentelemetry`'s `NodeSdk`: at the end, the spans
 * of the first order (send, then deliver and confirm under the sender's span)
 * are printed by the `ConsoleSpanExporter`. The operations page (`effect-reliable/ops`) serves the flow's stats, the
 * queue and its dead letters (every 13th order is refused once and dead-lettered; the page's
 * requeue button, enabled here, sends one back) and the Effect metrics in Prometheus text at
 * `/metrics`; the example prints where to look, then the `effect_reliable_*` lines of `/metrics`,
 * closes everything and exits.
 */
import { NodeSdk } from "@effect/opentelemetry"
import { ConsoleSpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import type { ReadableSpan, SpanExporter } from "@opentelemetry/sdk-trace-base"
import { Console, Effect, Layer, Schedule, Schema } from "effect"
import { Consumer, DurableQueue, Producer, ReliableSystem, Transport } from "effect-reliable"
import * as Ops from "effect-reliable/ops"

const OrderCreated = Schema.Struct({ orderId: Schema.Number, customer: Schema.String })
const seconds = Number(process.env.RUN_SECONDS ?? 6)
/** How many orders' traces are printed (a trace: send, then deliver and confirm under it). */
const tracedOrders = 1

/**
 * Holds the spans until the tracer shuts down, then hands the console exporter the traces of the
 * first orders sent (only those, to keep the output short).
 */
const firstOrders = (inner: SpanExporter): SpanExporter => {
  const spans: Array<ReadableSpan> = []
  return {
    export: (batch, done) => {
      if (spans.length < 10_000) spans.push(...batch)
      done({ code: 0 }) // ExportResultCode.SUCCESS
    },
    shutdown: () =>
      new Promise<void>((resolve) => {
        const sends = spans.filter((span) => span.name === "effect_reliable.send").sort((a, b) => a.startTime[1] - b.startTime[1] + (a.startTime[0] - b.startTime[0]) * 1e9)
        const traces = new Set(sends.slice(0, tracedOrders).map((span) => span.spanContext().traceId))
        console.log(`the spans of the first ${tracedOrders} order(s), printed by the ConsoleSpanExporter:`)
        inner.export(spans.filter((span) => traces.has(span.spanContext().traceId)), () => resolve())
      }).then(() => inner.shutdown())
  }
}

const tracing = NodeSdk.layer(() => ({
  resource: { serviceName: "effect-reliable-example" },
  spanProcessor: new SimpleSpanProcessor(firstOrders(new ConsoleSpanExporter()))
}))

const system = ReliableSystem.layer().pipe(Layer.provideMerge(Transport.layerMemory))

const program = Effect.gen(function*() {
  const queue = yield* DurableQueue.makeMemory
  const producer = yield* Producer.make({ name: "orders-out", consumer: "orders-in", payload: OrderCreated, durableQueue: queue })
  const consumer = yield* Consumer.make({ name: "orders-in", producer: "orders-out", payload: OrderCreated, maxAttempts: 1 })
  const refused = new Set<number>()
  yield* Effect.forkScoped(consumer.run((delivery) => {
    const { orderId } = delivery.payload
    if (orderId % 13 === 12 && !refused.has(orderId)) {
      refused.add(orderId)
      return Effect.fail(`order ${orderId}: the warehouse is closed`)
    }
    return Effect.sleep("2 millis")
  }))
  const page = yield* Ops.make({ port: Number(process.env.OPS_PORT ?? 0), actions: true })
  yield* Console.log(`operations page: ${page.url} (JSON: ${page.url}api/snapshot, Prometheus: ${page.url}metrics)`)
  yield* Console.log(`running for ${seconds}s`)

  let orderId = 0
  const sendOne = Effect.suspend(() => producer.send({ orderId: orderId++, customer: "ada" }))
  yield* sendOne.pipe(Effect.repeat(Schedule.spaced("20 millis")), Effect.timeout(`${seconds} seconds`), Effect.ignore)

  const stats = yield* producer.stats
  yield* Console.log(`sent ${stats.sent}, confirmed ${stats.confirmed}; dead letters: ${(yield* DurableQueue.deadLetters(queue, { limit: 100 })).length}`)
  const metrics = yield* Effect.promise(() => fetch(`${page.url}metrics`).then((response) => response.text()))
  const ours = metrics.split("\n").filter((line) => line.startsWith("effect_reliable_") && !line.includes("_bucket"))
  yield* Console.log(`/metrics, the effect_reliable_* samples (histogram buckets left out):\n${ours.join("\n")}`)
})

Effect.runPromise(program.pipe(Effect.scoped, Effect.provide(system), Effect.provide(tracing))).then(
  () => console.log("closed: the page, the flow and the tracer are shut down"),
  (error: unknown) => {
    console.error(error)
    process.exitCode = 1
  }
)
