/**
 * Spans of a flow and the trace context its messages carry across the wire.
 *
 * A message carries its sender's W3C trace context (`traceparent`) only when the sender's span
 * is sampled by a tracer the application installed. Effect's default tracer exports nothing, so
 * under it the library opens no span on the hot path and a message carries nothing: the cost of
 * tracing that nobody reads is one comparison per call.
 *
 * What a traced message costs is mostly the tracer's own (four spans, the OpenTelemetry SDK's
 * objects), so the library adds as little as it can: no span captures a stack trace (the place
 * it would record is always this module, and an `Error` per span was a tenth of a traced
 * message's time), spans are started and ended through the tracer directly rather than by
 * `Effect.withSpan` (a dozen effect operations per span), and only a handler's `deliver` span is
 * made its fiber's current span (under `@effect/opentelemetry` every operation run inside a
 * current span builds a context of its own).
 */
import { Clock, Context, Effect, Exit, FiberRef, Option, Tracer } from "effect"
import type { Fiber } from "effect"

/** The names of the spans this library opens. */
export const SpanNames = {
  send: "effect_reliable.send",
  produce: "effect_reliable.produce",
  deliver: "effect_reliable.deliver",
  confirm: "effect_reliable.confirm",
  confirmed: "effect_reliable.confirmed",
  queue: "effect_reliable.queue",
  restart: "effect_reliable.restart",
  relocate: "effect_reliable.relocate"
} as const

// The tracer every fiber has unless the application installs one (`Layer.setTracer`, the
// OpenTelemetry layers): it records nothing anybody reads.
const defaultTracer: Tracer.Tracer = Effect.runSync(Effect.tracer)

/** True when the fiber runs under a tracer the application installed. */
export const isTracing = (fiber: Fiber.RuntimeFiber<unknown, unknown>): boolean =>
  fiber.currentTracer !== defaultTracer && fiber.getFiberRef(FiberRef.currentTracerEnabled)

const hex = (length: number) => new RegExp(`^[0-9a-f]{${length}}$`)
const TraceId = hex(32)
const SpanId = hex(16)

/** The span's W3C `traceparent`, when it is sampled and its ids have the W3C shape. */
export const traceparentOf = (span: Tracer.AnySpan): string | undefined =>
  span.sampled && TraceId.test(span.traceId) && SpanId.test(span.spanId) ? `00-${span.traceId}-${span.spanId}-01` : undefined

/** The remote parent a `traceparent` names; undefined for anything that is not one. */
export const parentOf = (traceparent: string): Tracer.ExternalSpan | undefined => {
  // version "00": 2 + 1 + 32 + 1 + 16 + 1 + 2 characters
  if (traceparent.length !== 55 || !traceparent.startsWith("00-") || traceparent[35] !== "-" || traceparent[52] !== "-") return undefined
  const traceId = traceparent.slice(3, 35)
  const spanId = traceparent.slice(36, 52)
  if (!TraceId.test(traceId) || !SpanId.test(spanId)) return undefined
  return Tracer.externalSpan({ traceId, spanId, sampled: (Number.parseInt(traceparent.slice(53), 16) & 1) === 1 })
}

const clockOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Clock.Clock => Context.get(fiber.currentDefaultServices, Clock.Clock)

/**
 * Starts a span now, by the fiber's tracer, without running an effect (Effect's `withSpan` runs a
 * dozen operations per span, and under OpenTelemetry every operation inside a span copies a
 * context). Its parent is `parent`, else the fiber's current span. For a fiber that is tracing.
 */
export const startSpan = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  name: string,
  kind: Tracer.SpanKind,
  attributes: Record<string, unknown>,
  parent?: Tracer.AnySpan
): Tracer.Span => {
  const span = fiber.currentTracer.span(
    name,
    Option.fromNullable(parent ?? fiber.currentSpan),
    Context.empty(),
    [],
    clockOf(fiber).unsafeCurrentTimeNanos(),
    kind
  )
  for (const key in attributes) span.attribute(key, attributes[key])
  return span
}

/** Ends the span now, with how its work ended (once: a later call does nothing). */
export const endSpan = (clock: Clock.Clock, span: Tracer.Span, exit: Exit.Exit<unknown, unknown>): void => {
  if (span.status._tag === "Started") span.end(clock.unsafeCurrentTimeNanos(), exit)
}

/**
 * `effect(span)` in a span started now and ended with its outcome; an outcome known at once (the
 * effect is an `Exit`) ends it without running anything more. The span is not made the fiber's
 * current span: nothing inside opens spans of its own, and under OpenTelemetry an operation run
 * inside a current span pays for a context of its own.
 */
export const inSpan = <A, E, R>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  name: string,
  kind: Tracer.SpanKind,
  attributes: Record<string, unknown>,
  effect: (span: Tracer.Span) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  const span = startSpan(fiber, name, kind, attributes)
  const clock = clockOf(fiber)
  const body = effect(span)
  if (Exit.isExit(body)) {
    endSpan(clock, span, body)
    return body
  }
  return Effect.onExit(body, (exit) => Effect.sync(() => endSpan(clock, span, exit)))
}

/**
 * Runs `effect` in a producer span named `name` when the fiber has an installed tracer, giving
 * it the span; without one it runs `effect(undefined)` as it is. For the calls of an endpoint
 * (`sendAll`, `enqueue`), so a message carries its sender's trace (`tracedItem`).
 */
export const withSendSpan = <A, E, R>(
  name: string,
  attributes: Record<string, unknown>,
  effect: (span: Tracer.Span | undefined) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => isTracing(fiber) ? inSpan(fiber, name, "producer", attributes, effect) : effect(undefined))

/** The trace context a message sent in `span` carries (when the span is sampled); the span learns the message's id. */
export const messageTrace = (span: Tracer.Span, messageId: string): string | undefined => {
  span.attribute("messaging.message.id", messageId)
  return traceparentOf(span)
}

/** The item with its sender's trace context, when the span is sampled; the span learns the message's id. */
export const tracedItem = <I extends { readonly messageId: string; readonly trace?: string | undefined }>(item: I, span: Tracer.Span): I => {
  const trace = messageTrace(span, item.messageId)
  return trace === undefined ? item : { ...item, trace }
}

/** Runs `effect` in a span when the fiber has an installed tracer (the library's rarer operations). */
export const withSpanIfTracing = <A, E, R>(
  name: string,
  attributes: Record<string, unknown>,
  effect: Effect.Effect<A, E, R>,
  options?: { readonly root?: boolean }
): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) =>
    isTracing(fiber) ? Effect.withSpan(effect, name, { attributes, root: options?.root, captureStackTrace: false }) : effect
  )

/** The OpenTelemetry SDK keeps at most 128 links per span by default; more would be dropped there. */
const MaxLinks = 128

/**
 * Runs a durable queue call in a span. The call serves messages (a store): its parent is the
 * first message's send span and the other senders' spans are links, so the store shows in the
 * trace of the send that waits for it. A call for no message (a load, a watermark) is a root
 * span: the lane's fiber outlives every caller.
 */
export const withQueueSpan = <A, E, R>(
  operation: string,
  messages: ReadonlyArray<{ readonly trace?: string | undefined }> | undefined,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => {
    if (!isTracing(fiber)) return effect
    let parent: Tracer.ExternalSpan | undefined
    let links: Array<Tracer.SpanLink> | undefined
    const seen = new Set<string>()
    for (const message of messages ?? []) {
      const trace = message.trace
      if (trace === undefined || seen.has(trace)) continue
      seen.add(trace)
      const span = parentOf(trace)
      if (span === undefined) continue
      if (parent === undefined) parent = span
      else if ((links ??= []).length < MaxLinks) links.push({ _tag: "SpanLink", span, attributes: {} })
    }
    return Effect.withSpan(effect, SpanNames.queue, {
      attributes: { "effect_reliable.operation": operation, "effect_reliable.messages": messages?.length ?? 0 },
      parent,
      root: parent === undefined,
      links,
      captureStackTrace: false
    })
  })

/** What a delivery's span tells about it. */
export const deliveryAttributes = (endpoint: string, delivery: { readonly messageId: string; readonly attempt: number }): Record<string, unknown> => ({
  "effect_reliable.endpoint": endpoint,
  "messaging.message.id": delivery.messageId,
  "effect_reliable.attempt": delivery.attempt
})

/**
 * A span opened now and ended later by hand (a delivery's: ended when it is confirmed or handed
 * back), with the tracer and clock of the fiber that opened it.
 */
export interface OpenSpan {
  readonly span: Tracer.Span
  /** Ends the span now (the first call only). */
  readonly end: (exit: Exit.Exit<unknown, unknown>) => void
  /** A span inside this one, around `body` (synchronous). */
  readonly child: (name: string, body: () => void) => void
}

/**
 * Opens a consumer span under the remote parent a message's `traceparent` names, for a fiber
 * that is tracing; undefined when the context is not a valid one.
 */
export const openRemoteChild = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  name: string,
  traceparent: string,
  attributes: Record<string, unknown>
): OpenSpan | undefined => {
  const parent = parentOf(traceparent)
  if (parent === undefined) return undefined
  const tracer = fiber.currentTracer
  const clock = clockOf(fiber)
  const span = startSpan(fiber, name, "consumer", attributes, parent)
  return {
    span,
    end: (exit) => endSpan(clock, span, exit),
    child: (childName, body) => {
      const child = tracer.span(childName, Option.some(span), Context.empty(), [], clock.unsafeCurrentTimeNanos(), "internal")
      body()
      child.end(clock.unsafeCurrentTimeNanos(), Exit.void)
    }
  }
}

/**
 * Records, without a fiber, the producer's side of a confirmation: a span under the message's
 * send span from its send time (`at`, clock millis) to now, so the send's trace shows when the
 * producer learned its message was confirmed (the span's length is the end-to-end latency).
 * Undefined when the fiber making it (a controller's, once) has no installed tracer, so an
 * untraced controller skips its confirmed messages at no cost.
 */
export type ConfirmedSpans = (trace: string, messageId: string, at: number) => void

export const confirmedSpans = (endpoint: string): Effect.Effect<ConfirmedSpans | undefined> =>
  Effect.withFiberRuntime((fiber) => {
    if (!isTracing(fiber)) return Effect.succeed(undefined)
    const tracer = fiber.currentTracer
    const clock = clockOf(fiber)
    const record: ConfirmedSpans = (trace, messageId, at) => {
      const parent = parentOf(trace)
      if (parent === undefined) return
      const span = tracer.span(SpanNames.confirmed, Option.some(parent), Context.empty(), [], BigInt(Math.round(at)) * 1_000_000n, "internal")
      span.attribute("effect_reliable.endpoint", endpoint)
      span.attribute("messaging.message.id", messageId)
      span.end(clock.unsafeCurrentTimeNanos(), Exit.void)
    }
    return Effect.succeed(record)
  })
