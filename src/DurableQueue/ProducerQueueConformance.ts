/**
 * The conformance suite of the `DurableProducerQueue` contract, for `@effect/vitest`. Every
 * implementation in this package passes it; run it against your own store the same way:
 *
 * ```ts
 * import { producerQueueConformance } from "effect-reliable/conformance"
 * producerQueueConformance("my store", MyQueue.layer) // a fresh, empty queue per build
 * ```
 *
 * The layer is built once per test (twice where a test compares two queues), so it must give a
 * fresh, empty queue each time: for a database, derive a new queue name per build.
 *
 * Randomized tests are seeded: a failure prints its seed, and `RELIABLE_CONFORMANCE_SEED=<n>`
 * replays one seed.
 *
 * `storeAccepted` is optional: its tests pass without checking anything on a queue that lacks it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Either, Layer } from "effect"
import type { Scope } from "effect"
import { chunkMessageId } from "../Protocol/ChunkId.js"
import type { DurableQueueState, QueueEpoch, StoreRequest, StoreResult } from "./DurableProducerQueue.js"
import { DurableProducerQueue } from "./DurableProducerQueue.js"
import type { DurableProducerQueueService } from "./DurableProducerQueue.js"
import type { DurableQueueError } from "./QueueErrors.js"
import * as SeededRandom from "../internal/SeededRandom.js"
import type { ConformanceOptions, EntryView, Outcome } from "./internal/ConformanceSupport.js"
import type { AdaptedResult, OperatorAdapter } from "./internal/OperatorConformance.js"
import { operatorTests } from "./internal/OperatorConformance.js"
import {
  bytes,
  failureTag,
  hex,
  idPool,
  outcome,
  raceWithLoad,
  randomPayload,
  seedsFrom,
  viewEntry,
  viewPayloadTest,
  warmUp,
  withSeed
} from "./internal/ConformanceSupport.js"

export type { ConformanceOptions } from "./internal/ConformanceSupport.js"

// ---- views: plain data that compares structurally ------------------------------------------

interface ResultView {
  readonly messageId: string
  readonly alreadyStored: boolean
  readonly accepted: boolean
  readonly entries: ReadonlyArray<EntryView>
  /** Present (true) only for a dead letter. */
  readonly deadLettered?: true
}

interface StateView {
  readonly currentSeq: number
  readonly confirmedSeq: number
  readonly unconfirmed: ReadonlyArray<EntryView>
}

const viewResult = (result: StoreResult): ResultView => ({
  messageId: result.messageId,
  alreadyStored: result.alreadyStored,
  accepted: result.accepted,
  entries: result.entries.map(viewEntry),
  ...(result.deadLettered === true ? { deadLettered: true as const } : {})
})

const viewState = (state: DurableQueueState): StateView => ({
  currentSeq: state.currentSeq,
  confirmedSeq: state.confirmedSeq,
  unconfirmed: state.unconfirmed.map(viewEntry)
})

/** Confirmed entries may come back compacted (empty payload): accept that in place of the original. */
const allowCompacted = (
  actual: ReadonlyArray<ResultView>,
  expected: ReadonlyArray<ResultView>,
  isConfirmed: (seq: number) => boolean
): ReadonlyArray<ResultView> =>
  actual.map((result, i) => ({
    ...result,
    entries: result.entries.map((entry, j) => {
      const original = expected[i]?.entries[j]
      return entry.payload === "" && isConfirmed(entry.seq) && original !== undefined
        ? { ...entry, payload: original.payload }
        : entry
    })
  }))

/** Entries at or below `seq` count as confirmed (for tests whose every entry there is). */
const upTo = (seq: number) => (entrySeq: number): boolean => entrySeq <= seq

// ---- the model: the contract as a few pure functions ----------------------------------------

interface ModelMessage {
  readonly entries: ReadonlyArray<EntryView>
  readonly chunked: boolean
  readonly accepted: boolean
}

interface Model {
  readonly epoch: number
  readonly currentSeq: number
  readonly messages: ReadonlyMap<string, ModelMessage>
  /** The seqs of confirmed entries. */
  readonly confirmed: ReadonlySet<number>
}

const emptyModel: Model = { epoch: 0, currentSeq: 0, messages: new Map(), confirmed: new Set() }

const fencing = (model: Model, epoch: number): string | undefined =>
  epoch < model.epoch ? "QueueFenced" : epoch > model.epoch ? "QueueConflict" : undefined

/** The highest seq h such that every entry at or below it is confirmed (or a hole). */
const modelLowMark = (model: Model): number => {
  let low = model.currentSeq
  for (const message of model.messages.values()) {
    for (const entry of message.entries) if (!model.confirmed.has(entry.seq)) low = Math.min(low, entry.seq - 1)
  }
  return low
}

const modelLoad = (model: Model): [Model, StateView] => {
  const unconfirmed = [...model.messages.values()]
    .filter((message) => message.accepted)
    .flatMap((message) => message.entries)
    .filter((entry) => !model.confirmed.has(entry.seq))
    .sort((a, b) => a.seq - b.seq)
  return [
    { ...model, epoch: model.epoch + 1 },
    { currentSeq: model.currentSeq, confirmedSeq: modelLowMark(model), unconfirmed }
  ]
}

const resultOf = (messageId: string, message: ModelMessage, alreadyStored: boolean): ResultView => ({
  messageId,
  alreadyStored,
  accepted: message.accepted,
  entries: message.entries
})

const modelStore = (
  model: Model,
  epoch: number,
  requests: ReadonlyArray<StoreRequest>
): [Model, Outcome<ReadonlyArray<ResultView>>] => {
  const fenced = fencing(model, epoch)
  if (fenced !== undefined) return [model, { error: fenced }]
  const messages = new Map(model.messages)
  let seq = model.currentSeq
  const results: Array<ResultView> = []
  for (const { messageId, payload } of requests) {
    const found = messages.get(messageId)
    if (found?.chunked === true) return [model, { error: "QueueChunkedBatch" }]
    if (found !== undefined) {
      results.push(resultOf(messageId, found, true))
      continue
    }
    seq += 1
    const message: ModelMessage = {
      entries: [{ seq, messageId, payload: hex(payload), chunk: null }],
      chunked: false,
      accepted: false
    }
    messages.set(messageId, message)
    results.push(resultOf(messageId, message, false))
  }
  return [{ ...model, currentSeq: seq, messages }, { ok: results }]
}

const modelStoreChunked = (
  model: Model,
  epoch: number,
  messageId: string,
  chunks: ReadonlyArray<Uint8Array>
): [Model, Outcome<ResultView>] => {
  const fenced = fencing(model, epoch)
  if (fenced !== undefined) return [model, { error: fenced }]
  const found = model.messages.get(messageId)
  if (found !== undefined) return [model, { ok: resultOf(messageId, found, true) }]
  const count = chunks.length
  const message: ModelMessage = {
    entries: chunks.map((chunk, index) => ({
      seq: model.currentSeq + 1 + index,
      messageId: chunkMessageId(messageId, index, count),
      payload: hex(chunk),
      chunk: { first: index === 0, last: index === count - 1 }
    })),
    chunked: true,
    accepted: false
  }
  const messages = new Map(model.messages).set(messageId, message)
  return [{ ...model, currentSeq: model.currentSeq + count, messages }, { ok: resultOf(messageId, message, false) }]
}

const modelAccept = (model: Model, epoch: number, ids: ReadonlyArray<string>): [Model, Outcome<void>] => {
  const fenced = fencing(model, epoch)
  if (fenced !== undefined) return [model, { error: fenced }]
  if (ids.some((id) => !model.messages.has(id))) return [model, { error: "QueueConflict" }]
  const messages = new Map(model.messages)
  for (const id of ids) messages.set(id, { ...messages.get(id)!, accepted: true })
  return [{ ...model, messages }, { ok: undefined }]
}

/** `storeAccepted`: store then accept, one request after the other; a failure writes nothing. */
const modelStoreAccepted = (
  model: Model,
  epoch: number,
  requests: ReadonlyArray<StoreRequest>
): [Model, Outcome<ReadonlyArray<ResultView>>] => {
  const fenced = fencing(model, epoch)
  if (fenced !== undefined) return [model, { error: fenced }]
  let next = model
  const results: Array<ResultView> = []
  for (const request of requests) {
    const [stored, result] = modelStore(next, epoch, [request])
    if ("error" in result) return [model, result]
    results.push(result.ok[0])
    next = modelAccept(stored, epoch, [request.messageId])[0]
  }
  return [next, { ok: results }]
}

/** Confirms every accepted entry up to `upToSeq`; stored ones are untouched. */
const modelConfirm = (model: Model, epoch: number, upToSeq: number): [Model, Outcome<void>] => {
  const fenced = fencing(model, epoch)
  if (fenced !== undefined) return [model, { error: fenced }]
  if (upToSeq > model.currentSeq) return [model, { error: "QueueConflict" }]
  const confirmed = new Set(model.confirmed)
  for (const message of model.messages.values()) {
    if (!message.accepted) continue
    for (const entry of message.entries) if (entry.seq <= upToSeq) confirmed.add(entry.seq)
  }
  return [{ ...model, confirmed }, { ok: undefined }]
}

// ---- running operations against a queue ------------------------------------------------------

/** A random operation of the model-based runs. */
type Step =
  | { readonly _tag: "Store"; readonly requests: ReadonlyArray<StoreRequest>; readonly batch: boolean }
  | { readonly _tag: "StoreChunked"; readonly messageId: string; readonly chunks: ReadonlyArray<Uint8Array> }
  | { readonly _tag: "Accept"; readonly ids: ReadonlyArray<string>; readonly batch: boolean }
  | { readonly _tag: "Confirm"; readonly upToSeq: number }
  | { readonly _tag: "StoreAccepted"; readonly requests: ReadonlyArray<StoreRequest> }

/** `fused`: the queue has `storeAccepted` (without it, those steps are plain batch stores). */
const randomStep = (random: SeededRandom.SeededRandom, model: Model, fused: boolean): Step => {
  const id = () => idPool[random.int(0, idPool.length - 1)]
  const roll = random.next()
  if (roll < 0.25) return { _tag: "Store", requests: [{ messageId: id(), payload: randomPayload(random) }], batch: false }
  if (roll < 0.4) {
    const requests = Array.from({ length: random.int(0, 4) }, () => ({ messageId: id(), payload: randomPayload(random) }))
    return { _tag: "Store", requests, batch: true }
  }
  if (roll < 0.55) {
    const chunks = Array.from({ length: random.int(1, 3) }, () => randomPayload(random))
    return { _tag: "StoreChunked", messageId: id(), chunks }
  }
  if (roll < 0.7) return { _tag: "Accept", ids: [id()], batch: false }
  if (roll < 0.8) return { _tag: "Accept", ids: Array.from({ length: random.int(0, 3) }, id), batch: true }
  if (roll < 0.9) {
    const requests = Array.from({ length: random.int(1, 4) }, () => ({ messageId: id(), payload: randomPayload(random) }))
    return fused ? { _tag: "StoreAccepted", requests } : { _tag: "Store", requests, batch: true }
  }
  return { _tag: "Confirm", upToSeq: random.int(0, model.currentSeq + 1) }
}

/** A writer's epoch: the queue's, and the model's (which counts loads). */
interface WriterEpoch {
  readonly queue: QueueEpoch
  readonly model: number
}

/** Applies `step` to the model and the queue; returns the new model and both outcomes. */
const runStep = (queue: DurableProducerQueueService, model: Model, writer: WriterEpoch, step: Step) =>
  Effect.gen(function*() {
    const epoch = writer.queue
    switch (step._tag) {
      case "Store": {
        const [next, expected] = modelStore(model, writer.model, step.requests)
        const actual = step.batch
          ? yield* outcome(queue.storeBatch(epoch, step.requests), (results) => results.map(viewResult))
          : yield* outcome(queue.store(epoch, step.requests[0]), (result) => [viewResult(result)])
        const lenient = "ok" in actual && "ok" in expected
          ? { ok: allowCompacted(actual.ok, expected.ok, (seq) => model.confirmed.has(seq)) }
          : actual
        return [next, lenient as Outcome<unknown>, expected as Outcome<unknown>] as const
      }
      case "StoreChunked": {
        const [next, expected] = modelStoreChunked(model, writer.model, step.messageId, step.chunks)
        const actual = yield* outcome(queue.storeChunked(epoch, step.messageId, step.chunks), viewResult)
        const lenient = "ok" in actual && "ok" in expected
          ? { ok: allowCompacted([actual.ok], [expected.ok], (seq) => model.confirmed.has(seq))[0] }
          : actual
        return [next, lenient as Outcome<unknown>, expected as Outcome<unknown>] as const
      }
      case "Accept": {
        const [next, expected] = modelAccept(model, writer.model, step.ids)
        const actual = step.batch
          ? yield* outcome(queue.acceptBatch(epoch, step.ids), () => undefined)
          : yield* outcome(queue.accept(epoch, step.ids[0]), () => undefined)
        return [next, actual as Outcome<unknown>, expected as Outcome<unknown>] as const
      }
      case "Confirm": {
        const [next, expected] = modelConfirm(model, writer.model, step.upToSeq)
        const actual = yield* outcome(queue.confirm(epoch, step.upToSeq), () => undefined)
        return [next, actual as Outcome<unknown>, expected as Outcome<unknown>] as const
      }
      case "StoreAccepted": {
        const [next, expected] = modelStoreAccepted(model, writer.model, step.requests)
        const actual = yield* outcome(queue.storeAccepted!(epoch, step.requests), (results) => results.map(viewResult))
        const lenient = "ok" in actual && "ok" in expected
          ? { ok: allowCompacted(actual.ok, expected.ok, (seq) => model.confirmed.has(seq)) }
          : actual
        return [next, lenient as Outcome<unknown>, expected as Outcome<unknown>] as const
      }
    }
  })

const describeStep = (step: Step, epoch: number): string => {
  switch (step._tag) {
    case "Store":
      return `${step.batch ? "storeBatch" : "store"}(${epoch}, ${
        step.requests.map((r) => `${r.messageId}=${hex(r.payload)}`).join(",")
      })`
    case "StoreChunked":
      return `storeChunked(${epoch}, ${step.messageId}, ${step.chunks.map(hex).join("|")})`
    case "Accept":
      return `${step.batch ? "acceptBatch" : "accept"}(${epoch}, ${step.ids.join(",")})`
    case "Confirm":
      return `confirm(${epoch}, ${step.upToSeq})`
    case "StoreAccepted":
      return `storeAccepted(${epoch}, ${step.requests.map((r) => `${r.messageId}=${hex(r.payload)}`).join(",")})`
  }
}

/** Registers the conformance tests of a `DurableProducerQueue` implementation. */
/** A fresh queue: one build of the layer under test. */
type Fresh = Effect.Effect<DurableProducerQueueService, unknown, Scope.Scope>

interface Suite {
  readonly fresh: Fresh
  readonly seeds: ReadonlyArray<number>
  readonly steps: number
}

const loadTests = ({ fresh }: Suite) =>
  describe("load and epochs", () => {
    it.scoped("a fresh queue loads empty, with a positive epoch", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch, state } = yield* queue.load
        expect(epoch).toBeGreaterThan(0)
        expect(viewState(state)).toEqual({ currentSeq: 0, confirmedSeq: 0, unconfirmed: [] })
      }))

    it.scoped("every load returns a greater epoch", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const epochs = []
        for (let i = 0; i < 4; i++) epochs.push((yield* queue.load).epoch)
        for (let i = 1; i < epochs.length; i++) expect(epochs[i]).toBeGreaterThan(epochs[i - 1])
      }))

    it.scoped("load returns only accepted entries above the watermark, in seq order", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        for (const id of ["a", "b", "c", "d"]) yield* queue.store(epoch, { messageId: id, payload: bytes(id) })
        yield* queue.acceptBatch(epoch, ["d", "a", "b"])
        yield* queue.confirm(epoch, 1)
        const { state } = yield* queue.load
        expect(viewState(state)).toEqual({
          currentSeq: 4,
          confirmedSeq: 1,
          unconfirmed: [
            { seq: 2, messageId: "b", payload: hex(bytes("b")), chunk: null },
            { seq: 4, messageId: "d", payload: hex(bytes("d")), chunk: null }
          ]
        })
      }))
  })

const storeSequenceTests = ({ fresh }: Suite) => {
  it.scoped("assigns seqs 1, 2, 3 in store order", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      const results = []
      for (const id of ["x", "y", "z"]) results.push(yield* queue.store(epoch, { messageId: id, payload: bytes(id) }))
      expect(results.map(viewResult)).toEqual(["x", "y", "z"].map((id, i) => ({
        messageId: id,
        alreadyStored: false,
        accepted: false,
        entries: [{ seq: i + 1, messageId: id, payload: hex(bytes(id)), chunk: null }]
      })))
    }))

  it.scoped("the first write wins: a retry returns it and appends nothing", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      yield* queue.store(epoch, { messageId: "a", payload: bytes("first") })
      const retry = yield* queue.store(epoch, { messageId: "a", payload: bytes("second") })
      expect(viewResult(retry)).toEqual({
        messageId: "a",
        alreadyStored: true,
        accepted: false,
        entries: [{ seq: 1, messageId: "a", payload: hex(bytes("first")), chunk: null }]
      })
      yield* queue.accept(epoch, "a")
      expect((yield* queue.store(epoch, { messageId: "a", payload: bytes("third") })).accepted).toBe(true)
      expect((yield* queue.store(epoch, { messageId: "b", payload: bytes("b") })).entries[0].seq).toBe(2)
      expect((yield* queue.load).state.currentSeq).toBe(2)
    }))

  viewPayloadTest(fresh, (state) => state.unconfirmed)

  it.scoped("stored but unaccepted entries keep their seqs and are not loaded", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      yield* queue.store(epoch, { messageId: "a", payload: bytes("a") })
      const { epoch: next, state } = yield* queue.load
      expect(viewState(state)).toEqual({ currentSeq: 1, confirmedSeq: 0, unconfirmed: [] })
      const retry = yield* queue.store(next, { messageId: "a", payload: bytes("again") })
      expect(retry.alreadyStored).toBe(true)
      expect(retry.entries[0].seq).toBe(1)
    }))

  it.scoped("a confirm above a stored, never-accepted entry keeps its payload: a resubmission gets the first write", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      // "a" was stored by a producer that stopped before accepting it; "b" went on and was confirmed.
      const a = yield* queue.store(epoch, { messageId: "a", payload: bytes("first") })
      yield* queue.store(epoch, { messageId: "b", payload: bytes("b") })
      yield* queue.accept(epoch, "b")
      yield* queue.confirm(epoch, 2)
      const { epoch: next } = yield* queue.load
      const again = yield* queue.store(next, { messageId: "a", payload: bytes("again") })
      expect(viewResult(again)).toEqual({ ...viewResult(a), alreadyStored: true, accepted: false })
    }))
}

const storeConcurrencyTests = ({ fresh }: Suite) => {
  it.scoped("an empty id or one in the reserved chunk namespace is QueueConflict", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      const reserved = chunkMessageId("x", 0, 2)
      expect(yield* failureTag(queue.store(epoch, { messageId: "", payload: bytes("a") }))).toBe("QueueConflict")
      expect(yield* failureTag(queue.store(epoch, { messageId: reserved, payload: bytes("a") }))).toBe("QueueConflict")
      expect(yield* failureTag(queue.storeChunked(epoch, reserved, [bytes("a")]))).toBe("QueueConflict")
      expect(yield* failureTag(queue.storeChunked(epoch, "no-chunks", []))).toBe("QueueConflict")
      expect((yield* queue.load).state.currentSeq).toBe(0)
    }))

  it.scoped("concurrent stores of one id: exactly one seq, every caller sees the first write", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      const results = yield* Effect.all(
        Array.from({ length: 20 }, (_, i) => queue.store(epoch, { messageId: "same", payload: bytes(`p${i}`) })),
        { concurrency: "unbounded" }
      )
      expect(results.filter((result) => !result.alreadyStored)).toHaveLength(1)
      const winner = results.find((result) => !result.alreadyStored)!
      for (const result of results) expect(result.entries.map(viewEntry)).toEqual(winner.entries.map(viewEntry))
      expect(winner.entries[0].seq).toBe(1)
      expect((yield* queue.load).state.currentSeq).toBe(1)
    }))

  it.scoped("concurrent stores of distinct ids take distinct seqs 1..n", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      const results = yield* Effect.all(
        Array.from({ length: 30 }, (_, i) => queue.store(epoch, { messageId: `m${i}`, payload: bytes(`${i}`) })),
        { concurrency: "unbounded" }
      )
      const seqs = results.map((result) => result.entries[0].seq).sort((a, b) => a - b)
      expect(seqs).toEqual(Array.from({ length: 30 }, (_, i) => i + 1))
      expect(results.every((result) => !result.alreadyStored)).toBe(true)
    }))

  it.scoped("concurrent whole and chunked stores of one id: one shape wins for everyone", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      const attempts = Array.from({ length: 12 }, (_, i) =>
        i % 2 === 0
          ? Effect.either(queue.store(epoch, { messageId: "m", payload: bytes(`w${i}`) }))
          : Effect.either(queue.storeChunked(epoch, "m", [bytes(`c${i}`), bytes(`d${i}`)])))
      const outcomes = yield* Effect.all(attempts, { concurrency: "unbounded" })
      const stored = outcomes.filter(Either.isRight).map((outcome) => outcome.right)
      const winners = stored.filter((result) => !result.alreadyStored)
      expect(winners).toHaveLength(1)
      const winner = winners[0]
      for (const result of stored) expect(result.entries.map(viewEntry)).toEqual(winner.entries.map(viewEntry))
      const failures = outcomes.filter(Either.isLeft).map((outcome) => outcome.left._tag)
      // a plain store fails only when the chunked batch won
      expect(failures.every((tag) => tag === "QueueChunkedBatch")).toBe(true)
      if (winner.entries.length === 1) expect(failures).toHaveLength(0)
      expect((yield* queue.load).state.currentSeq).toBe(winner.entries.length)
    }))
}

const storeTests = (suite: Suite) =>
  describe("store", () => {
    storeSequenceTests(suite)
    storeConcurrencyTests(suite)
  })

const chunkedStoreTests = ({ fresh }: Suite) => {
  it.scoped("storeChunked takes one seq per chunk, with derived ids and chunk marks", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      yield* queue.store(epoch, { messageId: "before", payload: bytes("b") })
      const result = yield* queue.storeChunked(epoch, "big", [bytes("1"), bytes("2"), bytes("3")])
      expect(viewResult(result)).toEqual({
        messageId: "big",
        alreadyStored: false,
        accepted: false,
        entries: [
          { seq: 2, messageId: chunkMessageId("big", 0, 3), payload: hex(bytes("1")), chunk: { first: true, last: false } },
          { seq: 3, messageId: chunkMessageId("big", 1, 3), payload: hex(bytes("2")), chunk: { first: false, last: false } },
          { seq: 4, messageId: chunkMessageId("big", 2, 3), payload: hex(bytes("3")), chunk: { first: false, last: true } }
        ]
      })
      const single = yield* queue.storeChunked(epoch, "one", [bytes("only")])
      expect(viewResult(single).entries).toEqual([
        { seq: 5, messageId: chunkMessageId("one", 0, 1), payload: hex(bytes("only")), chunk: { first: true, last: true } }
      ])
    }))

  it.scoped("accepting the business id accepts every chunk; load returns the chunk entries", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      const stored = yield* queue.storeChunked(epoch, "big", [bytes("1"), bytes("2")])
      yield* queue.accept(epoch, "big")
      const { state } = yield* queue.load
      expect(viewState(state).unconfirmed).toEqual(stored.entries.map(viewEntry))
    }))

  it.scoped("a chunked batch is never interleaved with other stores", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      const results = yield* Effect.all(
        Array.from({ length: 10 }, (_, i) =>
          i % 3 === 0
            ? queue.store(epoch, { messageId: `w${i}`, payload: bytes(`${i}`) })
            : queue.storeChunked(epoch, `c${i}`, Array.from({ length: 3 }, (_, j) => bytes(`${i}.${j}`)))),
        { concurrency: "unbounded" }
      )
      const seqs = results.flatMap((result) => result.entries.map((entry) => entry.seq)).sort((a, b) => a - b)
      expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1))
      for (const result of results) {
        const own = result.entries.map((entry) => entry.seq)
        expect(own).toEqual(own.map((_, j) => own[0] + j))
      }
    }))
}

const chunkedRecoveryTests = ({ fresh }: Suite) => {
  it.scoped("store on a chunked batch's id fails with QueueChunkedBatch and appends nothing", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      yield* queue.storeChunked(epoch, "big", [bytes("1"), bytes("2")])
      expect(yield* failureTag(queue.store(epoch, { messageId: "big", payload: bytes("whole") })))
        .toBe("QueueChunkedBatch")
      expect(
        yield* failureTag(queue.storeBatch(epoch, [
          { messageId: "new", payload: bytes("n") },
          { messageId: "big", payload: bytes("whole") }
        ]))
      ).toBe("QueueChunkedBatch")
      expect((yield* queue.load).state.currentSeq).toBe(2)
      // the failed batch wrote nothing: "new" is still new
      const { epoch: next } = yield* queue.load
      expect((yield* queue.store(next, { messageId: "new", payload: bytes("n") })).alreadyStored).toBe(false)
    }))

  it.scoped("a resubmission recovers the stored shape across the chunk threshold, both ways", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      // stored whole, resubmitted chunked: the whole entry answers
      const whole = yield* queue.store(epoch, { messageId: "w", payload: bytes("whole") })
      const asChunks = yield* queue.storeChunked(epoch, "w", [bytes("wh"), bytes("ole")])
      expect(viewResult(asChunks)).toEqual({ ...viewResult(whole), alreadyStored: true })
      // stored chunked, resubmitted whole: QueueChunkedBatch, then storeChunked (any count) recovers
      const chunked = yield* queue.storeChunked(epoch, "c", [bytes("ch"), bytes("un"), bytes("ks")])
      expect(yield* failureTag(queue.store(epoch, { messageId: "c", payload: bytes("chunks") })))
        .toBe("QueueChunkedBatch")
      const recovered = yield* queue.storeChunked(epoch, "c", [bytes("chunks!")])
      expect(viewResult(recovered)).toEqual({ ...viewResult(chunked), alreadyStored: true })
      expect((yield* queue.load).state.currentSeq).toBe(4)
    }))

  it.scoped("confirmed but retained ids still answer alreadyStored, in their stored shape", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      const whole = yield* queue.store(epoch, { messageId: "w", payload: bytes("whole") })
      const chunked = yield* queue.storeChunked(epoch, "c", [bytes("1"), bytes("2")])
      yield* queue.acceptBatch(epoch, ["w", "c"])
      yield* queue.confirm(epoch, 3)
      const { epoch: next, state } = yield* queue.load
      expect(viewState(state)).toEqual({ currentSeq: 3, confirmedSeq: 3, unconfirmed: [] })
      const again = yield* queue.store(next, { messageId: "w", payload: bytes("other") })
      expect(allowCompacted([viewResult(again)], [viewResult(whole)], upTo(3))).toEqual([
        { ...viewResult(whole), alreadyStored: true, accepted: true }
      ])
      const againChunked = yield* queue.storeChunked(next, "c", [bytes("x")])
      expect(allowCompacted([viewResult(againChunked)], [viewResult(chunked)], upTo(3))).toEqual([
        { ...viewResult(chunked), alreadyStored: true, accepted: true }
      ])
      expect(yield* failureTag(queue.store(next, { messageId: "c", payload: bytes("c") }))).toBe("QueueChunkedBatch")
      expect((yield* queue.load).state.currentSeq).toBe(3)
    }))
}

const chunkedTests = (suite: Suite) =>
  describe("chunked batches", () => {
    chunkedStoreTests(suite)
    chunkedRecoveryTests(suite)
  })

const acceptConfirmTests = ({ fresh }: Suite) =>
  describe("accept and confirm", () => {
    it.scoped("accept and confirm are idempotent", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* queue.storeBatch(epoch, [{ messageId: "a", payload: bytes("a") }, { messageId: "b", payload: bytes("b") }])
        yield* queue.accept(epoch, "a")
        yield* queue.accept(epoch, "a")
        yield* queue.acceptBatch(epoch, ["a", "b", "b"])
        yield* queue.confirm(epoch, 1)
        yield* queue.confirm(epoch, 1)
        yield* queue.confirm(epoch, 0)
        const { state } = yield* queue.load
        expect(viewState(state)).toEqual({
          currentSeq: 2,
          confirmedSeq: 1,
          unconfirmed: [{ seq: 2, messageId: "b", payload: hex(bytes("b")), chunk: null }]
        })
      }))

    it.scoped("accepting an unknown id is QueueConflict; a failed acceptBatch accepts nothing", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        expect(yield* failureTag(queue.accept(epoch, "nope"))).toBe("QueueConflict")
        yield* queue.store(epoch, { messageId: "a", payload: bytes("a") })
        expect(yield* failureTag(queue.acceptBatch(epoch, ["a", "nope"]))).toBe("QueueConflict")
        expect((yield* queue.load).state.unconfirmed).toEqual([])
      }))

    it.scoped("confirming beyond the highest stored seq is QueueConflict; up to it is fine", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* queue.confirm(epoch, 0)
        expect(yield* failureTag(queue.confirm(epoch, 1))).toBe("QueueConflict")
        yield* queue.storeBatch(epoch, [{ messageId: "a", payload: bytes("a") }, { messageId: "b", payload: bytes("b") }])
        expect(yield* failureTag(queue.confirm(epoch, 3))).toBe("QueueConflict")
        // confirming stored, never accepted entries is fine, but confirms nothing
        yield* queue.confirm(epoch, 2)
        expect((yield* queue.load).state.confirmedSeq).toBe(0)
        const { epoch: next } = yield* queue.load
        yield* queue.acceptBatch(next, ["a", "b"])
        yield* queue.confirm(next, 2)
        expect((yield* queue.load).state.confirmedSeq).toBe(2)
      }))
  })

/** `storeAccepted`, or where the queue lacks it `storeBatch` then `acceptBatch`. */
const storeAndAccept = (queue: DurableProducerQueueService, epoch: QueueEpoch, requests: ReadonlyArray<StoreRequest>) =>
  queue.storeAccepted === undefined
    ? Effect.flatMap(queue.storeBatch(epoch, requests), (results) =>
      Effect.as(queue.acceptBatch(epoch, requests.map((request) => request.messageId)), results))
    : queue.storeAccepted(epoch, requests)

/** The reload edge: a message accepted after a later one was confirmed is loaded and confirmed later. */
const perEntryConfirmTests = ({ fresh }: Suite) =>
  describe("per-entry confirmation", () => {
    const a = { seq: 1, messageId: "a", payload: hex(bytes("a")), chunk: null }

    for (const restarts of [false, true]) {
      it.scoped(`a stored entry below a confirm is untouched, then loaded once accepted${restarts ? " (restarts between the steps)" : ""}`, () =>
        Effect.gen(function*() {
          const queue = yield* fresh
          let { epoch } = yield* queue.load
          const restart = Effect.gen(function*() {
            if (restarts) epoch = (yield* queue.load).epoch
          })
          yield* queue.store(epoch, { messageId: "a", payload: bytes("a") })
          yield* restart
          yield* storeAndAccept(queue, epoch, [{ messageId: "b", payload: bytes("b") }])
          yield* restart
          yield* queue.confirm(epoch, 2)
          yield* restart
          yield* queue.accept(epoch, "a")
          const loaded = yield* queue.load
          epoch = loaded.epoch
          expect(viewState(loaded.state)).toEqual({ currentSeq: 2, confirmedSeq: 0, unconfirmed: [a] })
          yield* restart
          yield* queue.confirm(epoch, 2)
          expect(viewState((yield* queue.load).state)).toEqual({ currentSeq: 2, confirmedSeq: 2, unconfirmed: [] })
        }))
    }

    it.scoped("the low mark stops below the first stored or accepted entry; holes and dead letters do not hold it", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* storeAndAccept(queue, epoch, ["a", "b", "c", "d"].map((id) => ({ messageId: id, payload: bytes(id) })))
        yield* queue.store(epoch, { messageId: "e", payload: bytes("e") })
        yield* queue.deadLetter(epoch, { messageId: "a", attempts: 1, lastError: "x", at: 1 })
        yield* queue.confirm(epoch, 2)
        expect((yield* queue.load).state.confirmedSeq).toBe(2)
        const { epoch: next } = yield* queue.load
        yield* queue.deadLetter(next, { messageId: "c", attempts: 1, lastError: "x", at: 1 })
        yield* queue.confirm(next, 5)
        const { state } = yield* queue.load
        expect([state.confirmedSeq, state.unconfirmed.map((entry) => entry.messageId)]).toEqual([4, []])
      }))

    it.scoped("a confirm leaves dead letters alone; a confirm below the low mark does nothing", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* storeAndAccept(queue, epoch, ["a", "b"].map((id) => ({ messageId: id, payload: bytes(id) })))
        yield* queue.deadLetter(epoch, { messageId: "a", attempts: 1, lastError: "x", at: 1 })
        yield* queue.confirm(epoch, 2)
        yield* queue.confirm(epoch, 1)
        const letters = yield* queue.deadLetters({ limit: 10 })
        expect(letters.map((letter) => [letter.messageId, hex(letter.payload)])).toEqual([["a", hex(bytes("a"))]])
        expect(viewState((yield* queue.load).state)).toEqual({ currentSeq: 2, confirmedSeq: 2, unconfirmed: [] })
      }))

    it.scoped("a store keeps the message's send time and trace; load returns them", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* queue.store(epoch, { messageId: "a", payload: bytes("a"), at: 123, trace: "00-abc-01" })
        yield* queue.storeChunked(epoch, "c", [bytes("1"), bytes("2")], { at: 456 })
        yield* queue.acceptBatch(epoch, ["a", "c"])
        const { state } = yield* queue.load
        expect(state.unconfirmed.map(viewEntry)).toEqual([
          { ...a, at: 123, trace: "00-abc-01" },
          { seq: 2, messageId: chunkMessageId("c", 0, 2), payload: hex(bytes("1")), chunk: { first: true, last: false }, at: 456 },
          { seq: 3, messageId: chunkMessageId("c", 1, 2), payload: hex(bytes("2")), chunk: { first: false, last: true }, at: 456 }
        ])
      }))

    it.scoped("a chunked message is dead-lettered whole: one dead letter, its chunks joined", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* queue.store(epoch, { messageId: "before", payload: bytes("b") })
        yield* queue.storeChunked(epoch, "big", [bytes("12"), bytes("34"), bytes("5")], { trace: "t" })
        yield* queue.accept(epoch, "big")
        yield* queue.deadLetter(epoch, { messageId: "big", attempts: 4, lastError: "too big", at: 9 })
        const letters = yield* queue.deadLetters({ limit: 10 })
        expect(letters.map((letter) => ({ ...letter, payload: hex(letter.payload) }))).toEqual([
          { messageId: "big", seq: 2, payload: hex(bytes("12345")), attempts: 4, lastError: "too big", deadAt: 9, trace: "t" }
        ])
        expect(yield* queue.requeueDeadLetter("big")).toBe(true)
        expect((yield* queue.backlog(10)).map((entry) => [entry.messageId, hex(entry.payload), entry.trace])).toEqual([
          ["big", hex(bytes("12345")), "t"]
        ])
      }))
  })

/** The shared backlog, dead-letter and inspection cases, through a point-to-point adapter. */
const adapter = (fresh: Fresh): OperatorAdapter<DurableProducerQueueService> => {
  const adapted = (result: StoreResult): AdaptedResult => ({
    messageId: result.messageId,
    seq: result.entries[0].seq,
    payload: result.entries[0].payload,
    alreadyStored: result.alreadyStored,
    accepted: result.accepted,
    deadLettered: result.deadLettered === true
  })
  return {
    kind: "producer queue",
    fresh,
    load: (queue) => Effect.map(queue.load, ({ epoch, state }) => ({ epoch, loaded: state.unconfirmed })),
    store: (queue, epoch, request) => Effect.map(queue.store(epoch, request), adapted),
    storeAccepted: (queue, epoch, requests) => Effect.map(storeAndAccept(queue, epoch, requests), (results) => results.map(adapted)),
    accept: (queue, epoch, messageId) => queue.accept(epoch, messageId),
    confirm: (queue, epoch, message) => queue.confirm(epoch, message.seq),
    deadLetter: (queue, epoch, request) => queue.deadLetter(epoch, request)
  }
}

const fencingTests = ({ fresh, seeds, steps }: Suite) =>
  describe("fencing", () => {
    it.scoped("after a newer load every write kind with the old epoch is fenced and changes nothing", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch: old } = yield* queue.load
        yield* queue.storeBatch(old, [{ messageId: "a", payload: bytes("a") }, { messageId: "b", payload: bytes("b") }])
        yield* queue.accept(old, "a")
        const { epoch: current, state: before } = yield* queue.load
        const writes: ReadonlyArray<Effect.Effect<unknown, DurableQueueError>> = [
          queue.store(old, { messageId: "new", payload: bytes("n") }),
          queue.store(old, { messageId: "a", payload: bytes("a") }),
          queue.storeChunked(old, "chunks", [bytes("1"), bytes("2")]),
          queue.storeBatch(old, [{ messageId: "new2", payload: bytes("n") }]),
          queue.accept(old, "b"),
          queue.acceptBatch(old, ["b"]),
          queue.confirm(old, 1)
        ]
        for (const write of writes) {
          const error = yield* Effect.flip(write)
          expect(error._tag).toBe("QueueFenced")
          if (error._tag === "QueueFenced") expect(error.epoch).toBe(old)
        }
        const { epoch: latest, state: after } = yield* queue.load
        expect(viewState(after)).toEqual(viewState(before))
        expect(yield* failureTag(queue.accept(current, "b"))).toBe("QueueFenced")
        yield* queue.accept(latest, "b")
        expect((yield* queue.store(latest, { messageId: "new", payload: bytes("n") })).alreadyStored).toBe(false)
      }))

    it.scoped("a write with an epoch no load returned is QueueConflict", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        expect(yield* failureTag(queue.store(1, { messageId: "a", payload: bytes("a") }))).toBe("QueueConflict")
        const { epoch } = yield* queue.load
        expect(yield* failureTag(queue.store(epoch + 1000, { messageId: "a", payload: bytes("a") })))
          .toBe("QueueConflict")
        expect((yield* queue.load).state.currentSeq).toBe(0)
      }))

    it.scoped("stores racing a load: each either happened before it or is fenced", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const ids = Array.from({ length: 20 }, (_, i) => `r${i}`)
        yield* warmUp(queue.load)
        const { epoch } = yield* queue.load
        const [outcomes, loaded] = yield* raceWithLoad(
          queue.load,
          ids.map((id) => queue.store(epoch, { messageId: id, payload: bytes(id) }))
        )
        const stored = ids.filter((_, i) => Either.isRight(outcomes[i]))
        for (const result of outcomes) if (Either.isLeft(result)) expect(result.left._tag).toBe("QueueFenced")
        expect(loaded.state.currentSeq).toBe(stored.length)
        const { epoch: next } = yield* queue.load
        for (const id of ids) {
          const again = yield* queue.store(next, { messageId: id, payload: bytes(id) })
          expect(again.alreadyStored).toBe(stored.includes(id))
        }
      }))

    it.scoped("accepts racing a load: the load sees exactly the accepts that succeeded", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        yield* warmUp(queue.load)
        const { epoch } = yield* queue.load
        const ids = Array.from({ length: 20 }, (_, i) => `r${i}`)
        yield* queue.storeBatch(epoch, ids.map((id) => ({ messageId: id, payload: bytes(id) })))
        const [outcomes, loaded] = yield* raceWithLoad(queue.load, ids.map((id) => queue.accept(epoch, id)))
        for (const result of outcomes) if (Either.isLeft(result)) expect(result.left._tag).toBe("QueueFenced")
        const accepted = ids.filter((_, i) => Either.isRight(outcomes[i]))
        expect(loaded.state.unconfirmed.map((entry) => entry.messageId)).toEqual(accepted)
      }))

    for (const seed of seeds) {
      it.scoped(`interleaved writers with stale epochs match the model (seed ${seed})`, () =>
        Effect.gen(function*() {
          const queue = yield* fresh
          const random = SeededRandom.make(seed)
          const writers: Array<WriterEpoch | undefined> = [undefined, undefined, undefined]
          let model = emptyModel
          for (let i = 0; i < steps; i++) {
            const index = random.int(0, writers.length - 1)
            const writer = writers[index]
            if (writer === undefined || random.chance(0.15)) {
              const loaded = yield* queue.load
              const [next, expected] = modelLoad(model)
              model = next
              writers[index] = { queue: loaded.epoch, model: model.epoch }
              expect(viewState(loaded.state), `step ${i}: load by writer ${index}`).toEqual(expected)
              continue
            }
            const step = randomStep(random, model, queue.storeAccepted !== undefined)
            const [next, actual, expected] = yield* runStep(queue, model, writer, step)
            model = next
            expect(actual, `step ${i}: writer ${index} ${describeStep(step, writer.queue)}`).toEqual(expected)
          }
          const [, expected] = modelLoad(model)
          expect(viewState((yield* queue.load).state), "final load").toEqual(expected)
        }).pipe(withSeed("producer queue", "interleaved writers", seed)))
    }
  })

const batchTests = ({ fresh, seeds }: Suite) =>
  describe("batches", () => {
    for (const seed of seeds) {
      it.scoped(`storeBatch and acceptBatch equal one-by-one calls (seed ${seed})`, () =>
        Effect.gen(function*() {
          const batched = yield* fresh
          const single = yield* fresh
          const { epoch: batchEpoch } = yield* batched.load
          const { epoch: singleEpoch } = yield* single.load
          const random = SeededRandom.make(seed)
          const chunkedIds = new Set<string>()
          const storedIds: Array<string> = []
          for (let round = 0; round < 12; round++) {
            const roll = random.next()
            if (roll < 0.15) {
              const id = `chunked${round}`
              const chunks = [randomPayload(random), randomPayload(random)]
              chunkedIds.add(id)
              const a = yield* batched.storeChunked(batchEpoch, id, chunks)
              const b = yield* single.storeChunked(singleEpoch, id, chunks)
              expect(viewResult(a)).toEqual(viewResult(b))
            } else if (roll < 0.6) {
              const pool = [...idPool, ...storedIds].filter((id) => !chunkedIds.has(id))
              const requests = Array.from({ length: random.int(1, 8) }, () => ({
                messageId: pool[random.int(0, pool.length - 1)],
                payload: randomPayload(random)
              }))
              const a = yield* batched.storeBatch(batchEpoch, requests)
              const b = []
              for (const request of requests) b.push(yield* single.store(singleEpoch, request))
              expect(a.map(viewResult), `round ${round}`).toEqual(b.map(viewResult))
              for (const request of requests) if (!storedIds.includes(request.messageId)) storedIds.push(request.messageId)
            } else if (storedIds.length > 0 || chunkedIds.size > 0) {
              const known = [...storedIds, ...chunkedIds]
              const ids = Array.from({ length: random.int(1, 5) }, () => known[random.int(0, known.length - 1)])
              yield* batched.acceptBatch(batchEpoch, ids)
              for (const id of ids) yield* single.accept(singleEpoch, id)
            }
          }
          const a = yield* batched.load
          const b = yield* single.load
          expect(viewState(a.state)).toEqual(viewState(b.state))
        }).pipe(withSeed("producer queue", "batch equivalence", seed)))
    }

    it.scoped("empty batches do nothing", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        expect(yield* queue.storeBatch(epoch, [])).toEqual([])
        yield* queue.acceptBatch(epoch, [])
        expect((yield* queue.load).state.currentSeq).toBe(0)
      }))
  })

const storeAcceptedEquivalenceTests = ({ fresh, seeds }: Suite) => {
  it.scoped("stores and accepts in one step; each result is the store's", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const storeAccepted = queue.storeAccepted
      if (storeAccepted === undefined) return
      const { epoch } = yield* queue.load
      yield* queue.store(epoch, { messageId: "old", payload: bytes("o") })
      const results = yield* storeAccepted(epoch, [
        { messageId: "a", payload: bytes("a") },
        { messageId: "old", payload: bytes("other") },
        { messageId: "b", payload: bytes("b") },
        { messageId: "a", payload: bytes("again") }
      ])
      const entry = (seq: number, messageId: string, payload: string) => ({
        seq,
        messageId,
        payload: hex(bytes(payload)),
        chunk: null
      })
      expect(results.map(viewResult)).toEqual([
        { messageId: "a", alreadyStored: false, accepted: false, entries: [entry(2, "a", "a")] },
        // stored before, not accepted: its first write, accepted by this call
        { messageId: "old", alreadyStored: true, accepted: false, entries: [entry(1, "old", "o")] },
        { messageId: "b", alreadyStored: false, accepted: false, entries: [entry(3, "b", "b")] },
        // accepted earlier in the same call, as store then accept one by one would say
        { messageId: "a", alreadyStored: true, accepted: true, entries: [entry(2, "a", "a")] }
      ])
      const { epoch: next, state } = yield* queue.load
      expect(viewState(state)).toEqual({
        currentSeq: 3,
        confirmedSeq: 0,
        unconfirmed: [entry(1, "old", "o"), entry(2, "a", "a"), entry(3, "b", "b")]
      })
      // a resubmission of accepted messages appends nothing and answers accepted
      const again = yield* storeAccepted(next, [{ messageId: "b", payload: bytes("x") }])
      expect(again.map(viewResult)).toEqual([
        { messageId: "b", alreadyStored: true, accepted: true, entries: [entry(3, "b", "b")] }
      ])
      expect((yield* queue.load).state.currentSeq).toBe(3)
    }))

  for (const seed of seeds) {
    it.scoped(`storeAccepted equals store then accept, one message after the other (seed ${seed})`, () =>
      Effect.gen(function*() {
        const fused = yield* fresh
        const single = yield* fresh
        const storeAccepted = fused.storeAccepted
        if (storeAccepted === undefined) return
        const { epoch: fusedEpoch } = yield* fused.load
        const { epoch: singleEpoch } = yield* single.load
        const random = SeededRandom.make(seed)
        const chunkedIds = new Set<string>()
        const storedIds: Array<string> = []
        let currentSeq = 0
        for (let round = 0; round < 16; round++) {
          const roll = random.next()
          const pool = [...idPool, ...storedIds].filter((id) => !chunkedIds.has(id))
          const pick = () => pool[random.int(0, pool.length - 1)]
          if (roll < 0.2) {
            // plain stores leave ids stored but unaccepted, for storeAccepted to find
            const request = { messageId: pick(), payload: randomPayload(random) }
            const a = yield* fused.store(fusedEpoch, request)
            const b = yield* single.store(singleEpoch, request)
            expect(viewResult(a), `round ${round}`).toEqual(viewResult(b))
            currentSeq = Math.max(currentSeq, ...a.entries.map((entry) => entry.seq))
            if (!storedIds.includes(request.messageId)) storedIds.push(request.messageId)
          } else if (roll < 0.3) {
            const id = `chunked${round}`
            chunkedIds.add(id)
            const chunks = [randomPayload(random), randomPayload(random)]
            const a = yield* fused.storeChunked(fusedEpoch, id, chunks)
            expect(viewResult(a)).toEqual(viewResult(yield* single.storeChunked(singleEpoch, id, chunks)))
            currentSeq += 2
          } else if (roll < 0.4 && currentSeq > 0) {
            const upTo = random.int(0, currentSeq)
            yield* fused.confirm(fusedEpoch, upTo)
            yield* single.confirm(singleEpoch, upTo)
          } else {
            const requests = Array.from({ length: random.int(1, 8) }, () => ({
              messageId: pick(),
              payload: randomPayload(random)
            }))
            const a = yield* storeAccepted(fusedEpoch, requests)
            const b: Array<StoreResult> = []
            for (const request of requests) {
              b.push(yield* single.store(singleEpoch, request))
              yield* single.accept(singleEpoch, request.messageId)
            }
            expect(a.map(viewResult), `round ${round}`).toEqual(b.map(viewResult))
            for (const result of a) {
              currentSeq = Math.max(currentSeq, ...result.entries.map((entry) => entry.seq))
              if (!storedIds.includes(result.messageId)) storedIds.push(result.messageId)
            }
          }
        }
        expect(viewState((yield* fused.load).state)).toEqual(viewState((yield* single.load).state))
      }).pipe(withSeed("producer queue", "storeAccepted equivalence", seed)))
  }
}

const storeAcceptedRefusalTests = ({ fresh }: Suite) => {
  it.scoped("a chunked batch's id, an empty id or a stale epoch fails the whole call and writes nothing", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const storeAccepted = queue.storeAccepted
      if (storeAccepted === undefined) return
      const { epoch: old } = yield* queue.load
      yield* queue.storeChunked(old, "big", [bytes("1"), bytes("2")])
      yield* queue.store(old, { messageId: "stored", payload: bytes("s") })
      const { epoch, state: before } = yield* queue.load
      const fresh1 = { messageId: "new", payload: bytes("n") }
      const stored = { messageId: "stored", payload: bytes("s") }
      expect(yield* failureTag(storeAccepted(epoch, [fresh1, stored, { messageId: "big", payload: bytes("b") }])))
        .toBe("QueueChunkedBatch")
      expect(yield* failureTag(storeAccepted(epoch, [fresh1, stored, { messageId: "", payload: bytes("e") }])))
        .toBe("QueueConflict")
      expect(yield* failureTag(storeAccepted(old, [fresh1, stored]))).toBe("QueueFenced")
      const { epoch: latest, state: after } = yield* queue.load
      expect(viewState(after)).toEqual(viewState(before))
      // nothing was stored or accepted: "new" is new, "stored" still unaccepted
      const results = yield* storeAccepted(latest, [fresh1, stored])
      expect(results.map((result) => [result.alreadyStored, result.accepted])).toEqual([[false, false], [true, false]])
    }))

  it.scoped("concurrent calls with one id: exactly one seq, every caller sees the first write", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const storeAccepted = queue.storeAccepted
      if (storeAccepted === undefined) return
      yield* warmUp(queue.load)
      const { epoch } = yield* queue.load
      const results = yield* Effect.all(
        Array.from({ length: 8 }, (_, i) =>
          storeAccepted(epoch, [{ messageId: `own${i}`, payload: bytes(`${i}`) }, { messageId: "shared", payload: bytes(`${i}`) }])),
        { concurrency: "unbounded" }
      )
      const shared = results.map((pair) => viewResult(pair[1]))
      const first = shared.filter((result) => !result.alreadyStored)
      expect(first).toHaveLength(1)
      for (const result of shared) expect(result.entries).toEqual(first[0].entries)
      const { state } = yield* queue.load
      expect(state.currentSeq).toBe(9)
      expect(state.unconfirmed.map((entry) => entry.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9])
    }))
}

const storeAcceptedTests = (suite: Suite) =>
  describe("storeAccepted (optional)", () => {
    storeAcceptedEquivalenceTests(suite)
    storeAcceptedRefusalTests(suite)
  })

const modelTests = ({ fresh, seeds, steps }: Suite) =>
  describe("model", () => {
    for (const seed of seeds) {
      it.scoped(`load after every operation matches the model (seed ${seed})`, () =>
        Effect.gen(function*() {
          const queue = yield* fresh
          const random = SeededRandom.make(seed)
          const first = yield* queue.load
          let [model] = modelLoad(emptyModel)
          let writer: WriterEpoch = { queue: first.epoch, model: model.epoch }
          let previous: WriterEpoch | undefined = undefined
          for (let i = 0; i < steps; i++) {
            const step = randomStep(random, model, queue.storeAccepted !== undefined)
            // now and then a write from the writer before the last load: it must be fenced
            const stale = previous !== undefined && random.chance(0.1) ? previous : undefined
            const [next, actual, expected] = yield* runStep(queue, model, stale ?? writer, step)
            const label = `step ${i}: ${describeStep(step, (stale ?? writer).queue)}`
            if (stale !== undefined) expect(expected, label).toEqual({ error: "QueueFenced" })
            expect(actual, label).toEqual(expected)
            const loaded = yield* queue.load
            const [afterLoad, state] = modelLoad(next)
            expect(viewState(loaded.state), `${label}, then load`).toEqual(state)
            model = afterLoad
            previous = writer
            writer = { queue: loaded.epoch, model: model.epoch }
          }
        }).pipe(withSeed("producer queue", "model", seed)))
    }
  })

export const producerQueueConformance = (
  name: string,
  layer: Layer.Layer<DurableProducerQueue, unknown>,
  options?: ConformanceOptions
): void => {
  const fresh: Fresh = Effect.map(
    Layer.build(layer),
    (context) => Context.get(context, DurableProducerQueue)
  )
  const suite: Suite = { fresh, seeds: seedsFrom(options), steps: options?.steps ?? 60 }

  describe(`DurableProducerQueue conformance: ${name}`, () => {
    loadTests(suite)
    storeTests(suite)
    chunkedTests(suite)
    acceptConfirmTests(suite)
    fencingTests(suite)
    batchTests(suite)
    storeAcceptedTests(suite)
    modelTests(suite)
    perEntryConfirmTests(suite)
    operatorTests(adapter(fresh))
  })
}
