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

interface Inbox {
  readonly receive: Receiver
  /** What arrived since the last delivery; undefined when nothing did. */
  pending: Array<Envelope> | undefined
}

export class LocalInboxes {
  private readonly inboxes = new Map<string, Inbox>()
  private due: Array<Inbox> = []
  private anyOpened = false

  /** True once any inbox was opened as a queue: code outside the controllers reads envelopes. */
  get opened(): boolean {
    return this.anyOpened
  }

  /** Queues an envelope for the receiver under `key`; false when there is none. */
  deliver(key: string, envelope: Envelope): boolean {
    const inbox = this.inboxes.get(key)
    if (inbox === undefined) return false
    if (inbox.pending !== undefined) {
      inbox.pending.push(envelope)
      return true
    }
    inbox.pending = [envelope]
    if (this.due.length === 0) queueMicrotask(this.flush)
    this.due.push(inbox)
    return true
  }

  private readonly flush = (): void => {
    const due = this.due
    this.due = []
    for (const inbox of due) {
      const envelopes = inbox.pending
      inbox.pending = undefined
      if (envelopes === undefined) continue
      try {
        inbox.receive(envelopes)
      } catch (error) {
        // A receiver is a controller's fold, which does not throw; if one does, the others still run.
        console.error("effect-reliable: an inbox receiver threw", error)
      }
    }
  }

  /** Registers `receive` under `key` for the life of the scope. */
  attach(key: string, receive: Receiver): Effect.Effect<void, never, Scope.Scope> {
    return Effect.acquireRelease(
      Effect.sync(() => {
        const inbox: Inbox = { receive, pending: undefined }
        this.inboxes.set(key, inbox)
        return inbox
      }),
      (inbox) =>
        Effect.sync(() => {
          if (this.inboxes.get(key) === inbox) this.inboxes.delete(key)
          inbox.pending = undefined
        })
    )
  }

  /** An inbox as a queue (for code that reads envelopes itself, e.g. tests). */
  open(key: string): Effect.Effect<Queue.Dequeue<Envelope>, never, Scope.Scope> {
    return Effect.gen(this, function*() {
      this.anyOpened = true
      const queue = yield* Effect.acquireRelease(Queue.dropping<Envelope>(InboxCapacity), Queue.shutdown)
      yield* this.attach(key, (envelopes) => {
        for (const envelope of envelopes) queue.unsafeOffer(envelope)
      })
      return queue
    })
  }
}
