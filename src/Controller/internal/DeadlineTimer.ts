/**
 * A controller's timer: it ticks the machine, then sleeps until the machine's next deadline, so a
 * re-offer happens exactly one interval after the offer. With no deadline it waits to be woken
 * (by `wake`, when the machine sets one) instead of polling. The sleep is a `Schedule`, so
 * `TestClock` drives it in tests.
 */
import { Duration, Effect, Schedule } from "effect"
import type { Scope } from "effect"
import { Signal } from "../../internal/Signal.js"

export interface DeadlineTimer {
  /** The machine may have a deadline now: wake the timer if it waits for one (cheap otherwise). */
  readonly wake: () => void
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
  return {
    wake: () => {
      if (idle) signal.fire()
    },
    run: ({ deadline, now, recheckMs, tick }) => {
      // How long to sleep until the next deadline; with none, waits to be woken for one. A wake
      // whose deadline is already gone again (a grant answered at once: the flow is busy) looks
      // again one `recheckMs` later instead of waiting for the next wake, so a busy flow costs
      // the timer one wake per interval rather than one per grant. Nothing can fall due sooner:
      // a deadline is at least one interval after the offer that set it, and an offer during
      // that sleep has its deadline after the sleep ends.
      const untilDue: Effect.Effect<number> = Effect.suspend(() => {
        const next = deadline()
        if (next !== undefined) return Effect.succeed(Math.max(1, next - now()))
        idle = true
        return Effect.map(signal.next(), () => {
          idle = false
          const woken = deadline()
          return woken === undefined ? recheckMs : Math.max(1, woken - now())
        })
      })
      const tickThenDelay: Effect.Effect<number> = Effect.suspend(() => {
        tick()
        return untilDue
      })
      return Effect.asVoid(Effect.forkScoped(Effect.repeat(
        tickThenDelay,
        Schedule.identity<number>().pipe(Schedule.addDelay((delayMs) => Duration.millis(delayMs)))
      )))
    }
  }
}
