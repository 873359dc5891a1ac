/**
 * A wake-up for fibers waiting on state that lives in a plain variable (guarded by the JS
 * thread). `next()` captures the current generation synchronously, so a `fire` that happens
 * between checking the state and starting to wait is never missed. A generation is only
 * allocated when someone waits, so firing with nobody waiting costs nothing.
 *
 * A generation is a flag and its waiters' resume callbacks (`Effect.async`), not a `Deferred`:
 * a flow waits on one per demand round, and a `Deferred` costs several times more to make.
 */
import { Effect } from "effect"

type Resume = (effect: Effect.Effect<void>) => void

class Generation {
  fired = false
  waiters: Array<Resume> | undefined = undefined

  /** Completes at this generation's fire (at once if it already fired). */
  readonly await: Effect.Effect<void> = Effect.async<void>((resume) => {
    if (this.fired) return resume(Effect.void)
    const waiters = (this.waiters ??= [])
    waiters.push(resume)
    // An interrupted waiter leaves; the others still wait.
    return Effect.sync(() => {
      const index = waiters.indexOf(resume)
      if (index !== -1) waiters.splice(index, 1)
    })
  })

  fire(): void {
    this.fired = true
    const waiters = this.waiters
    this.waiters = undefined
    if (waiters !== undefined) for (const resume of waiters) resume(Effect.void)
  }
}

export class Signal {
  private current: Generation | undefined

  /** An effect that completes at the first `fire` after this call. */
  next(): Effect.Effect<void> {
    return (this.current ??= new Generation()).await
  }

  fire(): void {
    const fired = this.current
    if (fired === undefined) return
    this.current = undefined
    fired.fire()
  }
}
