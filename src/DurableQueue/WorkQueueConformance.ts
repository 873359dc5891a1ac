/**
 * The conformance suite of the `DurableWorkQueue` contract, for `@effect/vitest`. Every
 * implementation in this package passes it; run it against your own store the same way:
 *
 * ```ts
 * import { workQueueConformance } from "effect-reliable/conformance"
 * workQueueConformance("my store", MyWorkQueue.layer) // a fresh, empty queue per build
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
import * as SeededRandom from "../internal/SeededRandom.js"
import type { QueueEpoch, StoreRequest } from "./DurableProducerQueue.js"
import type { DurableWorkQueueService, FailureRequest, WorkQueueState, WorkStoreResult } from "./DurableWorkQueue.js"
import { DurableWorkQueue } from "./DurableWorkQueue.js"
import type { ConformanceOptions, EntryView, Outcome } from "./internal/ConformanceSupport.js"
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
import type { AdaptedResult, OperatorAdapter } from "./internal/OperatorConformance.js"
import { operatorTests } from "./internal/OperatorConformance.js"
import type { DurableQueueError } from "./QueueErrors.js"

export type { ConformanceOptions } from "./internal/ConformanceSupport.js"

// ---- views ---------------------------------------------------------------------------------

interface ResultView {
  readonly entry: EntryView
  readonly alreadyStored: boolean
  readonly accepted: boolean
  readonly confirmed: boolean
  /** Present (true) only for a dead letter. */
  readonly deadLettered?: true
}

interface StateView {
  readonly currentSeq: number
  readonly pending: ReadonlyArray<EntryView>
}

const viewResult = (result: WorkStoreResult): ResultView => ({
  entry: viewEntry(result.entry),
  alreadyStored: result.alreadyStored,
  accepted: result.accepted,
  confirmed: result.confirmed,
  ...(result.deadLettered === true ? { deadLettered: true as const } : {})
})

const viewState = (state: WorkQueueState): StateView => ({
  currentSeq: state.currentSeq,
  pending: state.pending.map(viewEntry)
})

/** A confirmed job may come back compacted (empty payload): accept that in place of the original. */
const allowCompacted = (actual: ReadonlyArray<ResultView>, expected: ReadonlyArray<ResultView>) =>
  actual.map((result, i) => {
    const original = expected[i]
    return result.confirmed && result.entry.payload === "" && original !== undefined
      ? { ...result, entry: { ...result.entry, payload: original.entry.payload } }
      : result
  })

// ---- the model -----------------------------------------------------------------------------

type JobState = "Stored" | "Accepted" | "Confirmed"

interface ModelJob {
  readonly entry: EntryView
  readonly state: JobState
}

interface Model {
  readonly epoch: number
  readonly currentSeq: number
  readonly jobs: ReadonlyMap<string, ModelJob>
}

const emptyModel: Model = { epoch: 0, currentSeq: 0, jobs: new Map() }

const fencing = (model: Model, epoch: number): string | undefined =>
  epoch < model.epoch ? "QueueFenced" : epoch > model.epoch ? "QueueConflict" : undefined

const modelLoad = (model: Model): [Model, StateView] => {
  const pending = [...model.jobs.values()]
    .filter((job) => job.state === "Accepted")
    .map((job) => job.entry)
    .sort((a, b) => a.seq - b.seq)
  return [{ ...model, epoch: model.epoch + 1 }, { currentSeq: model.currentSeq, pending }]
}

const resultOf = (job: ModelJob, alreadyStored: boolean): ResultView => ({
  entry: job.entry,
  alreadyStored,
  accepted: job.state !== "Stored",
  confirmed: job.state === "Confirmed"
})

const modelStore = (
  model: Model,
  epoch: number,
  requests: ReadonlyArray<StoreRequest>
): [Model, Outcome<ReadonlyArray<ResultView>>] => {
  const fenced = fencing(model, epoch)
  if (fenced !== undefined) return [model, { error: fenced }]
  const jobs = new Map(model.jobs)
  let seq = model.currentSeq
  const results = requests.map(({ messageId, payload }) => {
    const found = jobs.get(messageId)
    if (found !== undefined) return resultOf(found, true)
    seq += 1
    const job: ModelJob = { entry: { seq, messageId, payload: hex(payload), chunk: null }, state: "Stored" }
    jobs.set(messageId, job)
    return resultOf(job, false)
  })
  return [{ ...model, currentSeq: seq, jobs }, { ok: results }]
}

const modelAdvance = (
  model: Model,
  epoch: number,
  ids: ReadonlyArray<string>,
  to: "Accepted" | "Confirmed"
): [Model, Outcome<void>] => {
  const fenced = fencing(model, epoch)
  if (fenced !== undefined) return [model, { error: fenced }]
  const blocked = ids.some((id) => {
    const job = model.jobs.get(id)
    return job === undefined || (to === "Confirmed" && job.state === "Stored")
  })
  if (blocked) return [model, { error: "QueueConflict" }]
  const jobs = new Map(model.jobs)
  for (const id of ids) {
    const job = jobs.get(id)!
    if (to === "Confirmed" || job.state === "Stored") jobs.set(id, { ...job, state: to })
  }
  return [{ ...model, jobs }, { ok: undefined }]
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
    next = modelAdvance(stored, epoch, [request.messageId], "Accepted")[0]
  }
  return [next, { ok: results }]
}

// ---- random steps --------------------------------------------------------------------------

type Step =
  | { readonly _tag: "Store"; readonly requests: ReadonlyArray<StoreRequest>; readonly batch: boolean }
  | { readonly _tag: "Accept"; readonly ids: ReadonlyArray<string>; readonly batch: boolean }
  | { readonly _tag: "Confirm"; readonly ids: ReadonlyArray<string>; readonly batch: boolean }
  | { readonly _tag: "StoreAccepted"; readonly requests: ReadonlyArray<StoreRequest> }

/** `fused`: the queue has `storeAccepted` (without it, those steps are plain batch stores). */
const randomStep = (random: SeededRandom.SeededRandom, fused: boolean): Step => {
  const id = () => idPool[random.int(0, idPool.length - 1)]
  const roll = random.next()
  if (roll < 0.25) return { _tag: "Store", requests: [{ messageId: id(), payload: randomPayload(random) }], batch: false }
  if (roll < 0.4) {
    const requests = Array.from({ length: random.int(0, 4) }, () => ({ messageId: id(), payload: randomPayload(random) }))
    return { _tag: "Store", requests, batch: true }
  }
  if (roll < 0.6) return { _tag: "Accept", ids: [id()], batch: false }
  if (roll < 0.7) return { _tag: "Accept", ids: Array.from({ length: random.int(0, 3) }, id), batch: true }
  if (roll < 0.8) {
    const requests = Array.from({ length: random.int(1, 4) }, () => ({ messageId: id(), payload: randomPayload(random) }))
    return fused ? { _tag: "StoreAccepted", requests } : { _tag: "Store", requests, batch: true }
  }
  if (roll < 0.9) return { _tag: "Confirm", ids: [id()], batch: false }
  return { _tag: "Confirm", ids: Array.from({ length: random.int(0, 3) }, id), batch: true }
}

interface WriterEpoch {
  readonly queue: QueueEpoch
  readonly model: number
}

const runStep = (queue: DurableWorkQueueService, model: Model, writer: WriterEpoch, step: Step) =>
  Effect.gen(function*() {
    const epoch = writer.queue
    switch (step._tag) {
      case "Store": {
        const [next, expected] = modelStore(model, writer.model, step.requests)
        const actual = step.batch
          ? yield* outcome(queue.storeBatch(epoch, step.requests), (results) => results.map(viewResult))
          : yield* outcome(queue.store(epoch, step.requests[0]), (result) => [viewResult(result)])
        const lenient = "ok" in actual && "ok" in expected ? { ok: allowCompacted(actual.ok, expected.ok) } : actual
        return [next, lenient as Outcome<unknown>, expected as Outcome<unknown>] as const
      }
      case "Accept": {
        const [next, expected] = modelAdvance(model, writer.model, step.ids, "Accepted")
        const actual = step.batch
          ? yield* outcome(queue.acceptBatch(epoch, step.ids), () => undefined)
          : yield* outcome(queue.accept(epoch, step.ids[0]), () => undefined)
        return [next, actual as Outcome<unknown>, expected as Outcome<unknown>] as const
      }
      case "Confirm": {
        const [next, expected] = modelAdvance(model, writer.model, step.ids, "Confirmed")
        const actual = step.batch
          ? yield* outcome(queue.confirmBatch(epoch, step.ids), () => undefined)
          : yield* outcome(queue.confirmMessage(epoch, step.ids[0]), () => undefined)
        return [next, actual as Outcome<unknown>, expected as Outcome<unknown>] as const
      }
      case "StoreAccepted": {
        const [next, expected] = modelStoreAccepted(model, writer.model, step.requests)
        const actual = yield* outcome(queue.storeAccepted!(epoch, step.requests), (results) => results.map(viewResult))
        const lenient = "ok" in actual && "ok" in expected ? { ok: allowCompacted(actual.ok, expected.ok) } : actual
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
    case "Accept":
      return `${step.batch ? "acceptBatch" : "accept"}(${epoch}, ${step.ids.join(",")})`
    case "Confirm":
      return `${step.batch ? "confirmBatch" : "confirmMessage"}(${epoch}, ${step.ids.join(",")})`
    case "StoreAccepted":
      return `storeAccepted(${epoch}, ${step.requests.map((r) => `${r.messageId}=${hex(r.payload)}`).join(",")})`
  }
}

// ---- the tests -----------------------------------------------------------------------------

/** A fresh queue: one build of the layer under test. */
type Fresh = Effect.Effect<DurableWorkQueueService, unknown, Scope.Scope>

interface Suite {
  readonly fresh: Fresh
  readonly seeds: ReadonlyArray<number>
  readonly steps: number
}

const job = (seq: number, messageId: string, payload: string): EntryView => ({
  seq,
  messageId,
  payload: hex(bytes(payload)),
  chunk: null
})

const storeTests = ({ fresh }: Suite) =>
  describe("load and store", () => {
    it.scoped("a fresh queue loads empty; every load returns a greater epoch", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const first = yield* queue.load
        expect(first.epoch).toBeGreaterThan(0)
        expect(viewState(first.state)).toEqual({ currentSeq: 0, pending: [] })
        const second = yield* queue.load
        expect(second.epoch).toBeGreaterThan(first.epoch)
      }))

    it.scoped("assigns seqs in store order; the first write wins", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        const a = yield* queue.store(epoch, { messageId: "a", payload: bytes("a") })
        const b = yield* queue.store(epoch, { messageId: "b", payload: bytes("b") })
        expect([a, b].map(viewResult)).toEqual([
          { entry: job(1, "a", "a"), alreadyStored: false, accepted: false, confirmed: false },
          { entry: job(2, "b", "b"), alreadyStored: false, accepted: false, confirmed: false }
        ])
        const retry = yield* queue.store(epoch, { messageId: "a", payload: bytes("other") })
        expect(viewResult(retry)).toEqual({ entry: job(1, "a", "a"), alreadyStored: true, accepted: false, confirmed: false })
        yield* queue.accept(epoch, "a")
        expect((yield* queue.store(epoch, { messageId: "a", payload: bytes("x") })).accepted).toBe(true)
        expect((yield* queue.load).state.currentSeq).toBe(2)
      }))

    viewPayloadTest(fresh, (state) => state.pending)

    it.scoped("an empty message id is QueueConflict", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        expect(yield* failureTag(queue.store(epoch, { messageId: "", payload: bytes("a") }))).toBe("QueueConflict")
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
        for (const result of results) expect(viewEntry(result.entry)).toEqual(viewEntry(winner.entry))
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
        expect(results.map((result) => result.entry.seq).sort((x, y) => x - y))
          .toEqual(Array.from({ length: 30 }, (_, i) => i + 1))
      }))
  })

const acceptConfirmTests = ({ fresh }: Suite) =>
  describe("accept and confirmMessage", () => {
    it.scoped("accept and confirmMessage are idempotent; unknown ids are QueueConflict", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        expect(yield* failureTag(queue.accept(epoch, "nope"))).toBe("QueueConflict")
        expect(yield* failureTag(queue.confirmMessage(epoch, "nope"))).toBe("QueueConflict")
        yield* queue.storeBatch(epoch, [{ messageId: "a", payload: bytes("a") }, { messageId: "b", payload: bytes("b") }])
        yield* queue.accept(epoch, "a")
        yield* queue.accept(epoch, "a")
        yield* queue.acceptBatch(epoch, ["a", "b", "b"])
        yield* queue.confirmMessage(epoch, "a")
        yield* queue.confirmMessage(epoch, "a")
        yield* queue.confirmBatch(epoch, ["a"])
        yield* queue.accept(epoch, "a")
        expect(viewState((yield* queue.load).state)).toEqual({ currentSeq: 2, pending: [job(2, "b", "b")] })
      }))

    it.scoped("confirming a job that was never accepted is QueueConflict", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* queue.store(epoch, { messageId: "a", payload: bytes("a") })
        expect(yield* failureTag(queue.confirmMessage(epoch, "a"))).toBe("QueueConflict")
        yield* queue.accept(epoch, "a")
        yield* queue.confirmMessage(epoch, "a")
      }))

    it.scoped("a failed batch writes nothing", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* queue.storeBatch(epoch, [{ messageId: "a", payload: bytes("a") }, { messageId: "b", payload: bytes("b") }])
        expect(yield* failureTag(queue.acceptBatch(epoch, ["a", "nope"]))).toBe("QueueConflict")
        expect((yield* queue.load).state.pending).toEqual([])
        const { epoch: next } = yield* queue.load
        yield* queue.accept(next, "a")
        expect(yield* failureTag(queue.confirmBatch(next, ["a", "b"]))).toBe("QueueConflict")
        expect(viewState((yield* queue.load).state).pending).toEqual([job(1, "a", "a")])
      }))

    it.scoped("load returns accepted, unconfirmed jobs in seq order, with holes", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        const ids = ["j1", "j2", "j3", "j4", "j5", "j6"]
        yield* queue.storeBatch(epoch, ids.map((id) => ({ messageId: id, payload: bytes(id) })))
        yield* queue.acceptBatch(epoch, ["j5", "j1", "j2", "j4", "j3"])
        yield* queue.confirmMessage(epoch, "j4")
        yield* queue.confirmBatch(epoch, ["j2"])
        expect(viewState((yield* queue.load).state)).toEqual({
          currentSeq: 6,
          pending: [job(1, "j1", "j1"), job(3, "j3", "j3"), job(5, "j5", "j5")]
        })
      }))

    it.scoped("a job stored before others and accepted after they were confirmed and loaded is loaded", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* queue.store(epoch, { messageId: "early", payload: bytes("e") })
        const later = ["l1", "l2", "l3"]
        yield* queue.storeBatch(epoch, later.map((id) => ({ messageId: id, payload: bytes(id) })))
        yield* queue.acceptBatch(epoch, later)
        yield* queue.confirmBatch(epoch, later)
        const loaded = yield* queue.load
        expect(viewState(loaded.state)).toEqual({ currentSeq: 4, pending: [] })
        yield* queue.accept(loaded.epoch, "early")
        const { epoch: next, state } = yield* queue.load
        expect(viewState(state)).toEqual({ currentSeq: 4, pending: [job(1, "early", "e")] })
        yield* queue.confirmMessage(next, "early")
        yield* queue.store(next, { messageId: "after", payload: bytes("a") })
        yield* queue.accept(next, "after")
        expect(viewState((yield* queue.load).state)).toEqual({ currentSeq: 5, pending: [job(5, "after", "a")] })
        expect(viewState((yield* queue.load).state)).toEqual({ currentSeq: 5, pending: [job(5, "after", "a")] })
      }))

    it.scoped("a confirmed job still answers a resubmission: alreadyStored and confirmed", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        const stored = yield* queue.store(epoch, { messageId: "a", payload: bytes("a") })
        yield* queue.accept(epoch, "a")
        yield* queue.confirmMessage(epoch, "a")
        const { epoch: next } = yield* queue.load
        const again = yield* queue.store(next, { messageId: "a", payload: bytes("again") })
        expect(allowCompacted([viewResult(again)], [viewResult(stored)])).toEqual([
          { entry: job(1, "a", "a"), alreadyStored: true, accepted: true, confirmed: true }
        ])
        yield* queue.confirmMessage(next, "a")
        expect(viewState((yield* queue.load).state)).toEqual({ currentSeq: 1, pending: [] })
      }))
  })

const fencingTests = ({ fresh, seeds, steps }: Suite) =>
  describe("fencing", () => {
    it.scoped("after a newer load every write kind with the old epoch is fenced and changes nothing", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch: old } = yield* queue.load
        yield* queue.storeBatch(old, [{ messageId: "a", payload: bytes("a") }, { messageId: "b", payload: bytes("b") }])
        yield* queue.accept(old, "a")
        const { state: before } = yield* queue.load
        const writes: ReadonlyArray<Effect.Effect<unknown, DurableQueueError>> = [
          queue.store(old, { messageId: "new", payload: bytes("n") }),
          queue.store(old, { messageId: "a", payload: bytes("a") }),
          queue.storeBatch(old, [{ messageId: "new2", payload: bytes("n") }]),
          queue.accept(old, "b"),
          queue.acceptBatch(old, ["b"]),
          queue.confirmMessage(old, "a"),
          queue.confirmBatch(old, ["a"])
        ]
        for (const write of writes) {
          const error = yield* Effect.flip(write)
          expect(error._tag).toBe("QueueFenced")
          if (error._tag === "QueueFenced") expect(error.epoch).toBe(old)
        }
        const { epoch: latest, state: after } = yield* queue.load
        expect(viewState(after)).toEqual(viewState(before))
        yield* queue.confirmMessage(latest, "a")
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
        for (const result of outcomes) if (Either.isLeft(result)) expect(result.left._tag).toBe("QueueFenced")
        const stored = ids.filter((_, i) => Either.isRight(outcomes[i]))
        expect(loaded.state.currentSeq).toBe(stored.length)
        const { epoch: next } = yield* queue.load
        for (const id of ids) {
          expect((yield* queue.store(next, { messageId: id, payload: bytes(id) })).alreadyStored).toBe(stored.includes(id))
        }
      }))

    it.scoped("accepts and confirms racing a load: the load sees exactly those that succeeded", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        yield* warmUp(queue.load)
        const { epoch } = yield* queue.load
        const ids = Array.from({ length: 20 }, (_, i) => `r${i}`)
        const [toConfirm, toAccept] = [ids.slice(0, 10), ids.slice(10)]
        yield* queue.storeBatch(epoch, ids.map((id) => ({ messageId: id, payload: bytes(id) })))
        yield* queue.acceptBatch(epoch, toConfirm)
        // interleave the two kinds, so each half of the race has both
        const writes = toConfirm.flatMap((id, i) => [queue.confirmMessage(epoch, id), queue.accept(epoch, toAccept[i])])
        const [outcomes, loaded] = yield* raceWithLoad(queue.load, writes)
        for (const result of outcomes) if (Either.isLeft(result)) expect(result.left._tag).toBe("QueueFenced")
        const expected = ids.filter((_, i) =>
          i < 10 ? Either.isLeft(outcomes[2 * i]) : Either.isRight(outcomes[2 * (i - 10) + 1])
        )
        expect(loaded.state.pending.map((entry) => entry.messageId)).toEqual(expected)
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
            const step = randomStep(random, queue.storeAccepted !== undefined)
            const [next, actual, expected] = yield* runStep(queue, model, writer, step)
            model = next
            expect(actual, `step ${i}: writer ${index} ${describeStep(step, writer.queue)}`).toEqual(expected)
          }
        }).pipe(withSeed("work queue", "interleaved writers", seed)))
    }
  })

const batchTests = ({ fresh, seeds }: Suite) =>
  describe("batches", () => {
    for (const seed of seeds) {
      it.scoped(`storeBatch, acceptBatch and confirmBatch equal one-by-one calls (seed ${seed})`, () =>
        Effect.gen(function*() {
          const batched = yield* fresh
          const single = yield* fresh
          const { epoch: batchEpoch } = yield* batched.load
          const { epoch: singleEpoch } = yield* single.load
          const random = SeededRandom.make(seed)
          const stored: Array<string> = []
          const accepted = new Set<string>()
          for (let round = 0; round < 12; round++) {
            const roll = random.next()
            const pick = (from: ReadonlyArray<string>) =>
              Array.from({ length: random.int(1, 5) }, () => from[random.int(0, from.length - 1)])
            if (roll < 0.45 || stored.length === 0) {
              const pool = [...idPool, ...stored]
              const requests = pick(pool).map((messageId) => ({ messageId, payload: randomPayload(random) }))
              const a = yield* batched.storeBatch(batchEpoch, requests)
              const b = []
              for (const request of requests) b.push(yield* single.store(singleEpoch, request))
              expect(a.map(viewResult), `round ${round}`).toEqual(b.map(viewResult))
              for (const { messageId } of requests) if (!stored.includes(messageId)) stored.push(messageId)
            } else if (roll < 0.75 || accepted.size === 0) {
              const ids = pick(stored)
              yield* batched.acceptBatch(batchEpoch, ids)
              for (const id of ids) yield* single.accept(singleEpoch, id)
              for (const id of ids) accepted.add(id)
            } else {
              const ids = pick([...accepted])
              yield* batched.confirmBatch(batchEpoch, ids)
              for (const id of ids) yield* single.confirmMessage(singleEpoch, id)
            }
          }
          const a = yield* batched.load
          const b = yield* single.load
          expect(viewState(a.state)).toEqual(viewState(b.state))
        }).pipe(withSeed("work queue", "batch equivalence", seed)))
    }

    it.scoped("empty batches do nothing", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        expect(yield* queue.storeBatch(epoch, [])).toEqual([])
        yield* queue.acceptBatch(epoch, [])
        yield* queue.confirmBatch(epoch, [])
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
      yield* queue.storeBatch(epoch, [{ messageId: "old", payload: bytes("o") }, { messageId: "done", payload: bytes("d") }])
      yield* queue.accept(epoch, "done")
      yield* queue.confirmMessage(epoch, "done")
      const results = yield* storeAccepted(epoch, [
        { messageId: "a", payload: bytes("a") },
        { messageId: "old", payload: bytes("other") },
        { messageId: "done", payload: bytes("again") },
        { messageId: "a", payload: bytes("again") }
      ])
      const view = (entry: EntryView, alreadyStored: boolean, accepted: boolean, confirmed: boolean) => ({
        entry,
        alreadyStored,
        accepted,
        confirmed
      })
      const expected = [
        view(job(3, "a", "a"), false, false, false),
        // stored before, not accepted: its first write, accepted by this call
        view(job(1, "old", "o"), true, false, false),
        // confirmed (its payload may be compacted): stays confirmed
        view(job(2, "done", "d"), true, true, true),
        // accepted earlier in the same call, as store then accept one by one would say
        view(job(3, "a", "a"), true, true, false)
      ]
      expect(allowCompacted(results.map(viewResult), expected)).toEqual(expected)
      const { state } = yield* queue.load
      expect(viewState(state)).toEqual({ currentSeq: 3, pending: [job(1, "old", "o"), job(3, "a", "a")] })
    }))

  for (const seed of seeds) {
    it.scoped(`storeAccepted equals store then accept, one job after the other (seed ${seed})`, () =>
      Effect.gen(function*() {
        const fused = yield* fresh
        const single = yield* fresh
        const storeAccepted = fused.storeAccepted
        if (storeAccepted === undefined) return
        const { epoch: fusedEpoch } = yield* fused.load
        const { epoch: singleEpoch } = yield* single.load
        const random = SeededRandom.make(seed)
        const stored: Array<string> = []
        const accepted = new Set<string>()
        for (let round = 0; round < 16; round++) {
          const roll = random.next()
          const pool = [...idPool, ...stored]
          const pick = () => pool[random.int(0, pool.length - 1)]
          if (roll < 0.2) {
            const request = { messageId: pick(), payload: randomPayload(random) }
            const a = yield* fused.store(fusedEpoch, request)
            expect(viewResult(a), `round ${round}`).toEqual(viewResult(yield* single.store(singleEpoch, request)))
            if (!stored.includes(request.messageId)) stored.push(request.messageId)
          } else if (roll < 0.35 && accepted.size > 0) {
            const ids = [...accepted].filter(() => random.chance(0.5))
            yield* fused.confirmBatch(fusedEpoch, ids)
            for (const id of ids) yield* single.confirmMessage(singleEpoch, id)
          } else {
            const requests = Array.from({ length: random.int(1, 8) }, () => ({ messageId: pick(), payload: randomPayload(random) }))
            const a = yield* storeAccepted(fusedEpoch, requests)
            const b: Array<WorkStoreResult> = []
            for (const request of requests) {
              b.push(yield* single.store(singleEpoch, request))
              yield* single.accept(singleEpoch, request.messageId)
            }
            expect(a.map(viewResult), `round ${round}`).toEqual(b.map(viewResult))
            for (const { messageId } of requests) {
              if (!stored.includes(messageId)) stored.push(messageId)
              accepted.add(messageId)
            }
          }
        }
        expect(viewState((yield* fused.load).state)).toEqual(viewState((yield* single.load).state))
      }).pipe(withSeed("work queue", "storeAccepted equivalence", seed)))
  }
}

const storeAcceptedRefusalTests = ({ fresh }: Suite) => {
  it.scoped("an empty id or a stale epoch fails the whole call and writes nothing", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const storeAccepted = queue.storeAccepted
      if (storeAccepted === undefined) return
      const { epoch: old } = yield* queue.load
      yield* queue.store(old, { messageId: "stored", payload: bytes("s") })
      const { epoch, state: before } = yield* queue.load
      const fresh1 = { messageId: "new", payload: bytes("n") }
      const stored = { messageId: "stored", payload: bytes("s") }
      expect(yield* failureTag(storeAccepted(epoch, [fresh1, stored, { messageId: "", payload: bytes("e") }])))
        .toBe("QueueConflict")
      expect(yield* failureTag(storeAccepted(old, [fresh1, stored]))).toBe("QueueFenced")
      const { epoch: latest, state: after } = yield* queue.load
      expect(viewState(after)).toEqual(viewState(before))
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
      for (const result of shared) expect(result.entry).toEqual(first[0].entry)
      const { state } = yield* queue.load
      expect(state.currentSeq).toBe(9)
      expect(state.pending.map((entry) => entry.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9])
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
            const step = randomStep(random, queue.storeAccepted !== undefined)
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
        }).pipe(withSeed("work queue", "model", seed)))
    }
  })

/** `storeAccepted`, or where the queue lacks it `storeBatch` then `acceptBatch`. */
const storeAndAccept = (queue: DurableWorkQueueService, epoch: QueueEpoch, requests: ReadonlyArray<StoreRequest>) =>
  queue.storeAccepted === undefined
    ? Effect.flatMap(queue.storeBatch(epoch, requests), (results) =>
      Effect.as(queue.acceptBatch(epoch, requests.map((request) => request.messageId)), results))
    : queue.storeAccepted(epoch, requests)

const failureTests = ({ fresh }: Suite) =>
  describe("failed attempts", () => {
    const failure = (messageId: string, attempts: number, notBefore: number): FailureRequest => ({
      messageId,
      attempts,
      lastError: `failed ${attempts}`,
      notBefore
    })

    it.scoped("recordFailure keeps the attempts and retry time of an accepted job; load returns them", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* queue.storeBatch(epoch, ["a", "b"].map((id) => ({ messageId: id, payload: bytes(id) })))
        yield* queue.acceptBatch(epoch, ["a", "b"])
        yield* queue.recordFailure(epoch, failure("a", 1, 1_000))
        yield* queue.recordFailure(epoch, failure("a", 2, 3_000))
        const { epoch: next, state } = yield* queue.load
        expect(viewState(state)).toEqual({
          currentSeq: 2,
          pending: [{ ...job(1, "a", "a"), attempts: 2, notBefore: 3_000 }, job(2, "b", "b")]
        })
        // a resubmission answers with the job as it is now
        expect(viewResult(yield* queue.store(next, { messageId: "a", payload: bytes("x") })).entry)
          .toEqual({ ...job(1, "a", "a"), attempts: 2, notBefore: 3_000 })
      }))

    it.scoped("recordFailure of an unknown or never accepted job is QueueConflict; a finished job ignores it", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* queue.storeBatch(epoch, ["a", "b", "c"].map((id) => ({ messageId: id, payload: bytes(id) })))
        yield* queue.acceptBatch(epoch, ["b", "c"])
        expect(yield* failureTag(queue.recordFailure(epoch, failure("nope", 1, 1)))).toBe("QueueConflict")
        expect(yield* failureTag(queue.recordFailure(epoch, failure("a", 1, 1)))).toBe("QueueConflict")
        expect(yield* failureTag(queue.recordFailure(epoch, failure("b", 0, 1)))).toBe("QueueConflict")
        yield* queue.confirmMessage(epoch, "b")
        yield* queue.deadLetter(epoch, { messageId: "c", attempts: 3, lastError: "boom", at: 5 })
        yield* queue.recordFailure(epoch, failure("b", 1, 1))
        yield* queue.recordFailure(epoch, failure("c", 9, 1))
        expect((yield* queue.deadLetters({ limit: 10 })).map((letter) => [letter.messageId, letter.attempts])).toEqual([["c", 3]])
        expect((yield* queue.load).state.pending).toEqual([])
      }))

    it.scoped("recordFailureBatch beside finished jobs writes the accepted ones; one never accepted job fails the whole batch", () =>
      Effect.gen(function*() {
        const queue = yield* fresh
        const { epoch } = yield* queue.load
        yield* storeAndAccept(queue, epoch, ["a", "b", "c"].map((id) => ({ messageId: id, payload: bytes(id) })))
        yield* queue.store(epoch, { messageId: "d", payload: bytes("d") })
        yield* queue.confirmMessage(epoch, "b")
        yield* queue.deadLetter(epoch, { messageId: "c", attempts: 3, lastError: "boom", at: 5 })
        expect(yield* failureTag(queue.recordFailureBatch(epoch, [failure("a", 1, 10), failure("d", 1, 10)]))).toBe("QueueConflict")
        const { epoch: next, state } = yield* queue.load
        expect(viewState(state).pending.map((entry) => [entry.messageId, entry.attempts ?? 0])).toEqual([["a", 0]])
        yield* queue.recordFailureBatch(next, [failure("b", 1, 10), failure("a", 1, 10), failure("c", 1, 10), failure("a", 2, 20)])
        expect(viewState((yield* queue.load).state)).toEqual({ currentSeq: 4, pending: [{ ...job(1, "a", "a"), attempts: 2, notBefore: 20 }] })
        expect((yield* queue.deadLetters({ limit: 10 })).map((letter) => [letter.messageId, letter.attempts])).toEqual([["c", 3]])
      }))

    it.scoped("recordFailureBatch equals one-by-one calls; a failed batch writes nothing; a stale epoch is fenced", () =>
      Effect.gen(function*() {
        const batched = yield* fresh
        const single = yield* fresh
        const failures = [failure("a", 1, 10), failure("b", 1, 20), failure("a", 2, 30)]
        for (const queue of [batched, single]) {
          const { epoch } = yield* queue.load
          yield* storeAndAccept(queue, epoch, ["a", "b", "c"].map((id) => ({ messageId: id, payload: bytes(id) })))
        }
        const { epoch: batchEpoch } = yield* batched.load
        const { epoch: singleEpoch } = yield* single.load
        expect(yield* failureTag(batched.recordFailureBatch(batchEpoch, [failure("c", 1, 1), failure("nope", 1, 1)])))
          .toBe("QueueConflict")
        yield* batched.recordFailureBatch(batchEpoch, failures)
        for (const request of failures) yield* single.recordFailure(singleEpoch, request)
        yield* batched.recordFailureBatch(batchEpoch, [])
        const a = yield* batched.load
        expect(viewState(a.state)).toEqual(viewState((yield* single.load).state))
        expect(viewState(a.state).pending.map((entry) => [entry.messageId, entry.attempts ?? 0])).toEqual([["a", 2], ["b", 1], ["c", 0]])
        expect(yield* failureTag(batched.recordFailure(batchEpoch, failure("c", 1, 1)))).toBe("QueueFenced")
      }))
  })

/** The shared backlog, dead-letter and inspection cases, through a work queue adapter. */
const adapter = (fresh: Fresh): OperatorAdapter<DurableWorkQueueService> => {
  const adapted = (result: WorkStoreResult): AdaptedResult => ({
    messageId: result.entry.messageId,
    seq: result.entry.seq,
    payload: result.entry.payload,
    alreadyStored: result.alreadyStored,
    accepted: result.accepted,
    deadLettered: result.deadLettered === true
  })
  return {
    kind: "work queue",
    fresh,
    load: (queue) => Effect.map(queue.load, ({ epoch, state }) => ({ epoch, loaded: state.pending })),
    store: (queue, epoch, request) => Effect.map(queue.store(epoch, request), adapted),
    storeAccepted: (queue, epoch, requests) => Effect.map(storeAndAccept(queue, epoch, requests), (results) => results.map(adapted)),
    accept: (queue, epoch, messageId) => queue.accept(epoch, messageId),
    confirm: (queue, epoch, message) => queue.confirmMessage(epoch, message.messageId),
    deadLetter: (queue, epoch, request) => queue.deadLetter(epoch, request)
  }
}

/** Registers the conformance tests of a `DurableWorkQueue` implementation. */
export const workQueueConformance = (
  name: string,
  layer: Layer.Layer<DurableWorkQueue, unknown>,
  options?: ConformanceOptions
): void => {
  const fresh: Fresh = Effect.map(Layer.build(layer), (context) => Context.get(context, DurableWorkQueue))
  const suite: Suite = { fresh, seeds: seedsFrom(options), steps: options?.steps ?? 60 }

  describe(`DurableWorkQueue conformance: ${name}`, () => {
    storeTests(suite)
    acceptConfirmTests(suite)
    fencingTests(suite)
    batchTests(suite)
    storeAcceptedTests(suite)
    modelTests(suite)
    failureTests(suite)
    operatorTests(adapter(fresh))
  })
}
