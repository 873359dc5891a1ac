/**
 * One handler loop of `run`, in a fiber of its own: takes a delivery, runs the handler, confirms
 * on success. A failed attempt (typed error, defect, or `handlerTimeout`) goes to the failure
 * rule (`HandlerFailures`): a point-to-point consumer retries in place after the retry delay,
 * keeping its order; a worker hands the job back to the producer, which retries it after the
 * delay on any worker; when attempts are exhausted the message is dead-lettered (published, and
 * settled so the flow moves on). Asked to stop, a loop finishes the handler in flight (within the
 * drain timeout) and ends; an interrupted handler gives its delivery back.
 *
 * The success path allocates nothing per delivery (its continuations are made once per loop):
 * it is the hot path of every consumer.
 */
import { Cause, Duration, Effect, Exit, Fiber, FiberId, Option } from "effect"
import type { Schedule } from "effect"
import type { ControllerDelivery } from "../Controller/internal/ControllerDelivery.js"
import { confirmNow } from "../Controller/internal/ControllerDelivery.js"
import { errorText } from "../Controller/internal/ErrorText.js"
import type { Delivery } from "../Protocol/Contract.js"
import { DeliveryDeadLettered } from "../Protocol/DeadLetter.js"
import { HandlerTimeout } from "../Protocol/Errors.js"
import type { EndpointClosed } from "../Protocol/Errors.js"
import type { EndpointMetrics } from "../Observability/Metrics.js"
import * as Tracing from "../Observability/Tracing.js"
import { drainWithin } from "./DrainBound.js"
import { LoopTaker } from "./Handoff.js"
import type { Handoff } from "./Handoff.js"
import * as HandlerFailures from "./HandlerFailures.js"

/** The consumer's failure rule and where its outcomes go. */
export interface FailurePolicy {
  readonly endpoint: string
  /** Workers hand failed jobs back to the producer; a point-to-point consumer retries in place. */
  readonly retriesAtProducer: boolean
  readonly retry: Schedule.Schedule<unknown, unknown>
  readonly maxAttempts: number
  readonly handlerTimeout: Duration.Duration | undefined
  readonly publishDeadLetter: (event: DeliveryDeadLettered) => void
  /** Counts a failed attempt and a dead letter (the endpoint's stats). */
  readonly counted: { failed: number; deadLettered: number }
  readonly metrics: EndpointMetrics
}

export interface RunLoop<R> {
  readonly run: Effect.Effect<never, EndpointClosed, R>
  /** Lets the handler in flight finish (at most `drainTimeout`), then ends the loop. */
  readonly stop: (fiber: Fiber.RuntimeFiber<never, EndpointClosed>, drainTimeout: Duration.Duration) => Effect.Effect<void>
}

/**
 * A traced delivery's attempt runs in a span under its sender's span and confirms in a span
 * inside that one: the trace goes send -> deliver -> confirm. A loop has one delivery in flight,
 * so one span at a time. Without a tracer here the attempt runs as an untraced one.
 */
const tracedAttempts = <E, R>(
  endpoint: string,
  continuations: {
    readonly onFailure: (cause: Cause.Cause<E>) => Effect.Effect<void, never, R>
    readonly onSuccess: () => Effect.Effect<void, never, R>
  },
  /** Confirms the delivery in flight; then `next` goes on to the next one. */
  confirm: () => void,
  next: () => Effect.Effect<void, never, R>
) => {
  let span: Tracing.OpenSpan | undefined
  const end = (exit: Exit.Exit<unknown, unknown>) => {
    const open = span
    span = undefined
    open?.end(exit)
  }
  const inSpan = {
    onFailure: (cause: Cause.Cause<E>): Effect.Effect<void, never, R> => {
      end(Exit.failCause(cause))
      return continuations.onFailure(cause)
    },
    onSuccess: (): Effect.Effect<void, never, R> => {
      span?.child(Tracing.SpanNames.confirm, confirm)
      end(Exit.void)
      return next()
    }
  }
  return {
    process: <A, R1>(delivery: Delivery<A>, trace: string, attempt: Effect.Effect<void, E, R1>): Effect.Effect<void, never, R | R1> =>
      Effect.withFiberRuntime((fiber) => {
        span = Tracing.isTracing(fiber)
          ? Tracing.openRemoteChild(fiber, Tracing.SpanNames.deliver, trace, Tracing.deliveryAttributes(endpoint, delivery))
          : undefined
        if (span === undefined) return Effect.matchCauseEffect(attempt, continuations)
        return Effect.matchCauseEffect(Effect.withParentSpan(attempt, span.span), inSpan)
      }),
    /** The loop was interrupted: the span of the attempt in flight ends so. */
    interrupted: () => end(Exit.interrupt(FiberId.none))
  }
}

/**
 * Runs `self` again and again. `Effect.forever` yields to the scheduler after every round, which
 * here would cost a scheduler task (and, every few thousand, a timer's wait) per delivery even
 * when the next delivery is ready at once; the fiber runtime still yields on its own after a few
 * thousand operations, so other fibers are not starved.
 */
const repeatWithoutYield = <E, R>(self: Effect.Effect<void, E, R>): Effect.Effect<never, E, R> => {
  const loop: Effect.Effect<never, E, R> = Effect.flatMap(self, () => loop)
  return loop
}

/** A handler's attempt, failing with `HandlerTimeout` when the policy sets a time limit. */
const withTimeout = <A, E, R>(policy: FailurePolicy, delivery: Delivery<A>, attempt: Effect.Effect<void, E, R>): Effect.Effect<void, E | HandlerTimeout, R> => {
  const timeout = policy.handlerTimeout
  if (timeout === undefined) return attempt
  return Effect.timeoutFail(attempt, {
    duration: timeout,
    onTimeout: () =>
      new HandlerTimeout({ endpointName: policy.endpoint, messageId: delivery.messageId, attempt: delivery.attempt, timeoutMs: Duration.toMillis(timeout) })
  })
}

export const make = <A, E, R, R2>(
  handoff: Handoff<Delivery<A>>,
  handler: (delivery: Delivery<A>) => Effect.Effect<void, E, R>,
  release: (delivery: Delivery<A>) => void,
  policy: FailurePolicy,
  onFailure: HandlerFailures.OnFailure<A, E, R2> | undefined
): RunLoop<R | R2> => {
  let busy = false
  const taker = new LoopTaker<Delivery<A>>()
  let stopping = false
  // The delivery the handler is working on (one at a time: the loop is sequential).
  let current: Delivery<A> | undefined

  const attemptOf = (delivery: Delivery<A>) => withTimeout(policy, delivery, handler(delivery))

  const decide = (delivery: Delivery<A>, cause: Cause.Cause<E | HandlerTimeout>, delay: Option.Option<Duration.Duration>) => {
    const decision = HandlerFailures.defaultDecision(delivery.attempt, policy.maxAttempts, delay)
    if (onFailure === undefined) return Effect.succeed(decision)
    const failure = { delivery, attempt: delivery.attempt, error: HandlerFailures.typedError<E>(cause), cause, decision }
    return Effect.catchAllCause(onFailure(failure), () => Effect.succeed<HandlerFailures.FailureDecision>("DeadLetter"))
  }

  const deadLetter = (delivery: Delivery<A>, cause: Cause.Cause<E | HandlerTimeout>) =>
    Effect.sync(() => {
      policy.counted.deadLettered++
      policy.metrics.deadLettered.add(1)
      policy.publishDeadLetter(new DeliveryDeadLettered({ endpointName: policy.endpoint, messageId: delivery.messageId, attempts: delivery.attempt, cause }))
      ;(delivery as ControllerDelivery<A>).settleWith({ _tag: "DeadLettered", attempts: delivery.attempt, error: errorText(cause) })
    })

  /** After a failed attempt: retry (here, or at the producer), dead-letter, or confirm. */
  const failed = (delivery: Delivery<A>, cause: Cause.Cause<E | HandlerTimeout>): Effect.Effect<void, never, R | R2> =>
    Effect.gen(function*() {
      policy.counted.failed++
      const delay = yield* HandlerFailures.retryDelay(policy.retry, delivery.attempt)
      const decision = yield* decide(delivery, cause, delay)
      if (decision !== "Retry") busy = false
      if (decision === "Confirm") return confirmNow(delivery)
      if (decision === "DeadLetter") return yield* deadLetter(delivery, cause)
      const after = Option.getOrElse(delay, () => Duration.zero)
      yield* Effect.logDebug(`reliable consumer "${policy.endpoint}": attempt ${delivery.attempt} on ${delivery.messageId} failed; retrying in ${Duration.format(after)}`)
      if (policy.retriesAtProducer) {
        busy = false
        return (delivery as ControllerDelivery<A>).settleWith({
          _tag: "Failed",
          attempt: delivery.attempt,
          error: errorText(cause),
          retryAfterMs: Math.round(Duration.toMillis(after))
        })
      }
      yield* Effect.sleep(after)
      if (stopping) {
        busy = false
        return release(delivery)
      }
      return yield* process((delivery as ControllerDelivery<A>).withAttempt(delivery.attempt + 1))
    })

  const confirmCurrentNow = () => {
    busy = false
    confirmNow(current!)
  }

  const continuations = {
    onFailure: (cause: Cause.Cause<E | HandlerTimeout>): Effect.Effect<void, never, R | R2> => failed(current!, cause),
    onSuccess: (): Effect.Effect<void, never, R | R2> => {
      confirmCurrentNow()
      return nextReady()
    }
  }

  /**
   * The confirmation's fold usually hands out the next delivery at once: it is processed in this
   * same continuation, so a busy loop costs no loop step per delivery.
   */
  const nextReady = (): Effect.Effect<void, never, R | R2> => {
    if (stopping) return Effect.void
    const next = handoff.takeReady()
    return next === undefined ? Effect.void : process(next)
  }

  const traced = tracedAttempts(policy.endpoint, continuations, confirmCurrentNow, nextReady)

  const process = (delivery: Delivery<A>): Effect.Effect<void, never, R | R2> => {
    taker.received()
    busy = true
    current = delivery
    const trace = (delivery as Partial<ControllerDelivery<A>>).trace
    const attempt = attemptOf(delivery)
    return trace === undefined ? Effect.matchCauseEffect(attempt, continuations) : traced.process(delivery, trace, attempt)
  }

  const step: Effect.Effect<void, EndpointClosed, R | R2> = Effect.suspend(() => stopping ? Effect.interrupt : Effect.flatMap(handoff.takeAs(taker), process))

  // An interrupted loop gives back the delivery it was working on, and one put to it that it
  // never received (once per loop, not per delivery).
  const givenBack = Effect.sync(() => {
    traced.interrupted()
    const lost = handoff.leave(taker)
    if (lost !== undefined) release(lost)
    if (!busy) return
    busy = false
    release(current!)
  })

  return {
    run: Effect.onInterrupt(repeatWithoutYield(step), () => givenBack) as Effect.Effect<never, EndpointClosed, R | R2>,
    stop: (fiber, drainTimeout) =>
      Effect.suspend(() => {
        stopping = true
        if (!busy) return Fiber.interrupt(fiber)
        return Effect.zipRight(drainWithin(drainTimeout, Effect.asVoid(Fiber.await(fiber))), Fiber.interrupt(fiber))
      })
  }
}
