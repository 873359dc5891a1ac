/**
 * Spans of a flow and the trace context its messages carry across the wire.
 *
 * A message carries its sender's W3C trace context (`traceparent`) only when the sender's span
 * is sampled by a tracer the application installed. Effect's default tracer exports nothing, so
 * under it the library opens no span on the hot path and a message carries nothing: the cost of
 * tracing that nobody reads is one comparison per call.
 */
import { Effect, Tracer } from "effect"
import type { Fiber } from "effect"

/** The names of the spans this library opens. */
export const SpanNames = {
  send: "effect_reliable.send",
  deliver: "effect_reliable.deliver",
  confirm: "effect_reliable.confirm",
  queue: "effect_reliable.queue",
  restart: "effect_reliable.restart",
  relocate: "effect_reliable.relocate"
} as const

// The tracer every fiber has unless the application installs one (`Layer.setTracer`, the
// OpenTelemetry layers): it records nothing anybody reads.
const defaultTracer: Tracer.Tracer = Effect.runSync(Effect.tracer)

/** True when the fiber runs under a tracer the application installed. */
export const isTracing = (fiber: Fiber.RuntimeFiber<unknown, unknown>): boolean => fiber.currentTracer !== defaultTracer

const hex = (length: number) => new RegExp(`^[0-9a-f]{${length}}$`)
const TraceId = hex(32)
const SpanId = hex(16)

/** The span's W3C `traceparent`, when it is sampled and its ids have the W3C shape. */
export const traceparentOf = (span: Tracer.AnySpan): string | undefined =>
  span.sampled && TraceId.test(span.traceId) && SpanId.test(span.spanId) ? `00-${span.traceId}-${span.spanId}-01` : undefined

/** The remote parent a `traceparent` names; undefined for anything that is not one. */
export const parentOf = (traceparent: string): Tracer.ExternalSpan | undefined => {
  const parts = traceparent.split("-")
  if (parts.length !== 4 || parts[0] !== "00" || !TraceId.test(parts[1]) || !SpanId.test(parts[2])) return undefined
  return Tracer.externalSpan({ traceId: parts[1], spanId: parts[2], sampled: (Number.parseInt(parts[3], 16) & 1) === 1 })
}

/**
 * Runs `effect` in a span named `name` when the fiber has an installed tracer, giving it the
 * span; without one it runs `effect(undefined)` as it is. For the calls of an endpoint (`send`),
 * so a message carries its sender's trace (`tracedItem`).
 */
export const withSendSpan = <A, E, R>(
  name: string,
  attributes: Record<string, unknown>,
  effect: (span: Tracer.Span | undefined) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) =>
    isTracing(fiber)
      ? Effect.useSpan(name, { kind: "producer", attributes }, (span) => Effect.withParentSpan(effect(span), span))
      : effect(undefined)
  )

/** The item with its sender's trace context, when the span is sampled; the span learns the message's id. */
export const tracedItem = <I extends { readonly messageId: string; readonly trace?: string | undefined }>(item: I, span: Tracer.Span): I => {
  span.attribute("messaging.message.id", item.messageId)
  const trace = traceparentOf(span)
  return trace === undefined ? item : { ...item, trace }
}

/**
 * Runs `effect` in a span whose parent is the remote span a message's `traceparent` names, when
 * the fiber has an installed tracer and the context is valid; otherwise as it is.
 */
export const withRemoteParent = <A, E, R>(
  name: string,
  traceparent: string | undefined,
  attributes: Record<string, unknown>,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  if (traceparent === undefined) return effect
  const parent = parentOf(traceparent)
  if (parent === undefined) return effect
  return Effect.withFiberRuntime((fiber) =>
    isTracing(fiber) ? Effect.withSpan(effect, name, { kind: "consumer", parent, attributes }) : effect
  )
}

/** Runs `effect` in a span when the fiber has an installed tracer (the library's rarer operations). */
export const withSpanIfTracing = <A, E, R>(
  name: string,
  attributes: Record<string, unknown>,
  effect: Effect.Effect<A, E, R>,
  options?: { readonly root?: boolean }
): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => isTracing(fiber) ? Effect.withSpan(effect, name, { attributes, root: options?.root }) : effect)
