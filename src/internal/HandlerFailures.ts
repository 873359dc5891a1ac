/**
 * What happens after a handler fails on a delivery (a typed error, a defect, or a
 * `HandlerTimeout`): retried after the consumer's `retry` delay while attempts are left, else
 * dead-lettered; the application's `onFailure` hook, when given, decides instead.
 *
 * The retry `Schedule` gives the delay before each next attempt: its n-th delay is the delay
 * before attempt n + 1. When the schedule ends, the message is dead-lettered.
 */
import { Cause, Duration, Effect, Option, Schedule, ScheduleDecision, ScheduleIntervals } from "effect"
import type { Delivery } from "../Protocol/Contract.js"
import type { HandlerTimeout } from "../Protocol/Errors.js"

/** What to do with a delivery whose handler failed. */
export type FailureDecision = "Retry" | "DeadLetter" | "Confirm"

/** A failed attempt, as the `onFailure` hook sees it. */
export interface HandlerFailure<A, E> {
  readonly delivery: Delivery<A>
  readonly attempt: number
  /** The handler's typed error, when it failed with one (not a defect, not a timeout). */
  readonly error: Option.Option<E>
  readonly cause: Cause.Cause<E | HandlerTimeout>
  /** What the consumer would do: "Retry" while attempts are left, else "DeadLetter". */
  readonly decision: FailureDecision
}

/** Decides what to do after a failed attempt; a defect in it counts as "DeadLetter". */
export type OnFailure<A, E, R> = (failure: HandlerFailure<A, E>) => Effect.Effect<FailureDecision, never, R>

/** Exponential from 200ms, doubling, never more than 10 seconds apart. */
export const DefaultRetry: Schedule.Schedule<unknown> = Schedule.exponential(Duration.millis(200)).pipe(
  Schedule.union(Schedule.spaced(Duration.seconds(10)))
)

/** The delay `schedule` gives before attempt `attempt + 1`, or none when it has ended by then. */
export const retryDelay = (schedule: Schedule.Schedule<unknown, unknown>, attempt: number): Effect.Effect<Option.Option<Duration.Duration>> =>
  Effect.gen(function*() {
    let state = schedule.initial
    let delay: Duration.Duration = Duration.zero
    for (let step = 0; step < attempt; step++) {
      const [next, , decision] = yield* schedule.step(0, undefined, state)
      if (ScheduleDecision.isDone(decision)) return Option.none()
      state = next
      delay = Duration.millis(Math.max(0, ScheduleIntervals.start(decision.intervals)))
    }
    return Option.some(delay)
  }).pipe(Effect.catchAllCause(() => Effect.succeed(Option.none())))

/** The consumer's own decision: retry while attempts (and the schedule) allow. */
export const defaultDecision = (attempt: number, maxAttempts: number, delay: Option.Option<Duration.Duration>): FailureDecision =>
  attempt >= maxAttempts || Option.isNone(delay) ? "DeadLetter" : "Retry"

/** The handler's typed error, if the cause is one. */
export const typedError = <E>(cause: Cause.Cause<E | HandlerTimeout>): Option.Option<E> => {
  const failure = Cause.failureOption(cause)
  return Option.isSome(failure) && !isTimeout(failure.value) ? Option.some(failure.value as E) : Option.none()
}

const isTimeout = (value: unknown): value is HandlerTimeout =>
  typeof value === "object" && value !== null && (value as { readonly _tag?: unknown })._tag === "HandlerTimeout"
