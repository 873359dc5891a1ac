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
 * A call past its deadline is interrupted, and `onOverdue` is told at once: silence for a whole
 * timeout is an outage, as a lane's health says. The caller fails with the timeout once the call's
 * fiber has ended (its finalizers and error handlers ran), as with `Effect.timeout`, or one more
 * timeout later, whichever comes first; an interrupted caller interrupts its call and waits for it
 * as long at most. A driver can take that long to let go, or longer:
 * - `@effect/sql-pg` answers the interruption of a hung query with a cancel request to the server,
 *   which waits up to 5 s (or the `connectTimeout`) when the server is out of reach;
 * - `@effect/sql` rolls an interrupted transaction back on its connection, and on a connection
 *   that stopped answering (a network gone silent) that waits until it answers again or dies.
 * A call not ended by then is left to end in the background (its fiber is a daemon), so that
 * neither a lane's retries nor an endpoint's shutdown waits on a dead connection. Such calls are
 * as many as the connections that went silent, at most the pool's size.
 */
import { Clock, Duration, Effect, FiberId } from "effect"
import type { Exit, Fiber } from "effect"

interface Call {
  /** The timeout's deadline; once the call is overdue, the end of the wait for it to let go. */
  deadline: number
  overdue: boolean
  readonly fiber: Fiber.RuntimeFiber<unknown, unknown>
  readonly onOverdue: (() => void) | undefined
  /** Tells the caller the timeout (the call's fiber has ended, or is left to end alone). */
  readonly timedOut: () => void
}

export interface CallTimeouts {
  /**
   * Runs `effect` in a fiber of its own; past the timeout it is interrupted (`onOverdue` is called
   * then) and fails with `onTimeout()` once its fiber has ended, or one more timeout later.
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

  /** Interrupts a call past its deadline, and gives up on one that has not let go a timeout later. */
  const expire = (call: Call, now: number): void => {
    if (call.overdue) {
      running.delete(call)
      call.timedOut()
      return
    }
    call.overdue = true
    call.deadline = now + timeoutMs
    call.onOverdue?.()
    call.fiber.unsafeInterruptAsFork(FiberId.none)
  }

  /** Sleeps until the earliest deadline, expires the calls past theirs, and goes on while any runs. */
  const watch: Effect.Effect<void> = Effect.flatMap(Clock.currentTimeMillis, (now) => {
    let next = Infinity
    for (const call of running) {
      if (call.deadline <= now) expire(call, now)
      if (running.has(call)) next = Math.min(next, call.deadline)
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
          const call: Call = {
            deadline: now + timeoutMs,
            overdue: false,
            fiber,
            onOverdue,
            timedOut: () => resume(Effect.fail(onTimeout()))
          }
          running.add(call)
          fiber.addObserver((exit: Exit.Exit<A, E>) => {
            // Not running any more: the caller was told already, or went away.
            if (!running.delete(call)) return
            if (call.overdue) call.timedOut()
            else resume(exit)
          })
          if (!armed) {
            armed = true
            runFork(Effect.ensuring(watch, Effect.sync(() => {
              armed = false
            })))
          }
          // The caller was interrupted: so is its call, and the caller waits for it, a timeout at
          // most. A canceler runs uninterruptibly: the wait is made interruptible for the timeout.
          return Effect.suspend(() => {
            running.delete(call)
            fiber.unsafeInterruptAsFork(FiberId.none)
            return Effect.ignore(Effect.timeout(Effect.interruptible(fiber.await), timeout))
          })
        })))

  return { timed }
}
