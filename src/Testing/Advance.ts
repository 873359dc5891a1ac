/**
 * Driving flows on the `TestClock`: advance it in steps until a condition holds (failing with a
 * label and a dump of the flow's state when it does not within a bound of test time), or by a
 * plain duration. Between steps the forked fibers run to quiescence without moving the clock.
 */
import { Data, Duration, Effect, Option, Scheduler, TestClock } from "effect"
import { ReliableSystem } from "../internal/ReliableSystemTag.js"
import { snapshot } from "../ReliableSystem.js"

/** `advanceUntil`'s condition did not hold within its bound of test time. */
export class AdvanceTimeout extends Data.TaggedError("AdvanceTimeout")<{
  /** What was waited for (the `label` option). */
  readonly label: string
  /** The bound of test time, in milliseconds. */
  readonly withinMillis: number
  /** What `dump` gave when the bound was reached (by default the system's snapshot). */
  readonly state: unknown
}> {
  override get message(): string {
    return `advanceUntil "${this.label}": not reached within ${this.withinMillis}ms of test time; state: ${describe(this.state)}`
  }
}

const describe = (state: unknown): string => {
  try {
    return JSON.stringify(state) ?? String(state)
  } catch {
    return String(state)
  }
}

/** Yields often enough for forked fibers to run to quiescence, without moving the clock. */
export const settle: Effect.Effect<void> = Effect.gen(function*() {
  for (let index = 0; index < 20; index++) yield* Effect.yieldNow()
})

/**
 * A scheduler that never falls back to `setTimeout`: under the TestClock nothing waits on real
 * time, and the default scheduler's timer fallback costs a real millisecond per yield.
 */
export const microtaskScheduler: Scheduler.Scheduler = new Scheduler.MixedScheduler(Number.MAX_SAFE_INTEGER)

/** Runs an effect on the microtask scheduler (for long TestClock-driven runs). */
export const onMicrotasks = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withScheduler(effect, microtaskScheduler)

export interface AdvanceUntilOptions<R> {
  /** What is waited for; the failure names it. */
  readonly label: string
  /** How far the clock moves per step; default 10ms. */
  readonly step?: Duration.DurationInput
  /** The most test time to let pass; default 60 seconds. */
  readonly within?: Duration.DurationInput
  /**
   * The state to show when the condition does not hold in time; default: the snapshot of the
   * `ReliableSystem` in context (every endpoint's stats), if there is one.
   */
  readonly dump?: Effect.Effect<unknown, never, R>
}

const defaultDump: Effect.Effect<unknown> = Effect.flatMap(
  Effect.serviceOption(ReliableSystem),
  Option.match({ onNone: () => Effect.succeed(undefined), onSome: (system) => Effect.provideService(snapshot, ReliableSystem, system) })
)

const holds = <R>(condition: (() => boolean) | Effect.Effect<boolean, never, R>): Effect.Effect<boolean, never, R> =>
  Effect.isEffect(condition) ? condition : Effect.sync(condition)

/**
 * Advances the TestClock by `step` until `condition` holds; fails with `AdvanceTimeout` (its
 * label and the dumped state) after `within` of test time.
 */
export const advanceUntil = <R = never>(
  condition: (() => boolean) | Effect.Effect<boolean, never, R>,
  options: AdvanceUntilOptions<R>
): Effect.Effect<void, AdvanceTimeout, R> =>
  Effect.gen(function*() {
    const step = Duration.decode(options.step ?? Duration.millis(10))
    const within = Duration.toMillis(options.within ?? Duration.seconds(60))
    const check = holds(condition)
    let elapsed = 0
    yield* settle
    while (!(yield* check)) {
      if (elapsed >= within) {
        const state = yield* (options.dump ?? defaultDump)
        return yield* new AdvanceTimeout({ label: options.label, withinMillis: within, state })
      }
      yield* TestClock.adjust(step)
      yield* settle
      elapsed += Duration.toMillis(step)
    }
  })

/** Advances the TestClock by `duration` in steps of `step` (default 10ms), letting fibers run after each. */
export const advanceBy = (
  duration: Duration.DurationInput,
  step: Duration.DurationInput = Duration.millis(10)
): Effect.Effect<void> =>
  Effect.gen(function*() {
    const total = Duration.toMillis(duration)
    const stepMillis = Math.max(1, Duration.toMillis(step))
    yield* settle
    for (let elapsed = 0; elapsed < total; elapsed += stepMillis) {
      yield* TestClock.adjust(Duration.millis(Math.min(stepMillis, total - elapsed)))
      yield* settle
    }
  })
