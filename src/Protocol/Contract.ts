/**
 * The endpoint contract: what a producer endpoint and its controller, and a consumer endpoint and
 * its controller, say to each other. The everyday API (`send`, `run`) is built on these values;
 * users who feed a flow from their own recoverable source use them directly.
 *
 * They are plain tagged classes rather than `Data` classes: a grant and a `Stored` are made for
 * every message, and a `Data` class costs several times more to construct. Compare them by field.
 */
import type { Effect } from "effect"

/** Application message ids must not start with this: chunk entries of large messages use it. */
export const ReservedMessageIdPrefix = "ReliableChunk:"

/**
 * One send permission from the producer's controller. Hold it until there is something to send;
 * it never expires. A grant offered again carries the same token and must receive the same
 * `Produced`.
 */
export class RequestNext {
  readonly _tag = "RequestNext"
  /** The producer endpoint the grant belongs to. */
  readonly endpoint: string
  /** The controller incarnation that issued it; a grant of an earlier incarnation is stale. */
  readonly controller: string
  readonly token: string
  constructor(fields: { readonly endpoint: string; readonly controller: string; readonly token: string }) {
    this.endpoint = fields.endpoint
    this.controller = fields.controller
    this.token = fields.token
  }
}

/** The answer to a grant: one business message under a stable, application-chosen id. */
export class Produced<A> {
  readonly _tag = "Produced"
  readonly grant: RequestNext
  readonly messageId: string
  readonly payload: A
  constructor(fields: { readonly grant: RequestNext; readonly messageId: string; readonly payload: A }) {
    this.grant = fields.grant
    this.messageId = fields.messageId
    this.payload = fields.payload
  }

  static make<A>(grant: RequestNext, messageId: string, payload: A): Produced<A> {
    return new Produced({ grant, messageId, payload })
  }
}

/**
 * The controller stored the message (durably, when a durable queue is attached). `seq` is the
 * producer-visible store sequence. Answer with `StoredAck.make(stored)` once your own source no
 * longer needs to resubmit the message.
 */
export class Stored {
  readonly _tag = "Stored"
  readonly endpoint: string
  readonly controller: string
  readonly token: string
  readonly messageId: string
  readonly seq: number
  /** True when this message id was stored before (a resubmission); the original seq is kept. */
  readonly alreadyStored: boolean
  constructor(fields: Omit<Stored, "_tag">) {
    this.endpoint = fields.endpoint
    this.controller = fields.controller
    this.token = fields.token
    this.messageId = fields.messageId
    this.seq = fields.seq
    this.alreadyStored = fields.alreadyStored
  }
}

/**
 * A message committed to a durable queue's backlog by `enqueue`: it is durable, and the flow
 * delivers it in backlog order as demand arrives.
 */
export class Enqueued {
  readonly _tag = "Enqueued"
  readonly endpoint: string
  readonly messageId: string
  /** True when this id was enqueued or stored before: nothing was added (the first write wins). */
  readonly alreadyStored: boolean
  constructor(fields: Omit<Enqueued, "_tag">) {
    this.endpoint = fields.endpoint
    this.messageId = fields.messageId
    this.alreadyStored = fields.alreadyStored
  }
}

/** Completes the handshake of one message; the controller then emits it to the consumer. */
export class StoredAck {
  readonly _tag = "StoredAck"
  readonly endpoint: string
  readonly controller: string
  readonly token: string
  readonly messageId: string
  readonly seq: number
  constructor(fields: Omit<StoredAck, "_tag">) {
    this.endpoint = fields.endpoint
    this.controller = fields.controller
    this.token = fields.token
    this.messageId = fields.messageId
    this.seq = fields.seq
  }

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
export class DeliveryConfirmed {
  readonly _tag = "DeliveryConfirmed"
  readonly endpoint: string
  readonly messageId: string
  /** The producer-visible store sequence, the same number `Stored.seq` carried. */
  readonly seq: number
  constructor(fields: Omit<DeliveryConfirmed, "_tag">) {
    this.endpoint = fields.endpoint
    this.messageId = fields.messageId
    this.seq = fields.seq
  }
}

/**
 * One message handed to the consumer. Process it idempotently (keyed by `messageId`), then
 * confirm; the next delivery arrives only after this one is confirmed.
 */
export interface Delivery<A> {
  readonly messageId: string
  /** The sequence number within the current producer session. */
  readonly seq: number
  readonly payload: A
  /**
   * 1 for the first delivery of the message to a handler, +1 for each one after a failure
   * (work-pulling: counted by the producer, so it carries over to another worker and, with a
   * durable work queue, across restarts; point-to-point: counted by this consumer). A resend of a
   * lost message is not an attempt.
   */
  readonly attempt: number
  /** Confirms this delivery; repeating it, or confirming a superseded delivery, does nothing. */
  readonly confirm: Effect.Effect<void>
}
