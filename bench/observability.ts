/**
 * What observing a flow costs: the point-to-point send loop with metrics off (an internal
 * switch), with metrics on and no tracer (what every application gets), and with an
 * OpenTelemetry tracer sampling every span (each span exported to an exporter that drops it).
 */
import { NodeSdk } from "@effect/opentelemetry"
import { SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import type { ReadableSpan, SpanExporter } from "@opentelemetry/sdk-trace-base"
import { Effect } from "effect"
import * as Metrics from "../src/Observability/Metrics.js"
import { flow } from "./pointToPoint.js"
import { measure } from "./Row.js"

const Window = 50

/** Takes every finished span and keeps none: the tracer's own cost, not an exporter's I/O. */
class DroppingExporter implements SpanExporter {
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

export const traced = (messages: number) => {
  const exporter = new DroppingExporter()
  const tracer = NodeSdk.layer(() => ({ resource: { serviceName: "effect-reliable-bench" }, spanProcessor: new SimpleSpanProcessor(exporter) }))
  return Effect.map(
    measure(label("metrics on, OpenTelemetry tracer sampling every span", messages), messages, Effect.provide(flow(messages, Window, 1), tracer)),
    (row) => ({ ...row, note: `${(exporter.exported / messages).toFixed(1)} spans per message` })
  )
}
