/**
 * How long a graceful shutdown waits: at most `drainTimeout` of real time for what an endpoint
 * holds, and a bound of its own for each call to a database that may have stopped answering (a
 * name's release, a member's leave, an `UNLISTEN`). A shutdown is a real
 * event (a deploy, a SIGTERM), and measuring its bound on the Effect clock would make closing a
 * scope under `TestClock` wait forever for a handler that never finishes, since nobody advances
 * that clock while a scope closes. So the bound is read from a live clock whatever clock the
 * program runs on; everything else (resends, retries, leases) stays on the Effect clock.
 */
import { Clock, Effect, Fiber } from "effect"
import type { Duration } from "effect"

const liveClock = Clock.make()

/**
 * Runs `effect` (a wait) for at most `bound` of real time, then goes on. The wait is made
 * interruptible: a shutdown runs in finalizers, where a timeout could not otherwise stop it.
 */
export const drainWithin = (bound: Duration.Duration, effect: Effect.Effect<void>): Effect.Effect<void> =>
  Effect.ignore(Effect.timeout(Effect.interruptible(effect), bound).pipe(Effect.withClock(liveClock)))

/**
 * Waits for `effect` at most `bound` of real time; past it the effect goes on in the background,
 * in a fiber of its own, until it ends. For a shutdown's calls to a database that may have stopped
 * answering: a call on a connection gone silent waits for an answer, and so would its
 * interruption, while its outcome still matters once the connection answers (or dies).
 */
export const waitAtMost = (bound: Duration.Duration, effect: Effect.Effect<void, unknown>): Effect.Effect<void> =>
  Effect.flatMap(Effect.forkDaemon(effect), (fiber) =>
    Effect.ignore(Effect.timeout(Effect.interruptible(Fiber.await(fiber)), bound).pipe(Effect.withClock(liveClock))))
