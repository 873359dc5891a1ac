/**
 * A wake-up for fibers waiting on state that lives in a plain variable (guarded by the JS
 * thread). `next()` captures the current generation synchronously, so a `fire` that happens
 * between checking the state and starting to wait is never missed. A generation is only
 * allocated when someone waits, so firing with nobody waiting costs nothing.
 *
 * A generation is a flag and its waiters' resume callbacks (`Effect.async`), not a `Deferred`:
 * a flow waits on one per demand round, and a `Deferred` costs several times more to make.
 *
 * A wait registers no interruption handler. An `Effect.async` that returns a canceler is wrapped
 * in `onInterrupt` on every wait, and in a busy flow that machinery lived long enough to be
 * promoted to the old generation (about 40 bytes per message, collected only by full
 * collections, so the process grew with the message count). Instead an interrupted waiter's
 * entry stays until the generation fires, which is harmless: Effect ignores a resume callback of
 * an async its fiber already left. To keep a generation that never fires bounded, each entry
 * names its fiber, and entries of fibers that have ended are dropped whenever the list doubles:
 * a generation holds at most about twice the entries of fibers still alive.
 */
import { Effect } from "effect"
import type { Fiber } from "effect"

type Resume = (effect: Effect.Effect<void>) => void

/** Below this many entries a generation never looks for ended fibers. */
const MinPruneAt = 16

class Generation {
  fired = false
  // Parallel lists, made by the first wait (fire leaves them undefined rather than allocating).
  private fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> | undefined = undefined
  private resumes: Array<Resume> | undefined = undefined
  private pruneAt = MinPruneAt

  /** Completes at this generation's fire (at once if it already fired). */
  readonly await: Effect.Effect<void> = Effect.withFiberRuntime((fiber) =>
    this.fired ? Effect.void : Effect.async<void>((resume) => {
      if (this.fired) return resume(Effect.void)
      this.add(fiber, resume)
    })
  )

  get size(): number {
    return this.resumes?.length ?? 0
  }

  private add(fiber: Fiber.RuntimeFiber<unknown, unknown>, resume: Resume): void {
    let fibers = (this.fibers ??= [])
    let resumes = (this.resumes ??= [])
    if (resumes.length >= this.pruneAt) {
      const alive = fibers.map((waiter) => waiter.unsafePoll() === null)
      fibers = this.fibers = fibers.filter((_, index) => alive[index])
      resumes = this.resumes = resumes.filter((_, index) => alive[index])
      this.pruneAt = Math.max(MinPruneAt, 2 * resumes.length)
    }
    fibers.push(fiber)
    resumes.push(resume)
  }

  fire(): void {
    this.fired = true
    const resumes = this.resumes
    this.fibers = undefined
    this.resumes = undefined
    if (resumes !== undefined) for (const resume of resumes) resume(Effect.void)
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

  /** Entries the current generation holds (waiting fibers, and interrupted ones not yet dropped). */
  waiting(): number {
    return this.current?.size ?? 0
  }
}
