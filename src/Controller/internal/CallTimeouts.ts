/**
 * The timeout of a durable lane's queue calls, without `Effect.timeout`'s cost. `Effect.timeout`
 * races the call against a sleep: two fibers forked, a timer set and cleared, and the loser's
 * interruption awaited, on every call; a one-at-a-time durable `send` paid about 100 µs of CPU
 * for it, more than everything else the producer does per message. Here a call runs in one fiber
 * of its own, and one sleeping fiber per lane (armed by the first call that finds none, gone when
 * no call runs) wakes at the earliest deadline and interrupts the calls past theirs. All calls
 * have the same timeout, so a call made later never falls due before the one the sleeper waits
 * for. The sleep and the deadlines use the callers' `Clock` (`TestClock` in tests).
 *
 * A call past its deadline fails with the timeout only once its fiber has ended (its own
 * finalizers and error handlers ran), as with `Effect.timeout`; an interrupted caller interrupts
 * its call and waits for it. That end can come well after the deadline: `@effect/sql-pg` answers
 * the interruption of a hung query by asking the server to cancel it, for up to 5 s (less with a
 * shorter `connectTimeout`) when the server is out of reach. So the caller can also be told at
 * the deadline itself (`onOverdue`), as a lane's health is: silence for a whole timeout is an
 * outage, however long the call then takes to let go.
 */
import { Clock, Duration, Effect, FiberId } from "effect"
import type { Fiber } from "effect"

interface Call {
  readonly deadline: number
  readonly fiber: Fiber.RuntimeFiber<unknown, unknown>
  readonly onOverdue: (() => void) | undefined
  timedOut: boolean
}

export interface CallTimeouts {
  /**
   * Runs `effect` in a fiber of its own; past the timeout it is interrupted (`onOverdue` is called
   * then) and fails with `onTimeout()` once its fiber has ended.
   */
  readonly timed: <A, E, E2>(effect: Effect.Effect<A, E>, onTimeout: () => E2, onOverdue?: () => void) => Effect.Effect<A, E | E2>
}

export const make = (
  timeout: Duration.Duration,
  runFork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>
): CallTimeouts => {
  const timeoutMs = Duration.toMillis(timeout)
  const running = new Set<Call>()
  let armed = false

  /** Sleeps until the earliest deadline, expires the calls past theirs, and goes on while any runs. */
  const watch: Effect.Effect<void> = Effect.flatMap(Clock.currentTimeMillis, (now) => {
    let next = Infinity
    for (const call of running) {
      if (call.deadline > now) next = Math.min(next, call.deadline)
      else if (!call.timedOut) {
        call.timedOut = true
        call.onOverdue?.()
        call.fiber.unsafeInterruptAsFork(FiberId.none)
      }
    }
    if (next === Infinity) {
      armed = false
      return Effect.void
    }
    return Effect.zipRight(Effect.sleep(Duration.millis(next - now)), watch)
  })

  const timed = <A, E, E2>(effect: Effect.Effect<A, E>, onTimeout: () => E2, onOverdue?: () => void): Effect.Effect<A, E | E2> =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Effect.flatMap(Effect.forkDaemon(effect), (fiber) =>
        Effect.async<A, E | E2>((resume) => {
          const call: Call = { deadline: now + timeoutMs, fiber, onOverdue, timedOut: false }
          running.add(call)
          fiber.addObserver((exit) => {
            running.delete(call)
            resume(call.timedOut ? Effect.fail(onTimeout()) : exit)
          })
          if (!armed) {
            armed = true
            runFork(Effect.ensuring(watch, Effect.sync(() => {
              armed = false
            })))
          }
          // The caller was interrupted: so is its call, and the caller waits for it to end.
          return Effect.suspend(() => {
            running.delete(call)
            return Effect.asVoid(fiber.interruptAsFork(FiberId.none).pipe(Effect.zipRight(fiber.await)))
          })
        })))

  return { timed }
}
