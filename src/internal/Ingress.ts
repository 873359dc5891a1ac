/**
 * How messages enter a producer endpoint. Senders wait in one first-in, first-out queue, and
 * each grant the controller offers goes to the head of it: nobody who came later is served
 * earlier, and a grant wakes only the senders it serves (no wake-all). When several senders
 * wait, their messages go together under one grant, up to the consumer side's free demand: one
 * durable store-and-accept for all of them (group commit), each sender resolving with its own
 * `Stored` values, in its own order, exactly as if they had sent one by one. Nothing waits for a
 * batch to fill: a lone sender is served at once.
 *
 * Callers of the contract's `requestNext` wait in the same queue for a grant of their own.
 *
 * The queue is worked by `pump`, a synchronous loop that runs in whatever fiber or callback
 * brings news (a new sender, a grant, a durable answer). A grant offered inside a controller
 * fold is worked on the next microtask, outside the fold.
 */
import { Effect, Either, Exit } from "effect"
import type { Fiber } from "effect"
import type { ProduceError } from "../Controller/internal/ProducerCalls.js"
import { PendingAnswer } from "../Controller/internal/ProducerCalls.js"
import type { Answer } from "../Controller/internal/ProducerCalls.js"
import type { Handshake, ProduceItem } from "../Controller/internal/ProducerHandshake.js"
import type { RequestNext, Stored } from "../Protocol/Contract.js"
import * as DeferredItem from "./DeferredItem.js"
import type { OutgoingItem } from "./DeferredItem.js"
import { EndpointClosed, MessageRejected } from "../Protocol/Errors.js"

/** What the ingress needs of the controller that offered a grant. */
export interface IngressController {
  readonly running: () => boolean
  readonly freeDemand: () => number
  readonly handshake: () => Handshake
  readonly ackAll: (token: string) => void
  readonly submit: (grant: RequestNext, items: ReadonlyArray<ProduceItem>) => Answer | PendingAnswer
}

export interface IngressOptions {
  readonly endpoint: string
  /** The live controller that offered `grant`, or undefined when it is no longer the endpoint's. */
  readonly controllerOf: (grant: RequestNext) => IngressController | undefined
  /** The most messages one grant carries. */
  readonly maxBatch: number
  /**
   * Told how long each sender that had to wait waited for its answer (clock millis from `now`).
   * Kept here rather than as an `Effect.onExit` around the wait: that machinery, on every waiting
   * send, cost about 5 µs per message with 1,000 senders waiting.
   */
  readonly waited?: { readonly now: () => number; readonly observe: (millis: number) => void } | undefined
}

export type SendError = ProduceError | EndpointClosed

export interface Ingress {
  /** The controller offered a grant (called inside its fold). */
  readonly offer: (grant: RequestNext) => void
  /** The controller that offered the held grant stopped: the grant is void. */
  readonly voidGrant: () => void
  /**
   * Sends items after everyone waiting; their `Stored`, in order: an `Exit` when settled at once
   * (call it inside `Effect.suspend`), else an effect that waits for them. Deferred items are
   * encoded as a grant takes them.
   */
  readonly send: (items: ReadonlyArray<OutgoingItem>) => Effect.Effect<ReadonlyArray<Stored>, SendError>
  /** Waits, in the same queue, for a grant of the caller's own. */
  readonly requestNext: Effect.Effect<RequestNext, EndpointClosed>
  /** The endpoint closed: every waiting caller and every later call fails with `EndpointClosed`. */
  readonly close: () => void
  /** Callers waiting now. */
  readonly waiting: () => number
}

type Resume<A, E> = (exit: Exit.Exit<A, E>) => void

/**
 * A waiting caller's fiber, once it waits. A wait registers no interruption handler (see
 * `awaitEntry`): a caller counts as gone once its fiber has ended.
 */
class Waiting {
  fiber: Fiber.RuntimeFiber<unknown, unknown> | undefined = undefined

  get cancelled(): boolean {
    return this.fiber !== undefined && this.fiber.unsafePoll() !== null
  }
}

/** A sender's items: `next` of them were handed to the controller, `results` answered. */
class SendEntry extends Waiting {
  readonly _tag = "Send"
  next = 0
  results: Array<Stored> = []
  resume: Resume<ReadonlyArray<Stored>, SendError> | undefined = undefined
  exit: Exit.Exit<ReadonlyArray<Stored>, SendError> | undefined = undefined
  constructor(public items: ReadonlyArray<OutgoingItem>, readonly since: number) {
    super()
  }

  /** The caller has its answer: the entry lets go of the messages and answers (see `finish`). */
  release(): void {
    this.items = []
    this.results = []
    this.exit = undefined
  }
}

/** A `requestNext` caller. */
class GrantEntry extends Waiting {
  readonly _tag = "Grant"
  resume: Resume<RequestNext, EndpointClosed> | undefined = undefined
  exit: Exit.Exit<RequestNext, EndpointClosed> | undefined = undefined

  release(): void {
    this.exit = undefined
  }
}

type Entry = SendEntry | GrantEntry

/** The part of one entry a batch carries: `count` items from `offset` in the batch. */
interface Part {
  readonly entry: SendEntry
  readonly offset: number
  readonly count: number
}

interface Batch {
  readonly items: ReadonlyArray<ProduceItem>
  readonly parts: ReadonlyArray<Part>
}

/** A refusal of a batch of one names its message, so its sender (e.g. a backlog page) can tell which. */
const named = (error: ProduceError, batch: Batch): ProduceError =>
  error._tag === "MessageRejected" && error.messageId === undefined && batch.items.length === 1
    ? new MessageRejected({ endpointName: error.endpointName, messageId: batch.items[0].messageId, cause: error.cause })
    : error

const isStale = (error: ProduceError) => error._tag === "ProducerContractError" && error.reason === "StaleGrant"

/** The message an error names, when it is about one message rather than the batch. */
const refusedId = (error: ProduceError): string | undefined =>
  error._tag === "FrameTooLarge" || error._tag === "MessageRejected" ? error.messageId : undefined

/** Below this many waiting callers the line never looks for callers who went away. */
const MinPruneAt = 1024

/** The line of waiting callers: its head is served first. */
class Line {
  private readonly entries: Array<Entry> = []
  private head = 0
  private pruneAt = MinPruneAt

  get size(): number {
    return this.entries.length - this.head
  }

  peek(): Entry | undefined {
    return this.entries[this.head]
  }

  push(entry: Entry): void {
    this.entries.push(entry)
  }

  shift(): void {
    this.entries[this.head++] = undefined as never
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries.splice(0, this.head)
      this.head = 0
    }
  }

  /**
   * Drops the entries of callers who went away before any of their items was handed out, once
   * the line has doubled since the last look: what waits stays within about twice the callers
   * still there.
   */
  prune(): void {
    if (this.size < this.pruneAt) return
    const kept = this.entries.slice(this.head).filter((entry) => !(entry.cancelled && (entry._tag === "Grant" || entry.next === 0)))
    this.entries.length = 0
    this.entries.push(...kept)
    this.head = 0
    this.pruneAt = Math.max(MinPruneAt, 2 * kept.length)
  }

  /** Takes a waiting entry out of the line, wherever it is. */
  remove(entry: Entry): void {
    const index = this.entries.indexOf(entry, this.head)
    if (index === this.head) this.shift()
    else if (index > this.head) this.entries.splice(index, 1)
  }

  /** The entry `offset` places behind the head. */
  at(offset: number): Entry | undefined {
    return this.entries[this.head + offset]
  }

  /** Empties the line, returning what waited. */
  takeAll(): Array<Entry> {
    const all = this.entries.slice(this.head)
    this.entries.length = 0
    this.head = 0
    return all
  }
}

/**
 * Settles an entry. A waiting caller is resumed, and the entry then lets go of what it carried:
 * the wait's closures (`awaitEntry`) reach the entry, and with that wait finished entries
 * outlived young-generation collections, so every batch's encoded messages and `Stored` answers
 * were promoted (in the work-pulling bench, 349 MB per million jobs; 2 MB once released). A
 * caller not waiting yet finds the exit here.
 */
const finish = <A, E>(
  entry: { resume: Resume<A, E> | undefined; exit: Exit.Exit<A, E> | undefined; release: () => void },
  exit: Exit.Exit<A, E>
) => {
  entry.exit = exit
  const resume = entry.resume
  if (resume === undefined) return
  entry.resume = undefined
  resume(exit)
  entry.release()
}

/**
 * Waits for an entry's exit: at once when the pump already settled it. The wait registers no
 * interruption handler: an `Effect.async` that returns a canceler is wrapped in `onInterrupt` on
 * every wait, and in a busy flow that machinery lived long enough to be promoted to the old
 * generation (see `Signal`). An interrupted caller's fiber ends, and its entry then counts as
 * cancelled: the pump skips it, and `Line.prune` drops such entries as the line grows.
 */
const awaitEntry = <A, E>(entry: Waiting & { resume: Resume<A, E> | undefined; exit: Exit.Exit<A, E> | undefined }) =>
  entry.exit !== undefined ? entry.exit : Effect.withFiberRuntime<A, E>((fiber) =>
    Effect.async<A, E>((resume) => {
      if (entry.exit !== undefined) return resume(entry.exit)
      entry.fiber = fiber
      entry.resume = resume
    }))

class IngressQueue implements Ingress {
  private readonly line = new Line()
  private grant: RequestNext | undefined = undefined
  private inFlight = false
  private pumping = false
  private scheduled = false
  private closed = false
  /** After a batch was refused as a whole: this many more items go one per grant, to find the refused one. */
  private isolate = 0

  constructor(private readonly options: IngressOptions) {}

  readonly offer = (offered: RequestNext): void => {
    this.grant = offered
    if (this.line.size > 0) this.schedule()
  }

  readonly voidGrant = (): void => {
    this.grant = undefined
  }

  readonly send = (items: ReadonlyArray<OutgoingItem>): Effect.Effect<ReadonlyArray<Stored>, SendError> => {
    if (this.closed) return Exit.fail(this.closedError())
    const alone = this.line.size === 0 ? this.sendAlone(items) : undefined
    if (alone !== undefined) return alone
    const entry = new SendEntry(items, this.since())
    this.line.prune()
    this.line.push(entry)
    this.pump()
    return awaitEntry(entry)
  }

  readonly requestNext: Effect.Effect<RequestNext, EndpointClosed> = Effect.suspend(() => {
    if (this.closed) return Exit.fail(this.closedError())
    const entry = new GrantEntry()
    this.line.prune()
    this.line.push(entry)
    this.pump()
    return awaitEntry(entry)
  })

  readonly close = (): void => {
    if (this.closed) return
    this.closed = true
    this.grant = undefined
    this.closeWaiting()
  }

  readonly waiting = (): number => this.line.size

  /**
   * Drops the entries of callers who went away (interrupted) from the head; true when a caller
   * waits there. What such a caller's earlier batches stored stays stored; nothing more is sent.
   */
  private liveHead(): boolean {
    for (let entry = this.line.peek(); entry !== undefined; entry = this.line.peek()) {
      if (!entry.cancelled) return true
      this.line.shift()
    }
    return false
  }

  /**
   * The next batch: the head sender's items first, then those of the senders behind it, up to
   * the grant's size. A sender whose deferred payload no longer encodes is failed and skipped.
   */
  private collect(free: number): Batch {
    const limit = this.isolate > 0 ? 1 : Math.max(1, Math.min(this.options.maxBatch, free))
    const items: Array<ProduceItem> = []
    const parts: Array<Part> = []
    let failed: Array<[SendEntry, ProduceError]> | undefined
    for (let offset = 0; offset < this.line.size && items.length < limit; offset++) {
      const entry = this.line.at(offset)!
      if (entry._tag === "Grant") break
      if (entry.cancelled) continue
      const count = Math.min(limit - items.length, entry.items.length - entry.next)
      if (count <= 0) continue
      const taken = DeferredItem.takeAll(entry.items, entry.next, count)
      if (DeferredItem.isTakeError(taken)) {
        ;(failed ??= []).push([entry, taken])
        continue
      }
      // The usual case: the head sender's items all fit, and nobody else waits.
      if (taken.length === entry.items.length && this.line.size === 1) {
        entry.next = count
        if (this.isolate > 0) this.isolate -= count
        return { items: taken, parts: [{ entry, offset: 0, count }] }
      }
      parts.push({ entry, offset: items.length, count })
      for (let item = 0; item < count; item++) items.push(taken[item])
      entry.next += count
    }
    if (failed !== undefined) for (const [entry, error] of failed) this.failEntry(entry, error)
    if (this.isolate > 0) this.isolate -= items.length
    return { items, parts }
  }

  /** Removes answered senders from the head, in order. */
  private completeHead(): void {
    for (let entry = this.line.peek(); entry !== undefined && entry._tag === "Send"; entry = this.line.peek()) {
      if (entry.results.length < entry.items.length) return
      this.line.shift()
      this.answer(entry, Exit.succeed(entry.results))
    }
  }

  private failEntry(entry: SendEntry, error: SendError): void {
    this.line.remove(entry)
    this.answer(entry, Exit.fail(error))
  }

  private answer(entry: SendEntry, exit: Exit.Exit<ReadonlyArray<Stored>, SendError>): void {
    const waited = this.options.waited
    if (waited !== undefined) waited.observe(waited.now() - entry.since)
    finish(entry, exit)
  }

  private since(): number {
    return this.options.waited?.now() ?? 0
  }

  private stillGranted(controller: IngressController, of: RequestNext): boolean {
    const handshake = controller.handshake()
    return controller.running() && handshake._tag === "Granted" && handshake.grant.token === of.token
  }

  private settle(batch: Batch, taken: RequestNext, controller: IngressController, answer: Answer): void {
    if (Either.isRight(answer)) return this.answered(batch, answer.right)
    for (const part of batch.parts) part.entry.next -= part.count
    const error = named(answer.left, batch)
    if (this.closed || isStale(error)) return
    // Refused before anything was stored: the grant is still good for the next messages.
    if (this.grant === undefined && this.stillGranted(controller, taken)) this.grant = taken
    const id = refusedId(error)
    const refused = id === undefined
      ? (batch.items.length === 1 ? batch.parts[0].entry : undefined)
      : batch.parts.find((part) => part.entry.items.some((item) => item.messageId === id))?.entry
    if (refused !== undefined) return this.failEntry(refused, error)
    if (error._tag === "MessageRejected") {
      this.isolate = batch.items.length
      return
    }
    for (const part of batch.parts) this.failEntry(part.entry, error)
  }

  private answered(batch: Batch, stored: ReadonlyArray<Stored>): void {
    const only = batch.parts.length === 1 ? batch.parts[0] : undefined
    if (only !== undefined && only.entry.results.length === 0 && only.count === only.entry.items.length) {
      // One sender's whole batch: its answer is the controller's own array.
      only.entry.results = stored as Array<Stored>
      return this.completeHead()
    }
    for (const part of batch.parts) {
      for (let index = 0; index < part.count; index++) part.entry.results.push(stored[part.offset + index])
    }
    this.completeHead()
  }

  /** Serves the head of the line while there is a grant; at most one batch in flight. */
  private pump(): void {
    if (this.pumping || this.closed) return
    this.pumping = true
    try {
      this.serveLine()
    } finally {
      this.pumping = false
    }
  }

  private serveLine(): void {
    while (!this.inFlight && this.grant !== undefined && this.liveHead()) {
      if (this.serveHead()) return
    }
  }

  /** Serves the head with the held grant; true when a batch went to the controller and waits for its answer. */
  private serveHead(): boolean {
    const taken = this.grant!
    this.grant = undefined
    const controller = this.options.controllerOf(taken)
    if (controller === undefined || !controller.running()) return false
    const entry = this.line.peek()!
    if (entry._tag === "Grant") {
      this.line.shift()
      finish(entry, Exit.succeed(taken))
      return false
    }
    const handshake = controller.handshake()
    // A grant re-offered for a handshake whose caller went away after its message was stored:
    // complete it (the message is sent rather than lost), then take the next grant.
    if (handshake._tag === "Stored" && handshake.grant.token === taken.token) {
      controller.ackAll(taken.token)
      return false
    }
    if (handshake._tag !== "Granted" || handshake.grant.token !== taken.token) return false
    const batch = this.collect(controller.freeDemand())
    if (batch.items.length === 0) {
      // Every sender it took from was failed (a deferred payload no longer encoded): keep the grant.
      this.grant = taken
      return false
    }
    return this.submitted(batch, taken, controller, controller.submit(taken, batch.items))
  }

  /**
   * The everyday case of a lone sender: nobody waits, the grant is in hand and covers every item,
   * and a volatile controller answers at once: the answer goes straight back, with no entry in
   * line and no batch. Undefined when the sender must join the line (nothing was submitted);
   * any other answer is handled as the pump handles it.
   */
  private sendAlone(items: ReadonlyArray<OutgoingItem>): Effect.Effect<ReadonlyArray<Stored>, SendError> | undefined {
    const taken = this.grant
    if (taken === undefined || this.pumping || this.inFlight || this.isolate > 0) return undefined
    const controller = this.options.controllerOf(taken)
    if (controller === undefined || !this.stillGranted(controller, taken)) return undefined
    if (items.length > Math.max(1, Math.min(this.options.maxBatch, controller.freeDemand()))) return undefined
    const ready = DeferredItem.takeAll(items)
    // Nothing was submitted: the grant stays for the next sender.
    if (DeferredItem.isTakeError(ready)) return Exit.fail(ready)
    this.grant = undefined
    const answer = controller.submit(taken, ready)
    if (!(answer instanceof PendingAnswer) && Either.isRight(answer)) return Exit.succeed(answer.right)
    const entry = new SendEntry(ready, this.since())
    entry.next = ready.length
    this.line.push(entry)
    this.pumping = true
    try {
      if (!this.submitted({ items: ready, parts: [{ entry, offset: 0, count: ready.length }] }, taken, controller, answer)) this.serveLine()
    } finally {
      this.pumping = false
    }
    return awaitEntry(entry)
  }

  /** After a batch went to the controller: settles an answer given at once (false), or waits for it (true). */
  private submitted(batch: Batch, taken: RequestNext, controller: IngressController, answer: Answer | PendingAnswer): boolean {
    if (!(answer instanceof PendingAnswer)) {
      this.settle(batch, taken, controller, answer)
      return false
    }
    this.inFlight = true
    answer.onAnswer((settled) => {
      this.inFlight = false
      this.settle(batch, taken, controller, settled)
      if (this.closed) this.closeWaiting()
      else this.pump()
    })
    return true
  }

  private schedule(): void {
    if (this.scheduled || this.pumping) return
    this.scheduled = true
    queueMicrotask(() => {
      this.scheduled = false
      this.pump()
    })
  }

  private closedError(): EndpointClosed {
    return new EndpointClosed({ name: this.options.endpoint })
  }

  /** Fails every waiting caller (a sender whose messages are being stored waits for their answer). */
  private closeWaiting(): void {
    for (const entry of this.line.takeAll()) {
      if (entry._tag === "Send" && entry.next > 0 && this.inFlight) {
        this.line.push(entry)
        continue
      }
      if (entry._tag === "Send") this.answer(entry, Exit.fail(this.closedError()))
      else finish(entry, Exit.fail(this.closedError()))
    }
  }
}

export const make = (options: IngressOptions): Ingress => new IngressQueue(options)
