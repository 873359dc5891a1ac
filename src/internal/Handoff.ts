/**
 * Where a consumer's controller hands deliveries to the endpoint's takers (`run` loops and
 * `deliveries` pulls), first in, first out. The controller hands out at most a few deliveries at
 * a time, so what waits here is bounded by the protocol. A taker that finds a delivery ready
 * takes it synchronously (the `run` loop's hot path: a confirmation's fold hands out the next
 * delivery, which the loop then takes without waiting); otherwise it waits until one is put.
 * Closing fails every waiting and later taker with `EndpointClosed`.
 */
import { Effect, Exit } from "effect"
import { EndpointClosed } from "../Protocol/Errors.js"

type Resume<D> = (exit: Exit.Exit<D, EndpointClosed>) => void

export class Handoff<D> {
  private readonly ready: Array<D> = []
  private readonly takers: Array<Resume<D>> = []
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
    taker(Exit.succeed(delivery))
  }

  /** The next delivery: an `Exit` when one is ready (call it inside `Effect.suspend`), else a wait. */
  take(): Effect.Effect<D, EndpointClosed> {
    if (this.ready.length > 0) {
      this.held++
      return Exit.succeed(this.ready.shift()!)
    }
    if (this.closed !== undefined) return Exit.fail(this.closed)
    return Effect.async<D, EndpointClosed>((resume) => {
      // Something may have been put (or the handoff closed) since `take` was called.
      if (this.ready.length > 0 || this.closed !== undefined) return resume(this.take() as Exit.Exit<D, EndpointClosed>)
      this.takers.push(resume)
      return Effect.sync(() => {
        const index = this.takers.indexOf(resume)
        if (index >= 0) this.takers.splice(index, 1)
      })
    })
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
    for (const taker of takers) taker(Exit.fail(error))
  }
}
