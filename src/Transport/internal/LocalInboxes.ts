/**
 * The inboxes of one node's controllers: a receiver per controller address, called with every
 * envelope posted to it since the last delivery. Delivery is batched on a microtask: a sender's
 * fold never re-enters a receiver's fold, and a receiver needs no fiber of its own to wake (a fiber
 * per inbox cost each round trip of the protocol two fiber wake-ups).
 */
import { Effect, Queue } from "effect"
import type { Scope } from "effect"
import type { Envelope } from "../../Protocol/WireMessage.js"

export type Receiver = (envelopes: ReadonlyArray<Envelope>) => void

/**
 * The most envelopes an `open` inbox queue holds. The protocol bounds what is in flight by the
 * windows; this cap only keeps a misbehaving sender from growing memory without limit.
 */
export const InboxCapacity = 1 << 17

export class LocalInboxes {
  private readonly receivers = new Map<string, Receiver>()
  private pending = new Map<Receiver, Array<Envelope>>()
  private scheduled = false

  /** Queues an envelope for the receiver under `key`; false when there is none. */
  deliver(key: string, envelope: Envelope): boolean {
    const receiver = this.receivers.get(key)
    if (receiver === undefined) return false
    const batch = this.pending.get(receiver)
    if (batch === undefined) this.pending.set(receiver, [envelope])
    else batch.push(envelope)
    if (!this.scheduled) {
      this.scheduled = true
      queueMicrotask(this.flush)
    }
    return true
  }

  private readonly flush = (): void => {
    this.scheduled = false
    const batches = this.pending
    this.pending = new Map()
    for (const [receiver, envelopes] of batches) {
      try {
        receiver(envelopes)
      } catch (error) {
        // A receiver is a controller's fold, which does not throw; if one does, the others still run.
        console.error("effect-reliable: an inbox receiver threw", error)
      }
    }
  }

  /** Registers `receive` under `key` for the life of the scope. */
  attach(key: string, receive: Receiver): Effect.Effect<void, never, Scope.Scope> {
    return Effect.acquireRelease(
      Effect.sync(() => void this.receivers.set(key, receive)),
      () =>
        Effect.sync(() => {
          if (this.receivers.get(key) === receive) this.receivers.delete(key)
        })
    )
  }

  /** An inbox as a queue (for code that reads envelopes itself, e.g. tests). */
  open(key: string): Effect.Effect<Queue.Dequeue<Envelope>, never, Scope.Scope> {
    return Effect.gen(this, function*() {
      const queue = yield* Effect.acquireRelease(Queue.dropping<Envelope>(InboxCapacity), Queue.shutdown)
      yield* this.attach(key, (envelopes) => {
        for (const envelope of envelopes) queue.unsafeOffer(envelope)
      })
      return queue
    })
  }
}
