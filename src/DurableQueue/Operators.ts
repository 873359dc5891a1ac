/**
 * What an operator does with a durable queue (either kind, any backend), as functions of the
 * queue service: list, requeue and discard dead letters, and inspect the queue, its payloads
 * decoded with the flow's Schema. None takes an epoch, so none disturbs the live producer. Bad
 * options are a `ReliableConfigError` before the queue is asked.
 */
import { Effect, Either } from "effect"
import type { Schema } from "effect"
import * as Config from "../Protocol/Config.js"
import { PayloadDecodeError, ReliableConfigError } from "../Protocol/Errors.js"
import * as PayloadCodec from "../Protocol/PayloadCodec.js"
import type {
  DeadLetter,
  DeadLettersOptions,
  InspectedEntry,
  InspectedState,
  InspectOptions,
  QueueInspection,
  QueueOperatorService
} from "./DurableProducerQueue.js"
import type { QueueBackendError } from "./QueueErrors.js"

/** An inspected entry with its payload decoded, or why it could not be (a compacted payload, say). */
export interface DecodedEntry<A> extends InspectedEntry {
  readonly value: Either.Either<A, PayloadDecodeError>
}

export interface DecodedInspection<A> extends Omit<QueueInspection, "entries"> {
  readonly entries: ReadonlyArray<DecodedEntry<A>>
}

const inspectedStates: ReadonlySet<string> = new Set<InspectedState>(["Backlog", "Stored", "Accepted", "Confirmed", "DeadLettered"])

const deadLettersKeys = Config.optionKeys<DeadLettersOptions>({ limit: true, afterSeq: true })
const inspectKeys = Config.optionKeys<InspectOptions>({ limit: true, states: true, afterSeq: true })

const isCount = (value: unknown): value is number => typeof value === "number" && Number.isSafeInteger(value) && value >= 0

const refuse = (option: string, message: string) => Effect.fail(new ReliableConfigError({ option, message }))

/** `limit` a non-negative integer (positive when `positive`), `afterSeq` absent or a non-negative integer. */
const checkPage = (
  options: { readonly limit: number; readonly afterSeq?: number | undefined },
  positive: boolean
): Effect.Effect<void, ReliableConfigError> => {
  if (!isCount(options.limit) || (positive && options.limit === 0)) {
    return refuse("limit", `limit must be a ${positive ? "positive" : "non-negative"} integer, got ${JSON.stringify(options.limit)}`)
  }
  if (options.afterSeq !== undefined && !isCount(options.afterSeq)) {
    return refuse("afterSeq", `afterSeq must be a non-negative integer, got ${JSON.stringify(options.afterSeq)}`)
  }
  return Effect.void
}

const checkStates = (states: ReadonlyArray<InspectedState> | undefined): Effect.Effect<void, ReliableConfigError> => {
  if (states === undefined) return Effect.void
  const unknown = Array.isArray(states) ? states.find((state) => !inspectedStates.has(state)) : states
  return unknown === undefined
    ? Effect.void
    : refuse("states", `states must list some of ${[...inspectedStates].join(", ")}, got ${JSON.stringify(unknown)}`)
}

/** The queue's dead letters in seq order after `afterSeq` (default 0), at most `limit`. */
export const deadLetters = (
  queue: QueueOperatorService,
  options: DeadLettersOptions
): Effect.Effect<ReadonlyArray<DeadLetter>, QueueBackendError | ReliableConfigError> =>
  Effect.zipRight(
    Effect.zipRight(Config.checkKeys("DurableQueue.deadLetters", options, deadLettersKeys), checkPage(options, true)),
    queue.deadLetters(options)
  )

/**
 * Moves a dead letter back into the flow (to the end of the backlog, under its id, payload and
 * trace): delivered again after what is in flight. False when no dead letter has that id.
 */
export const requeueDeadLetter = (queue: QueueOperatorService, messageId: string): Effect.Effect<boolean, QueueBackendError> =>
  queue.requeueDeadLetter(messageId)

/** Drops a dead letter for good; its id stays owned. False when no dead letter has that id. */
export const discardDeadLetter = (queue: QueueOperatorService, messageId: string): Effect.Effect<boolean, QueueBackendError> =>
  queue.discardDeadLetter(messageId)

const compacted = new Error("the payload of a confirmed entry is compacted")

const decodeEntries = <A, I>(inspection: QueueInspection, schema: Schema.Schema<A, I, never>): DecodedInspection<A> => {
  const codec = PayloadCodec.make(schema)
  return {
    ...inspection,
    entries: inspection.entries.map((entry) => {
      const decoded = entry.state === "Confirmed" ? Either.left(compacted) : codec.decode(entry.payload)
      const value = Either.mapLeft(decoded, (cause) =>
        new PayloadDecodeError({ endpointName: "DurableQueue.inspect", messageId: entry.messageId, cause }))
      return { ...entry, value }
    })
  }
}

/**
 * Counts by state, the oldest waiting message's time, and a page of entries (see
 * `QueueInspection`); with a Schema, each entry's payload decoded too. Reads only: no epoch, no
 * lock a writer waits for.
 */
export function inspect(
  queue: QueueOperatorService,
  options: InspectOptions
): Effect.Effect<QueueInspection, QueueBackendError | ReliableConfigError>
export function inspect<A, I>(
  queue: QueueOperatorService,
  options: InspectOptions,
  schema: Schema.Schema<A, I, never>
): Effect.Effect<DecodedInspection<A>, QueueBackendError | ReliableConfigError>
export function inspect<A, I>(
  queue: QueueOperatorService,
  options: InspectOptions,
  schema?: Schema.Schema<A, I, never>
): Effect.Effect<QueueInspection | DecodedInspection<A>, QueueBackendError | ReliableConfigError> {
  return Effect.gen(function*() {
    yield* Config.checkKeys("DurableQueue.inspect", options, inspectKeys)
    yield* checkPage(options, false)
    yield* checkStates(options.states)
    if (schema !== undefined) yield* Config.checkSchema("schema", schema)
    const inspection = yield* queue.inspect(options)
    return schema === undefined ? inspection : decodeEntries(inspection, schema)
  })
}
