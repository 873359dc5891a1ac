/**
 * Where a consumer's controller hands deliveries to the endpoint's takers (`run` loops and
 * `deliveries` pulls), first in, first out. The controller hands out at most a few deliveries at
 * a time, so what waits here is bounded by the protocol. A taker that finds a delivery ready
 * takes it synchronously (the `run` loop's hot path: a confirmation's fold hands out the next
 * delivery, which the loop then takes without waiting); otherwise it waits until one is put.
 * Closing fails every waiting and later taker with `EndpointClosed`.
 *
 * A `run` loop waits as a `LoopTaker`, whose waits register no interruption handler: an
 * `Effect.async` that returns a canceler is wrapped in `onInterrupt` on every wait, and in a busy
 * flow that machinery lived long enough to be promoted to the old generation (about half of the
 * send loop's promoted bytes; see `Signal` for the same finding). The loop instead says once,
 * when it stops, that it has left (`leave`): its place in line is dropped, and a delivery put to
 * it that it never received is returned, so nothing handed out is lost to an interrupted wait.
 */
import { Effect, Exit } from "effect"
import { EndpointClosed } from "../Protocol/Errors.js"

type Resume<D> = (exit: Exit.Exit<D, EndpointClosed>) => void

/** One waiting taker: where its delivery goes, and the delivery put to it and not yet received. */
class Waiter<D> {
  resume: Resume<D> | undefined = undefined
  inTransit: D | undefined = undefined
}

/** A taker that waits again and again (a `run` loop); see the module comment. */
export class LoopTaker<D> extends Waiter<D> {
  /** The loop has the delivery it was resumed with. */
  received(): void {
    this.inTransit = undefined
  }
}

export class Handoff<D> {
  private readonly ready: Array<D> = []
  private readonly takers: Array<Waiter<D>> = []
  private closed: EndpointClosed | undefined = undefined
  /** Deliveries taken and not yet confirmed or given back: what a shutdown waits for. */
  private held = 0

  constructor(private readonly endpoint: string) {}

  /** Hands a delivery to the first waiting taker, or keeps it for the next one. */
  put(delivery: D): void {
    if (this.closed !== undefined) return
    const taker = this.takers.shift()
    if (taker === undefined) return void this.ready.push(delivery)
    this.held++
    const resume = taker.resume!
    taker.resume = undefined
    taker.inTransit = delivery
    resume(Exit.succeed(delivery))
  }

  /**
   * The next delivery: an `Exit` when one is ready (call it inside `Effect.suspend`), else a wait
   * that takes the caller out of line if it is interrupted.
   */
  take(): Effect.Effect<D, EndpointClosed> {
    const now = this.takeNow()
    if (now !== undefined) return now
    const waiter = new Waiter<D>()
    return Effect.async<D, EndpointClosed>((resume) => {
      if (!this.wait(waiter, resume)) return
      return Effect.sync(() => this.remove(waiter))
    })
  }

  /** The next delivery when one is ready (it is then held), without waiting. */
  takeReady(): D | undefined {
    if (this.ready.length === 0) return undefined
    this.held++
    return this.ready.shift()
  }

  /** As `take`, for a loop that calls `leave` when it stops instead of a handler on every wait. */
  takeAs(taker: LoopTaker<D>): Effect.Effect<D, EndpointClosed> {
    const now = this.takeNow()
    if (now !== undefined) return now
    return Effect.async<D, EndpointClosed>((resume) => {
      this.wait(taker, resume)
    })
  }

  /**
   * The loop stopped: it is taken out of line, and the delivery put to it that it never received
   * is returned (it counts as held until the caller gives it back).
   */
  leave(taker: LoopTaker<D>): D | undefined {
    this.remove(taker)
    const lost = taker.inTransit
    taker.inTransit = undefined
    return lost
  }

  /** A taken delivery was confirmed or given back. */
  done(): void {
    if (this.held > 0) this.held--
  }

  /** True while a taker holds a delivery it has not confirmed or given back. */
  holding(): boolean {
    return this.held > 0
  }

  /** Takers waiting now. */
  waiting(): number {
    return this.takers.length
  }

  /** Every waiting and later taker fails with `EndpointClosed`; deliveries not taken are dropped. */
  close(): void {
    if (this.closed !== undefined) return
    const error = new EndpointClosed({ name: this.endpoint })
    this.closed = error
    this.ready.length = 0
    const takers = this.takers.splice(0)
    for (const taker of takers) {
      const resume = taker.resume
      taker.resume = undefined
      resume?.(Exit.fail(error))
    }
  }

  /** A ready delivery or the closed error, as an `Exit`; undefined when the caller must wait. */
  private takeNow(): Exit.Exit<D, EndpointClosed> | undefined {
    const ready = this.takeReady()
    if (ready !== undefined) return Exit.succeed(ready)
    return this.closed === undefined ? undefined : Exit.fail(this.closed)
  }

  /** Puts the waiter in line (true), or resumes it at once when something came meanwhile. */
  private wait(waiter: Waiter<D>, resume: Resume<D>): boolean {
    // Something may have been put (or the handoff closed) since `take` was called.
    const now = this.takeNow()
    if (now !== undefined) {
      resume(now)
      return false
    }
    waiter.resume = resume
    this.takers.push(waiter)
    return true
  }

  private remove(waiter: Waiter<D>): void {
    const index = this.takers.indexOf(waiter)
    if (index >= 0) this.takers.splice(index, 1)
    waiter.resume = undefined
  }
}
