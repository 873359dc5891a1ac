/**
 * The endpoint contract: what a producer endpoint and its controller, and a consumer endpoint and
 * its controller, say to each other. The everyday API (`send`, `run`) is built on these values;
 * users who feed a flow from their own recoverable source use them directly.
 */
import { Data } from "effect"
import type { Effect } from "effect"

/** Application message ids must not start with this: chunk entries of large messages use it. */
export const ReservedMessageIdPrefix = "ReliableChunk:"

/**
 * One send permission from the producer's controller. Hold it until there is something to send;
 * it never expires. A grant offered again carries the same token and must receive the same
 * `Produced`.
 */
export class RequestNext extends Data.TaggedClass("RequestNext")<{
  /** The producer endpoint the grant belongs to. */
  readonly endpoint: string
  /** The controller incarnation that issued it; a grant of an earlier incarnation is stale. */
  readonly controller: string
  readonly token: string
}> {}

/** The answer to a grant: one business message under a stable, application-chosen id. */
export class Produced<A> extends Data.TaggedClass("Produced")<{
  readonly grant: RequestNext
  readonly messageId: string
  readonly payload: A
}> {
  static make<A>(grant: RequestNext, messageId: string, payload: A): Produced<A> {
    return new Produced({ grant, messageId, payload })
  }
}

/**
 * The controller stored the message (durably, when a durable queue is attached). `seq` is the
 * producer-visible store sequence. Answer with `StoredAck.make(stored)` once your own source no
 * longer needs to resubmit the message.
 */
export class Stored extends Data.TaggedClass("Stored")<{
  readonly endpoint: string
  readonly controller: string
  readonly token: string
  readonly messageId: string
  readonly seq: number
  /** True when this message id was stored before (a resubmission); the original seq is kept. */
  readonly alreadyStored: boolean
}> {}

/** Completes the handshake of one message; the controller then emits it to the consumer. */
export class StoredAck extends Data.TaggedClass("StoredAck")<{
  readonly endpoint: string
  readonly controller: string
  readonly token: string
  readonly messageId: string
  readonly seq: number
}> {
  static make(stored: Stored): StoredAck {
    return new StoredAck({
      endpoint: stored.endpoint,
      controller: stored.controller,
      token: stored.token,
      messageId: stored.messageId,
      seq: stored.seq
    })
  }
}

/**
 * The consumer confirmed a message (only with `deliveryConfirmation: true`). Best effort: it can
 * be lost on a controller restart and repeats when a redelivered message is confirmed again.
 */
export class DeliveryConfirmed extends Data.TaggedClass("DeliveryConfirmed")<{
  readonly endpoint: string
  readonly messageId: string
  /** The producer-visible store sequence, the same number `Stored.seq` carried. */
  readonly seq: number
}> {}

/**
 * One message handed to the consumer. Process it idempotently (keyed by `messageId`), then
 * confirm; the next delivery arrives only after this one is confirmed.
 */
export interface Delivery<A> {
  readonly messageId: string
  /** The sequence number within the current producer session. */
  readonly seq: number
  readonly payload: A
  /** Confirms this delivery; repeating it, or confirming a superseded delivery, does nothing. */
  readonly confirm: Effect.Effect<void>
}
