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
import type { ProduceError } from "../Controller/internal/ProducerCalls.js"
import { PendingAnswer } from "../Controller/internal/ProducerCalls.js"
import type { Answer } from "../Controller/internal/ProducerCalls.js"
import type { Handshake, ProduceItem } from "../Controller/internal/ProducerHandshake.js"
import type { RequestNext, Stored } from "../Protocol/Contract.js"
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
}

export type SendError = ProduceError | EndpointClosed

export interface Ingress {
  /** The controller offered a grant (called inside its fold). */
  readonly offer: (grant: RequestNext) => void
  /** The controller that offered the held grant stopped: the grant is void. */
  readonly voidGrant: () => void
  /**
   * Sends encoded items after everyone waiting; their `Stored`, in order: an `Exit` when settled
   * at once (call it inside `Effect.suspend`), else an effect that waits for them.
   */
  readonly send: (items: ReadonlyArray<ProduceItem>) => Effect.Effect<ReadonlyArray<Stored>, SendError>
  /** Waits, in the same queue, for a grant of the caller's own. */
  readonly requestNext: Effect.Effect<RequestNext, EndpointClosed>
  /** The endpoint closed: every waiting caller and every later call fails with `EndpointClosed`. */
  readonly close: () => void
  /** Callers waiting now. */
  readonly waiting: () => number
}

type Resume<A, E> = (exit: Exit.Exit<A, E>) => void

/** A sender's items: `next` of them were handed to the controller, `results` answered. */
class SendEntry {
  readonly _tag = "Send"
  next = 0
  results: Array<Stored> = []
  resume: Resume<ReadonlyArray<Stored>, SendError> | undefined = undefined
  exit: Exit.Exit<ReadonlyArray<Stored>, SendError> | undefined = undefined
  cancelled = false
  constructor(readonly items: ReadonlyArray<ProduceItem>) {}
}

/** A `requestNext` caller. */
class GrantEntry {
  readonly _tag = "Grant"
  resume: Resume<RequestNext, EndpointClosed> | undefined = undefined
  exit: Exit.Exit<RequestNext, EndpointClosed> | undefined = undefined
  cancelled = false
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

export const make = (options: IngressOptions): Ingress => {
  const queue: Array<Entry> = []
  let head = 0
  let grant: RequestNext | undefined
  let inFlight = false
  let pumping = false
  let scheduled = false
  let closed = false
  /** After a batch was refused as a whole: this many more items go one per grant, to find the refused one. */
  let isolate = 0

  const size = () => queue.length - head
  const peek = (): Entry | undefined => queue[head]
  const shift = () => {
    queue[head++] = undefined as never
    if (head > 1024 && head * 2 > queue.length) {
      queue.splice(0, head)
      head = 0
    }
  }

  const finish = <A, E>(entry: { resume: Resume<A, E> | undefined; exit: Exit.Exit<A, E> | undefined }, exit: Exit.Exit<A, E>) => {
    entry.exit = exit
    const resume = entry.resume
    entry.resume = undefined
    resume?.(exit)
  }

  /**
   * Drops the entries of callers who went away (interrupted) from the head; true when a caller
   * waits there. What such a caller's earlier batches stored stays stored; nothing more is sent.
   */
  const liveHead = (): boolean => {
    for (let entry = peek(); entry !== undefined; entry = peek()) {
      if (!entry.cancelled) return true
      shift()
    }
    return false
  }

  const collect = (free: number): Batch => {
    const limit = isolate > 0 ? 1 : Math.max(1, Math.min(options.maxBatch, free))
    const first = peek() as SendEntry
    // The usual case: the head sender's items all fit, and nobody else waits.
    if (first.next === 0 && first.items.length <= limit && size() === 1) {
      first.next = first.items.length
      return { items: first.items, parts: [{ entry: first, offset: 0, count: first.items.length }] }
    }
    const items: Array<ProduceItem> = []
    const parts: Array<Part> = []
    for (let index = head; index < queue.length && items.length < limit; index++) {
      const entry = queue[index]
      if (entry._tag === "Grant") break
      if (entry.cancelled) continue
      const count = Math.min(limit - items.length, entry.items.length - entry.next)
      if (count <= 0) continue
      parts.push({ entry, offset: items.length, count })
      for (let item = 0; item < count; item++) items.push(entry.items[entry.next + item])
      entry.next += count
    }
    if (isolate > 0) isolate -= items.length
    return { items, parts }
  }

  /** Removes answered senders from the head, in order. */
  const completeHead = () => {
    for (let entry = peek(); entry !== undefined && entry._tag === "Send"; entry = peek()) {
      if (entry.results.length < entry.items.length) return
      shift()
      finish(entry, Exit.succeed(entry.results))
    }
  }

  const failEntry = (entry: SendEntry, error: SendError) => {
    const index = queue.indexOf(entry, head)
    if (index === head) shift()
    else if (index > head) queue.splice(index, 1)
    finish(entry, Exit.fail(error))
  }

  const stillGranted = (controller: IngressController, of: RequestNext) => {
    const handshake = controller.handshake()
    return controller.running() && handshake._tag === "Granted" && handshake.grant.token === of.token
  }

  const settle = (batch: Batch, taken: RequestNext, controller: IngressController, answer: Answer) => {
    if (Either.isRight(answer)) {
      const only = batch.parts.length === 1 ? batch.parts[0] : undefined
      if (only !== undefined && only.entry.results.length === 0 && only.count === only.entry.items.length) {
        // One sender's whole batch: its answer is the controller's own array.
        only.entry.results = answer.right as Array<Stored>
        return completeHead()
      }
      for (const part of batch.parts) {
        for (let index = 0; index < part.count; index++) part.entry.results.push(answer.right[part.offset + index])
      }
      completeHead()
      return
    }
    for (const part of batch.parts) part.entry.next -= part.count
    const error = named(answer.left, batch)
    if (closed) return
    if (isStale(error)) return
    // Refused before anything was stored: the grant is still good for the next messages.
    if (grant === undefined && stillGranted(controller, taken)) grant = taken
    const id = refusedId(error)
    const refused = id === undefined
      ? (batch.items.length === 1 ? batch.parts[0].entry : undefined)
      : batch.parts.find((part) => part.entry.items.some((item) => item.messageId === id))?.entry
    if (refused !== undefined) return failEntry(refused, error)
    if (error._tag === "MessageRejected") {
      isolate = batch.items.length
      return
    }
    for (const part of batch.parts) failEntry(part.entry, error)
  }

  /** Serves the head of the queue while there is a grant; at most one batch in flight. */
  const pump = (): void => {
    if (pumping || closed) return
    pumping = true
    try {
      while (!inFlight && grant !== undefined && liveHead()) {
        const taken = grant
        grant = undefined
        const controller = options.controllerOf(taken)
        if (controller === undefined || !controller.running()) continue
        const entry = peek()!
        if (entry._tag === "Grant") {
          shift()
          finish(entry, Exit.succeed(taken))
          continue
        }
        const handshake = controller.handshake()
        // A grant re-offered for a handshake whose caller went away after its message was
        // stored: complete it (the message is sent rather than lost), then take the next grant.
        if (handshake._tag === "Stored" && handshake.grant.token === taken.token) {
          controller.ackAll(taken.token)
          continue
        }
        if (handshake._tag !== "Granted" || handshake.grant.token !== taken.token) continue
        const batch = collect(controller.freeDemand())
        const answer = controller.submit(taken, batch.items)
        if (answer instanceof PendingAnswer) {
          inFlight = true
          answer.onAnswer((settled) => {
            inFlight = false
            settle(batch, taken, controller, settled)
            if (closed) closeWaiting()
            else pump()
          })
          return
        }
        settle(batch, taken, controller, answer)
      }
    } finally {
      pumping = false
    }
  }

  const schedule = () => {
    if (scheduled || pumping) return
    scheduled = true
    queueMicrotask(() => {
      scheduled = false
      pump()
    })
  }

  const closedError = () => new EndpointClosed({ name: options.endpoint })

  /** Fails every waiting caller (a sender whose messages are being stored waits for their answer). */
  const closeWaiting = () => {
    const waiting = queue.slice(head)
    queue.length = 0
    head = 0
    for (const entry of waiting) {
      if (entry._tag === "Send" && entry.next > 0 && inFlight) {
        queue.push(entry)
        continue
      }
      if (entry._tag === "Send") finish(entry, Exit.fail(closedError()))
      else finish(entry, Exit.fail(closedError()))
    }
  }

  /** Waits for an entry's exit: at once when the pump already settled it. */
  const await_ = <A, E>(entry: { resume: Resume<A, E> | undefined; exit: Exit.Exit<A, E> | undefined; cancelled: boolean }) =>
    entry.exit !== undefined ? entry.exit : Effect.async<A, E>((resume) => {
      if (entry.exit !== undefined) return resume(entry.exit)
      entry.resume = resume
      return Effect.sync(() => {
        entry.cancelled = true
        entry.resume = undefined
      })
    })

  return {
    offer: (offered) => {
      grant = offered
      if (size() > 0) schedule()
    },
    voidGrant: () => {
      grant = undefined
    },
    send: (items) => {
      if (closed) return Exit.fail(closedError())
      const entry = new SendEntry(items)
      queue.push(entry)
      pump()
      return await_(entry)
    },
    requestNext: Effect.suspend(() => {
      if (closed) return Exit.fail(closedError())
      const entry = new GrantEntry()
      queue.push(entry)
      pump()
      return await_(entry)
    }),
    close: () => {
      if (closed) return
      closed = true
      grant = undefined
      closeWaiting()
    },
    waiting: size
  }
}
