/**
 * A controller's timer: it ticks the machine, then sleeps until the machine's next deadline, so a
 * re-offer happens exactly one interval after the offer. With no deadline it waits to be woken
 * (by `wake`, when the machine sets one) instead of polling; a deadline that comes before the
 * end of the sleep in progress (a failed job's retry, which may be due sooner than an interval)
 * cuts the sleep short when `wake` is told of it. The sleep is an `Effect.sleep`, so `TestClock`
 * drives it in tests.
 */
import { Duration, Effect } from "effect"
import type { Scope } from "effect"
import { Signal } from "../../internal/Signal.js"

export interface DeadlineTimer {
  /**
   * The machine may have a deadline now: wake the timer if it waits for one (cheap otherwise).
   * With `at`, the deadline the machine has: a timer sleeping past it wakes for it.
   */
  readonly wake: (at?: number) => void
  /** Runs the timer for the life of the scope. */
  readonly run: (options: {
    readonly tick: () => void
    readonly deadline: () => number | undefined
    readonly now: () => number
    /** The shortest time from an offer to its deadline (the retry interval). */
    readonly recheckMs: number
  }) => Effect.Effect<void, never, Scope.Scope>
}

export const make = (): DeadlineTimer => {
  const signal = new Signal()
  let idle = false
  // When the sleep in progress ends (undefined: none).
  let sleepingUntil: number | undefined
  return {
    wake: (at) => {
      if (idle || at !== undefined && sleepingUntil !== undefined && at < sleepingUntil) signal.fire()
    },
    run: ({ deadline, now, recheckMs, tick }) => {
      // Sleeps `delayMs`, or less when woken for an earlier deadline (then waits for that one).
      const sleep = (delayMs: number): Effect.Effect<void> => {
        sleepingUntil = now() + delayMs
        const slept = Effect.as(Effect.sleep(Duration.millis(delayMs)), false)
        return Effect.flatMap(Effect.raceFirst(slept, Effect.as(signal.next(), true)), (woken) => {
          sleepingUntil = undefined
          return woken ? untilDue : Effect.void
        })
      }
      // Waits until the next deadline; with none, waits to be woken for one. A wake whose
      // deadline is already gone again (a grant answered at once: the flow is busy) looks
      // again one `recheckMs` later instead of waiting for the next wake, so a busy flow costs
      // the timer one wake per interval rather than one per grant. An offer's deadline cannot
      // fall due sooner: it is at least one interval after the offer that set it, and an offer
      // during that sleep has its deadline after the sleep ends.
      const untilDue: Effect.Effect<void> = Effect.suspend(() => {
        const next = deadline()
        if (next !== undefined) return sleep(Math.max(1, next - now()))
        idle = true
        return Effect.flatMap(signal.next(), () => {
          idle = false
          const woken = deadline()
          return sleep(woken === undefined ? recheckMs : Math.max(1, woken - now()))
        })
      })
      return Effect.asVoid(Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sync(tick), untilDue))))
    }
  }
}
