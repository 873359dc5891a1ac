/**
 * Takes a durable queue's backlog into the flow. Messages committed to the backlog (by the
 * endpoint's own `enqueue`, or by writers in other processes inside their own transactions) wait
 * there, with no seq, until this fiber reads a page of the oldest ones and sends them like a
 * sender would: in line with the endpoint's other senders, as demand allows, each stored with
 * `fromBacklog` so the store takes it out of the backlog in the same transaction. Then the next
 * page. Memory holds one page, however long the backlog is.
 *
 * It looks when told (a local enqueue committed, the queue's `backlogSignal`, a new controller)
 * and otherwise every `pollInterval`, so a signal lost on a reconnect costs at most one interval.
 * A backlog read that fails is retried under the queue's backoff. A message the flow refuses for
 * its content (too large for a frame, refused by the database) is skipped with a warning and
 * left in the backlog; an operator sees it with `DurableQueue.inspect`.
 */
import { Duration, Effect, Either, FiberSet, Schedule, Stream } from "effect"
import type { Scope } from "effect"
import * as CallTimeouts from "../Controller/internal/CallTimeouts.js"
import type { ProduceItem } from "../Controller/internal/ProducerHandshake.js"
import type { BacklogEntry, QueueOperatorService } from "../DurableQueue/DurableProducerQueue.js"
import type { QueueBackendError } from "../DurableQueue/QueueErrors.js"
import type { Stored } from "../Protocol/Contract.js"
import type { SendError } from "./Ingress.js"
import { Signal } from "./Signal.js"

/** How many backlog messages one read takes. */
export const BacklogPageSize = 1000

/** Refused ids remembered (so they are not sent again each page); the oldest are forgotten first. */
const MaxRefusedIds = 10_000

export interface BacklogFeederOptions {
  readonly endpoint: string
  readonly queue: QueueOperatorService
  /** Sends a page in line with the endpoint's senders; its `Stored` once the whole page is stored. */
  readonly send: (items: ReadonlyArray<ProduceItem>) => Effect.Effect<ReadonlyArray<Stored>, SendError>
  readonly pollInterval: Duration.Duration
  /** A backlog read not answered within this long counts as failed. */
  readonly timeout: Duration.Duration
  /** Failed reads are retried from `initial`, doubling, never more than `max` apart. */
  readonly backoff: { readonly initial: Duration.Duration; readonly max: Duration.Duration }
}

export interface BacklogFeeder {
  /** The backlog may have news: look now rather than at the next poll. */
  readonly hint: () => void
}

/** The message an error names, when the flow refused that message for its content. */
const refusedId = (error: SendError): string | undefined =>
  error._tag === "FrameTooLarge" || error._tag === "MessageRejected" ? error.messageId : undefined

const toItem = (entry: BacklogEntry): ProduceItem => ({
  messageId: entry.messageId,
  payload: entry.payload,
  fromBacklog: true,
  at: entry.enqueuedAt,
  trace: entry.trace
})

/** Starts the feeder in the current scope; it ends with the scope or when the endpoint closes. */
export const start = (options: BacklogFeederOptions): Effect.Effect<BacklogFeeder, never, Scope.Scope> =>
  Effect.gen(function*() {
    const news = new Signal()
    const refused = new Set<string>()
    const backoff = Schedule.exponential(options.backoff.initial).pipe(Schedule.union(Schedule.spaced(options.backoff.max)))

    // Timed as the lanes' calls are: a read hung on a connection gone silent is given up on
    // (`CallTimeouts`), where `Effect.timeout` would wait for its transaction's rollback.
    const timeouts = CallTimeouts.make(options.timeout, yield* FiberSet.makeRuntime<never>())
    const noAnswer = () => new Error(`no answer within ${Duration.format(options.timeout)}`)
    const readPage: Effect.Effect<ReadonlyArray<BacklogEntry>> = timeouts.timed(options.queue.backlog(BacklogPageSize), noAnswer).pipe(
      Effect.tapError((error: QueueBackendError | Error) => Effect.logDebug(`${options.endpoint}: reading the backlog failed`, error)),
      Effect.retry(backoff)
    ) as Effect.Effect<ReadonlyArray<BacklogEntry>>

    const remember = (messageId: string, error: SendError) => {
      if (refused.size >= MaxRefusedIds) refused.delete(refused.values().next().value!)
      refused.add(messageId)
      return Effect.logWarning(`${options.endpoint}: backlog message ${messageId} was refused and is left in the backlog: ${error.message}`)
    }

    /** One round: read a page and send what is not known to be refused; false when the endpoint closed. */
    const round = Effect.gen(function*() {
      const wake = news.next()
      const page = (yield* readPage).filter((entry) => !refused.has(entry.messageId))
      if (page.length === 0) {
        yield* Effect.timeoutOption(wake, options.pollInterval)
        return true
      }
      const sent = yield* Effect.either(options.send(page.map(toItem)))
      if (Either.isRight(sent)) return true
      const error = sent.left
      if (error._tag === "EndpointClosed") return false
      const id = refusedId(error) ?? (page.length === 1 ? page[0].messageId : undefined)
      if (id !== undefined) yield* remember(id, error)
      else yield* Effect.timeoutOption(wake, options.pollInterval)
      return true
    })

    const signal = options.queue.backlogSignal
    if (signal !== undefined) {
      // Signals only speed things up (polling finds everything): a broken subscription is made again.
      yield* Stream.runForEach(signal, () => Effect.sync(() => news.fire())).pipe(
        Effect.retry(backoff),
        Effect.ignore,
        Effect.forkScoped
      )
    }
    yield* Effect.forkScoped(Effect.repeat(round, { while: (goOn) => goOn }))
    return { hint: () => news.fire() }
  })
