/**
 * What observing a flow costs: the point-to-point send loop with metrics off (an internal
 * switch), with metrics on and no tracer (what every application gets), and with an
 * OpenTelemetry tracer sampling every span, set up as a production service would be (a
 * `BatchSpanProcessor`) with an exporter that counts the spans and drops them: the tracer's own
 * cost, not an exporter's I/O. The traced row states its ratio to the untraced loop measured in
 * the same process just before it.
 */
import { NodeSdk } from "@effect/opentelemetry"
import { BatchSpanProcessor } from "@opentelemetry/sdk-trace-base"
import type { ReadableSpan, SpanExporter } from "@opentelemetry/sdk-trace-base"
import { Effect } from "effect"
import * as Metrics from "../src/Observability/Metrics.js"
import { flow } from "./pointToPoint.js"
import { measure } from "./Row.js"

const Window = 50

/** Takes every finished span and keeps none. */
class CountingExporter implements SpanExporter {
  exported = 0
  export(spans: Array<ReadableSpan>, done: (result: { code: number }) => void): void {
    this.exported += spans.length
    done({ code: 0 })
  }
  shutdown(): Promise<void> {
    return Promise.resolve()
  }
}

const label = (what: string, messages: number) => `send loop, ${what}, window ${Window}, ${messages.toLocaleString("en")} msgs`

export const metricsOff = (messages: number) =>
  measure(label("metrics off, no tracer", messages), messages, Effect.locally(flow(messages, Window, 1), Metrics.recording, false))

export const metricsOn = (messages: number) => measure(label("metrics on, no tracer", messages), messages, flow(messages, Window, 1))

export const traced = (messages: number) =>
  Effect.gen(function*() {
    const untraced = yield* metricsOn(messages)
    const exporter = new CountingExporter()
    // Built here and shut down (flushing what the processor still holds) before the spans are counted.
    const processor = new BatchSpanProcessor(exporter)
    const tracer = NodeSdk.layer(() => ({ resource: { serviceName: "effect-reliable-bench" }, spanProcessor: processor }))
    const row = yield* measure(
      label("metrics on, OpenTelemetry BatchSpanProcessor (defaults) + counting exporter, every span sampled", messages),
      messages,
      Effect.provide(flow(messages, Window, 1), tracer)
    )
    yield* Effect.promise(() => processor.forceFlush())
    const ratio = row.rate / untraced.rate
    return {
      ...row,
      note: `${ratio.toFixed(2)} of the untraced loop here (${Math.round(untraced.rate).toLocaleString("en")} msgs/s); ` +
        `${(exporter.exported / messages).toFixed(1)} spans exported per message`
    }
  })
