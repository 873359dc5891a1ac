/**
 * A wake-up for fibers waiting on state that lives in a plain variable (guarded by the JS
 * thread). `next()` captures the current generation synchronously, so a `fire` that happens
 * between checking the state and starting to wait is never missed. A generation is only
 * allocated when someone waits, so firing with nobody waiting costs nothing.
 */
import { Deferred, Exit, FiberId } from "effect"
import type { Effect } from "effect"

export class Signal {
  private current: Deferred.Deferred<void> | undefined

  /** An effect that completes at the first `fire` after this call. */
  next(): Effect.Effect<void> {
    this.current ??= Deferred.unsafeMake<void>(FiberId.none)
    return Deferred.await(this.current)
  }

  fire(): void {
    const fired = this.current
    if (fired === undefined) return
    this.current = undefined
    Deferred.unsafeDone(fired, Exit.void)
  }
}
