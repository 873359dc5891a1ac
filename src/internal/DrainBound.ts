/**
 * How long a graceful shutdown waits: at most `drainTimeout` of real time. A shutdown is a real
 * event (a deploy, a SIGTERM), and measuring its bound on the Effect clock would make closing a
 * scope under `TestClock` wait forever for a handler that never finishes, since nobody advances
 * that clock while a scope closes. So the bound is read from a live clock whatever clock the
 * program runs on; everything else (resends, retries, leases) stays on the Effect clock.
 */
import { Clock, Effect } from "effect"
import type { Duration } from "effect"

const liveClock = Clock.make()

/**
 * Runs `effect` (a wait) for at most `bound` of real time, then goes on. The wait is made
 * interruptible: a shutdown runs in finalizers, where a timeout could not otherwise stop it.
 */
export const drainWithin = (bound: Duration.Duration, effect: Effect.Effect<void>): Effect.Effect<void> =>
  Effect.ignore(Effect.timeout(Effect.interruptible(effect), bound).pipe(Effect.withClock(liveClock)))
