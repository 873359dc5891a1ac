/**
 * The conformance cases both queue kinds share: the backlog (`enqueue`, `backlog`, stores from
 * the backlog, the signal), dead letters (`deadLetter`, listing, requeue, discard) and read-only
 * inspection. Each suite runs them through an adapter that hides how its kind stores, accepts and
 * confirms.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Deferred, Duration, Effect, Either, Stream } from "effect"
import type { Scope } from "effect"
import type {
  DeadLetterRequest,
  QueueEpoch,
  QueueOperatorService,
  StoredEntry,
  StoreRequest
} from "../DurableProducerQueue.js"
import type { DurableQueueError } from "../QueueErrors.js"
import { bytes, failureTag, hex, viewEntry, warmUp } from "./ConformanceSupport.js"
import { chunkMessageId } from "../../Protocol/ChunkId.js"

/** What a store answered, the same for both kinds. */
export interface AdaptedResult {
  readonly messageId: string
  readonly seq: number
  readonly payload: Uint8Array
  readonly alreadyStored: boolean
  readonly accepted: boolean
  readonly deadLettered: boolean
}

/** How a queue kind does what the shared cases need. */
export interface OperatorAdapter<Q extends QueueOperatorService> {
  readonly kind: string
  /** A fresh, empty queue. */
  readonly fresh: Effect.Effect<Q, unknown, Scope.Scope>
  /** A new epoch and what it loads (accepted, unfinished entries in seq order). */
  readonly load: (queue: Q) => Effect.Effect<{ readonly epoch: QueueEpoch; readonly loaded: ReadonlyArray<StoredEntry> }, unknown>
  readonly store: (queue: Q, epoch: QueueEpoch, request: StoreRequest) => Effect.Effect<AdaptedResult, DurableQueueError>
  /** Stores and accepts, one transaction when the queue can. */
  readonly storeAccepted: (
    queue: Q,
    epoch: QueueEpoch,
    requests: ReadonlyArray<StoreRequest>
  ) => Effect.Effect<ReadonlyArray<AdaptedResult>, DurableQueueError>
  readonly accept: (queue: Q, epoch: QueueEpoch, messageId: string) => Effect.Effect<void, DurableQueueError>
  /** Confirms one accepted message (its seq for point-to-point, its id for work). */
  readonly confirm: (queue: Q, epoch: QueueEpoch, message: { readonly messageId: string; readonly seq: number }) => Effect.Effect<void, DurableQueueError>
  readonly deadLetter: (queue: Q, epoch: QueueEpoch, request: DeadLetterRequest) => Effect.Effect<void, DurableQueueError>
}

const loadedIds = (loaded: ReadonlyArray<StoredEntry>) => loaded.map((entry) => entry.messageId)

const enqueueOne = (queue: QueueOperatorService, messageId: string, payload: string, extra: { at?: number; trace?: string } = {}) =>
  Effect.map(queue.enqueue([{ messageId, payload: bytes(payload), ...extra }]), (results) => results[0])

const viewBacklog = (queue: QueueOperatorService, limit = 100) =>
  Effect.map(queue.backlog(limit), (entries) =>
    entries.map((entry) => ({ messageId: entry.messageId, payload: hex(entry.payload), enqueuedAt: entry.enqueuedAt, trace: entry.trace ?? null })))

const backlogOrderTests = <Q extends QueueOperatorService>(adapter: OperatorAdapter<Q>) => {
  it.scoped("enqueue adds messages in order; backlog reads the oldest first, at most limit", () =>
    Effect.gen(function*() {
      const queue = yield* adapter.fresh
      const now = yield* Clock.currentTimeMillis
      const results = yield* queue.enqueue([
        { messageId: "a", payload: bytes("a"), at: 1_000, trace: "00-trace-a" },
        { messageId: "b", payload: bytes("b") }
      ])
      expect(results).toEqual([{ messageId: "a", alreadyStored: false }, { messageId: "b", alreadyStored: false }])
      yield* enqueueOne(queue, "c", "c", { at: 3_000 })
      expect(yield* viewBacklog(queue)).toEqual([
        { messageId: "a", payload: hex(bytes("a")), enqueuedAt: 1_000, trace: "00-trace-a" },
        { messageId: "b", payload: hex(bytes("b")), enqueuedAt: now, trace: null },
        { messageId: "c", payload: hex(bytes("c")), enqueuedAt: 3_000, trace: null }
      ])
      expect((yield* queue.backlog(2)).map((entry) => entry.messageId)).toEqual(["a", "b"])
      expect(yield* queue.backlog(0)).toEqual([])
    }))

  it.scoped("the first write wins across the backlog and the stored entries", () =>
    Effect.gen(function*() {
      const queue = yield* adapter.fresh
      const { epoch } = yield* adapter.load(queue)
      yield* adapter.store(queue, epoch, { messageId: "stored", payload: bytes("s") })
      const results = yield* queue.enqueue([
        { messageId: "new", payload: bytes("first") },
        { messageId: "stored", payload: bytes("x") },
        { messageId: "new", payload: bytes("second") }
      ])
      expect(results.map((result) => result.alreadyStored)).toEqual([false, true, true])
      expect((yield* enqueueOne(queue, "new", "third")).alreadyStored).toBe(true)
      expect(yield* viewBacklog(queue)).toEqual([
        { messageId: "new", payload: hex(bytes("first")), enqueuedAt: yield* Clock.currentTimeMillis, trace: null }
      ])
    }))

  it.scoped("a blank or reserved id is QueueConflict and the whole batch writes nothing", () =>
    Effect.gen(function*() {
      const queue = yield* adapter.fresh
      const good = { messageId: "good", payload: bytes("g") }
      expect(yield* failureTag(queue.enqueue([good, { messageId: "", payload: bytes("e") }]))).toBe("QueueConflict")
      expect(yield* failureTag(queue.enqueue([good, { messageId: "  ", payload: bytes("e") }]))).toBe("QueueConflict")
      expect(yield* failureTag(queue.enqueue([good, { messageId: chunkMessageId("x", 0, 2), payload: bytes("e") }])))
        .toBe("QueueConflict")
      expect(yield* queue.backlog(10)).toEqual([])
      expect(yield* queue.enqueue([])).toEqual([])
    }))

  it.scoped("a store from the backlog takes the message out, keeping its send time and trace", () =>
    Effect.gen(function*() {
      const queue = yield* adapter.fresh
      yield* queue.enqueue([
        { messageId: "a", payload: bytes("a"), at: 5, trace: "t-a" },
        { messageId: "b", payload: bytes("b"), at: 6 }
      ])
      const { epoch } = yield* adapter.load(queue)
      const [a] = yield* queue.backlog(1)
      const results = yield* adapter.storeAccepted(queue, epoch, [
        { messageId: a.messageId, payload: a.payload, fromBacklog: true, at: a.enqueuedAt, trace: a.trace }
      ])
      expect(results.map((result) => [result.messageId, result.seq, result.alreadyStored])).toEqual([["a", 1, false]])
      expect((yield* queue.backlog(10)).map((entry) => entry.messageId)).toEqual(["b"])
      const { loaded } = yield* adapter.load(queue)
      expect(loaded.map(viewEntry)).toEqual([
        { seq: 1, messageId: "a", payload: hex(bytes("a")), chunk: null, at: 5, trace: "t-a" }
      ])
    }))
}

const backlogRaceTests = <Q extends QueueOperatorService>(adapter: OperatorAdapter<Q>) => {
  it.scoped("an id stored meanwhile is never read from the backlog; its store from the backlog answers alreadyStored", () =>
    Effect.gen(function*() {
      const queue = yield* adapter.fresh
      yield* queue.enqueue([{ messageId: "x", payload: bytes("enqueued") }, { messageId: "y", payload: bytes("y") }])
      const { epoch } = yield* adapter.load(queue)
      // a store that did not come from the backlog wins the id
      yield* adapter.storeAccepted(queue, epoch, [{ messageId: "x", payload: bytes("sent") }])
      expect((yield* queue.backlog(10)).map((entry) => entry.messageId)).toEqual(["y"])
      const [again] = yield* adapter.storeAccepted(queue, epoch, [{ messageId: "x", payload: bytes("enqueued"), fromBacklog: true }])
      expect([again.alreadyStored, hex(again.payload)]).toEqual([true, hex(bytes("sent"))])
      expect((yield* adapter.load(queue)).loaded.map((entry) => [entry.messageId, hex(entry.payload)])).toEqual([
        ["x", hex(bytes("sent"))]
      ])
    }))

  it.scoped("concurrent enqueues: distinct ids all land, one id lands once", () =>
    Effect.gen(function*() {
      const queue = yield* adapter.fresh
      yield* warmUp(queue.backlog(1))
      const distinct = yield* Effect.all(
        Array.from({ length: 20 }, (_, i) => enqueueOne(queue, `m${i}`, `${i}`)),
        { concurrency: "unbounded" }
      )
      expect(distinct.every((result) => !result.alreadyStored)).toBe(true)
      const same = yield* Effect.all(
        Array.from({ length: 10 }, (_, i) => enqueueOne(queue, "same", `${i}`)),
        { concurrency: "unbounded" }
      )
      expect(same.filter((result) => !result.alreadyStored)).toHaveLength(1)
      const ids = (yield* queue.backlog(100)).map((entry) => entry.messageId)
      expect(new Set(ids)).toEqual(new Set([...Array.from({ length: 20 }, (_, i) => `m${i}`), "same"]))
      expect(ids).toHaveLength(21)
    }))

  it.scopedLive("a backlog signal (where the queue has one) follows an enqueue", () =>
    Effect.gen(function*() {
      const queue = yield* adapter.fresh
      const signal = queue.backlogSignal
      if (signal === undefined) return
      const heard = yield* Deferred.make<void>()
      yield* Effect.forkScoped(Effect.zipRight(Stream.runHead(signal), Deferred.succeed(heard, undefined)))
      // a subscription may take a moment (PostgreSQL's LISTEN): enqueue until it hears one
      let round = 0
      while (!(yield* Deferred.isDone(heard)) && round < 100) {
        yield* enqueueOne(queue, `s${round++}`, "s")
        yield* Effect.sleep(Duration.millis(50))
      }
      expect(yield* Deferred.isDone(heard)).toBe(true)
    }))
}

const backlogTests = <Q extends QueueOperatorService>(adapter: OperatorAdapter<Q>) =>
  describe("backlog", () => {
    backlogOrderTests(adapter)
    backlogRaceTests(adapter)
  })

/** Stores and accepts `ids`, then dead-letters `dead` with attempts 3 at time 77. */
const withDeadLetter = <Q extends QueueOperatorService>(adapter: OperatorAdapter<Q>, queue: Q, ids: ReadonlyArray<string>, dead: string) =>
  Effect.gen(function*() {
    const { epoch } = yield* adapter.load(queue)
    const results = yield* adapter.storeAccepted(queue, epoch, ids.map((id) => ({ messageId: id, payload: bytes(id), at: 10, trace: `t-${id}` })))
    yield* adapter.deadLetter(queue, epoch, { messageId: dead, attempts: 3, lastError: "boom", at: 77 })
    return { epoch, results }
  })

const deadLetterTests = <Q extends QueueOperatorService>(adapter: OperatorAdapter<Q>) =>
  describe("dead letters", () => {
    it.scoped("a dead letter is listed with its payload, attempts and error, never loaded, and survives restarts", () =>
      Effect.gen(function*() {
        const queue = yield* adapter.fresh
        const { epoch } = yield* withDeadLetter(adapter, queue, ["a", "b", "c"], "b")
        // repeating it does nothing
        yield* adapter.deadLetter(queue, epoch, { messageId: "b", attempts: 9, lastError: "again", at: 99 })
        const expected = { messageId: "b", seq: 2, payload: hex(bytes("b")), attempts: 3, lastError: "boom", deadAt: 77 }
        const view = (letters: ReadonlyArray<{ readonly payload: Uint8Array }>) => letters.map((letter) => ({ ...letter, payload: hex(letter.payload) }))
        expect(view(yield* queue.deadLetters({ limit: 10 }))).toEqual([{ ...expected, at: 10, trace: "t-b" }])
        const { loaded } = yield* adapter.load(queue)
        expect(loadedIds(loaded)).toEqual(["a", "c"])
        expect(view(yield* queue.deadLetters({ limit: 10 }))).toEqual([{ ...expected, at: 10, trace: "t-b" }])
      }))

    it.scoped("deadLetter of an unknown or confirmed message is QueueConflict; a stale epoch is fenced", () =>
      Effect.gen(function*() {
        const queue = yield* adapter.fresh
        const { epoch, results } = yield* withDeadLetter(adapter, queue, ["a", "b"], "b")
        const request = (messageId: string) => ({ messageId, attempts: 1, lastError: "e", at: 1 })
        expect(yield* failureTag(adapter.deadLetter(queue, epoch, request("nope")))).toBe("QueueConflict")
        yield* adapter.confirm(queue, epoch, results[0])
        expect(yield* failureTag(adapter.deadLetter(queue, epoch, request("a")))).toBe("QueueConflict")
        yield* adapter.load(queue)
        expect(yield* failureTag(adapter.deadLetter(queue, epoch, request("b")))).toBe("QueueFenced")
      }))

    it.scoped("a resubmission of a dead letter answers alreadyStored, deadLettered; accepting it does nothing", () =>
      Effect.gen(function*() {
        const queue = yield* adapter.fresh
        const { epoch } = yield* withDeadLetter(adapter, queue, ["a"], "a")
        const [again] = yield* adapter.storeAccepted(queue, epoch, [{ messageId: "a", payload: bytes("other") }])
        expect([again.alreadyStored, again.accepted, again.deadLettered, hex(again.payload)]).toEqual([true, true, true, hex(bytes("a"))])
        yield* adapter.accept(queue, epoch, "a")
        expect(loadedIds((yield* adapter.load(queue)).loaded)).toEqual([])
        expect((yield* queue.deadLetters({ limit: 10 })).map((letter) => letter.messageId)).toEqual(["a"])
      }))

    it.scoped("deadLetters pages in seq order after afterSeq, at most limit", () =>
      Effect.gen(function*() {
        const queue = yield* adapter.fresh
        const ids = ["a", "b", "c", "d", "e"]
        const { epoch } = yield* withDeadLetter(adapter, queue, ids, "a")
        for (const id of ["e", "c", "b"]) yield* adapter.deadLetter(queue, epoch, { messageId: id, attempts: 1, lastError: id, at: 1 })
        const page = (limit: number, afterSeq?: number) =>
          Effect.map(queue.deadLetters({ limit, afterSeq }), (letters) => letters.map((letter) => [letter.seq, letter.messageId]))
        expect(yield* page(2)).toEqual([[1, "a"], [2, "b"]])
        expect(yield* page(2, 2)).toEqual([[3, "c"], [5, "e"]])
        expect(yield* page(2, 5)).toEqual([])
      }))

    it.scoped("requeue moves a dead letter to the backlog; stored from there and confirmed, it is confirmed once", () =>
      Effect.gen(function*() {
        const queue = yield* adapter.fresh
        yield* withDeadLetter(adapter, queue, ["a", "b"], "a")
        expect(yield* queue.requeueDeadLetter("nope")).toBe(false)
        expect(yield* queue.requeueDeadLetter("b")).toBe(false)
        expect(yield* queue.requeueDeadLetter("a")).toBe(true)
        expect(yield* queue.requeueDeadLetter("a")).toBe(false)
        expect(yield* queue.deadLetters({ limit: 10 })).toEqual([])
        expect(yield* viewBacklog(queue)).toEqual([{ messageId: "a", payload: hex(bytes("a")), enqueuedAt: 10, trace: "t-a" }])
        // a restart in between: the backlog and the dead letter's removal are durable
        const { epoch } = yield* adapter.load(queue)
        const [entry] = yield* queue.backlog(1)
        const [stored] = yield* adapter.storeAccepted(queue, epoch, [
          { messageId: entry.messageId, payload: entry.payload, fromBacklog: true, at: entry.enqueuedAt, trace: entry.trace }
        ])
        expect([stored.alreadyStored, stored.seq]).toEqual([false, 3])
        expect(yield* queue.backlog(10)).toEqual([])
        const { epoch: next, loaded } = yield* adapter.load(queue)
        expect(loaded.map((e) => [e.messageId, e.seq])).toEqual([["b", 2], ["a", 3]])
        yield* adapter.confirm(queue, next, { messageId: "b", seq: 2 })
        yield* adapter.confirm(queue, next, stored)
        expect(loadedIds((yield* adapter.load(queue)).loaded)).toEqual([])
        const inspected = yield* queue.inspect({ limit: 10 })
        expect(inspected.entries.map((e) => [e.messageId, e.seq, e.state])).toEqual([["b", 2, "Confirmed"], ["a", 3, "Confirmed"]])
        expect((yield* enqueueOne(queue, "a", "again")).alreadyStored).toBe(true)
      }))

    it.scoped("discard drops a dead letter for good; its id stays owned", () =>
      Effect.gen(function*() {
        const queue = yield* adapter.fresh
        yield* withDeadLetter(adapter, queue, ["a", "b"], "a")
        expect(yield* queue.discardDeadLetter("nope")).toBe(false)
        expect(yield* queue.discardDeadLetter("b")).toBe(false)
        expect(yield* queue.discardDeadLetter("a")).toBe(true)
        expect(yield* queue.discardDeadLetter("a")).toBe(false)
        expect(yield* queue.deadLetters({ limit: 10 })).toEqual([])
        expect(yield* queue.requeueDeadLetter("a")).toBe(false)
        const { epoch, loaded } = yield* adapter.load(queue)
        expect(loadedIds(loaded)).toEqual(["b"])
        const [again] = yield* adapter.storeAccepted(queue, epoch, [{ messageId: "a", payload: bytes("x") }])
        expect([again.alreadyStored, again.accepted, again.deadLettered]).toEqual([true, true, false])
        expect((yield* enqueueOne(queue, "a", "x")).alreadyStored).toBe(true)
        expect(yield* queue.backlog(10)).toEqual([])
      }))
  })

const inspectionTests = <Q extends QueueOperatorService>(adapter: OperatorAdapter<Q>) =>
  describe("inspection", () => {
    /** backlog: q (at 50), r (at 60); stored: s; accepted: a (at 20), c (at 40); confirmed: b; dead: d. */
    const populate = (queue: Q) =>
      Effect.gen(function*() {
        const { epoch } = yield* adapter.load(queue)
        const stored = yield* adapter.storeAccepted(
          queue,
          epoch,
          ["a", "b", "c", "d"].map((id, i) => ({ messageId: id, payload: bytes(id), at: 20 + 10 * i }))
        )
        yield* adapter.store(queue, epoch, { messageId: "s", payload: bytes("s"), at: 5 })
        yield* adapter.deadLetter(queue, epoch, { messageId: "d", attempts: 2, lastError: "boom", at: 90 })
        yield* adapter.confirm(queue, epoch, stored[0])
        yield* adapter.confirm(queue, epoch, stored[1])
        yield* adapter.storeAccepted(queue, epoch, [{ messageId: "a2", payload: bytes("a2"), at: 100 }])
        yield* queue.enqueue([{ messageId: "q", payload: bytes("q"), at: 50 }, { messageId: "r", payload: bytes("r"), at: 60 }])
        return epoch
      })

    it.scoped("counts every state, the oldest waiting message, and a page of entries", () =>
      Effect.gen(function*() {
        const queue = yield* adapter.fresh
        yield* populate(queue)
        const inspection = yield* queue.inspect({ limit: 100 })
        expect({ ...inspection, entries: [] }).toEqual({
          backlog: 2,
          stored: 1,
          unconfirmed: 2,
          deadLettered: 1,
          oldestAt: 40,
          entries: []
        })
        expect(inspection.entries.map((e) => [e.messageId, e.seq ?? null, e.state, e.attempts, e.at ?? null])).toEqual([
          ["a", 1, "Confirmed", 0, 20],
          ["b", 2, "Confirmed", 0, 30],
          ["c", 3, "Accepted", 0, 40],
          ["d", 4, "DeadLettered", 2, 50],
          ["s", 5, "Stored", 0, 5],
          ["a2", 6, "Accepted", 0, 100],
          ["q", null, "Backlog", 0, 50],
          ["r", null, "Backlog", 0, 60]
        ])
        const payloads = inspection.entries.filter((e) => e.state !== "Confirmed").map((e) => hex(e.payload))
        expect(payloads).toEqual(["c", "d", "s", "a2", "q", "r"].map((id) => hex(bytes(id))))
      }))

    it.scoped("filters by state, pages after a seq, and bounds the page by limit", () =>
      Effect.gen(function*() {
        const queue = yield* adapter.fresh
        yield* populate(queue)
        const ids = (options: Parameters<Q["inspect"]>[0]) =>
          Effect.map(queue.inspect(options), (inspection) => inspection.entries.map((e) => e.messageId))
        expect(yield* ids({ limit: 10, states: ["Accepted", "Stored"] })).toEqual(["c", "s", "a2"])
        expect(yield* ids({ limit: 10, states: ["DeadLettered"] })).toEqual(["d"])
        expect(yield* ids({ limit: 10, states: ["Backlog"] })).toEqual(["q", "r"])
        expect(yield* ids({ limit: 2, states: ["Accepted", "Backlog"] })).toEqual(["c", "a2"])
        expect(yield* ids({ limit: 3, afterSeq: 3 })).toEqual(["d", "s", "a2"])
        expect(yield* ids({ limit: 10, afterSeq: 5, states: ["Accepted", "Backlog"] })).toEqual(["a2", "q", "r"])
        const counts = yield* queue.inspect({ limit: 0 })
        expect([counts.entries.length, counts.backlog, counts.unconfirmed]).toEqual([0, 2, 2])
      }))

    it.scoped("an empty queue inspects empty; inspecting changes nothing and fences nobody", () =>
      Effect.gen(function*() {
        const queue = yield* adapter.fresh
        expect(yield* queue.inspect({ limit: 10 })).toEqual({
          backlog: 0,
          stored: 0,
          unconfirmed: 0,
          deadLettered: 0,
          oldestAt: undefined,
          entries: []
        })
        const epoch = yield* populate(queue)
        const before = yield* queue.inspect({ limit: 100 })
        expect(yield* queue.inspect({ limit: 100 })).toEqual(before)
        // the writer's epoch still holds
        yield* adapter.storeAccepted(queue, epoch, [{ messageId: "later", payload: bytes("l") }])
        expect(Either.isRight(yield* Effect.either(adapter.accept(queue, epoch, "s")))).toBe(true)
      }))
  })

/** Registers the shared cases for one queue kind. */
export const operatorTests = <Q extends QueueOperatorService>(adapter: OperatorAdapter<Q>): void => {
  backlogTests(adapter)
  deadLetterTests(adapter)
  inspectionTests(adapter)
}
