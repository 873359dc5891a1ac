/**
 * A delivery as a consumer controller hands it to its endpoint. `confirm` is built only when
 * asked for: the `run` loop confirms through `confirmNow` without allocating an effect per
 * delivery. The endpoint counts a delivery as held from the moment it is taken until it is
 * confirmed, given back or settled another way, once (`settled`), so a shutdown knows what to
 * wait for.
 */
import { Effect } from "effect"
import type { Delivery } from "../../Protocol/Contract.js"
import type { SettleOutcome } from "../../Protocol/WireMessage.js"

/** What a delivery reports to its controller. */
export interface DeliveryOwner {
  readonly confirm: (id: number) => void
  readonly settle: (id: number, outcome: SettleOutcome) => void
  /** A taken delivery stopped being held (confirmed, given back or settled). */
  readonly settled: () => void
}

export class ControllerDelivery<A> implements Delivery<A> {
  /** Confirmed, given back or settled already: the endpoint no longer counts it as held. */
  private done = false
  constructor(
    readonly messageId: string,
    readonly seq: number,
    readonly payload: A,
    readonly attempt: number,
    private readonly owner: DeliveryOwner,
    readonly id: number,
    /** The sender's W3C trace context, when its span was sampled. */
    readonly trace?: string | undefined
  ) {}

  get confirm(): Effect.Effect<void> {
    return Effect.sync(() => this.confirmNow())
  }

  confirmNow(): void {
    this.release()
    this.owner.confirm(this.id)
  }

  /** Settles the delivery another way (a failure retried by the producer, a dead letter). */
  settleWith(outcome: SettleOutcome): void {
    this.release()
    this.owner.settle(this.id, outcome)
  }

  /** No longer held by the endpoint (given back, confirmed or settled), counted once. */
  release(): void {
    if (this.done) return
    this.done = true
    this.owner.settled()
  }

  /** The same delivery as the handler's next attempt (a point-to-point retry in place). */
  withAttempt(attempt: number): ControllerDelivery<A> {
    const next = new ControllerDelivery(this.messageId, this.seq, this.payload, attempt, this.owner, this.id, this.trace)
    next.done = this.done
    return next
  }
}

/** Confirms a delivery synchronously (the `run` loop's path). */
export const confirmNow = <A>(delivery: Delivery<A>): void => {
  if (delivery instanceof ControllerDelivery) delivery.confirmNow()
  else Effect.runSync(delivery.confirm)
}
