/**
 * A wake-up for fibers waiting on state that lives in a plain variable (guarded by the JS
 * thread). `next()` captures the current generation synchronously, so a `fire` that happens
 * between checking the state and starting to wait is never missed.
 */
import { Deferred, Exit, FiberId } from "effect"
import type { Effect } from "effect"

export class Signal {
  private current = Deferred.unsafeMake<void>(FiberId.none)

  /** An effect that completes at the first `fire` after this call. */
  next(): Effect.Effect<void> {
    return Deferred.await(this.current)
  }

  fire(): void {
    const fired = this.current
    this.current = Deferred.unsafeMake<void>(FiberId.none)
    Deferred.unsafeDone(fired, Exit.void)
  }
}
