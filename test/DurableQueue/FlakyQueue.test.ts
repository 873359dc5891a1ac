import { describe, expect, it } from "@effect/vitest"
import { Effect, Schedule } from "effect"
import type { DurableProducerQueueService } from "../../src/DurableQueue/DurableProducerQueue.js"
import { FlakyFailure, flakyProducerQueue, flakyWorkQueue } from "../../src/DurableQueue/FlakyQueue.js"
import type { FlakyOptions } from "../../src/DurableQueue/FlakyQueue.js"
import * as MemoryProducerQueue from "../../src/DurableQueue/MemoryProducerQueue.js"
import * as MemoryWorkQueue from "../../src/DurableQueue/MemoryWorkQueue.js"
import type { ReliableConfigError } from "../../src/Protocol/Errors.js"

const bytes = (text: string) => new TextEncoder().encode(text)

/** The fault of each of `count` stores through a flaky queue: "ok", "before" or "after". */
const faultPattern = (seed: number, failureRate: number, count: number) =>
  Effect.gen(function*() {
    const inner = yield* MemoryProducerQueue.makeMemory
    const queue = yield* flakyProducerQueue(inner, { seed, failureRate, failLoad: false })
    const { epoch } = yield* queue.load
    const pattern: Array<string> = []
    for (let i = 0; i < count; i++) {
      const result = yield* Effect.either(queue.store(epoch, { messageId: `m${i}`, payload: bytes(`${i}`) }))
      if (result._tag === "Right") {
        pattern.push("ok")
        continue
      }
      expect(result.left._tag).toBe("QueueBackendError")
      // whether the store happened: a retry answers alreadyStored exactly when it did
      const retry = yield* inner.store(epoch, { messageId: `m${i}`, payload: bytes(`${i}`) })
      pattern.push(retry.alreadyStored ? "after" : "before")
    }
    return pattern
  })

describe("FlakyQueue", () => {
  it.effect("a rate of 0 never fails; a rate of 1 always fails, before and after the operation", () =>
    Effect.gen(function*() {
      expect(new Set(yield* faultPattern(7, 0, 50))).toEqual(new Set(["ok"]))
      const always = yield* faultPattern(7, 1, 200)
      expect(always).not.toContain("ok")
      expect(always.filter((fault) => fault === "after").length).toBeGreaterThan(60)
      expect(always.filter((fault) => fault === "before").length).toBeGreaterThan(60)
    }))

  it.effect("the same seed gives the same failures; another seed different ones", () =>
    Effect.gen(function*() {
      const first = yield* faultPattern(42, 0.3, 100)
      expect(yield* faultPattern(42, 0.3, 100)).toEqual(first)
      expect(yield* faultPattern(43, 0.3, 100)).not.toEqual(first)
      const failures = first.filter((fault) => fault !== "ok").length
      expect(failures).toBeGreaterThan(10)
      expect(failures).toBeLessThan(50)
    }))

  it.effect("retrying every operation over a flaky producer queue ends in the fault-free state", () =>
    Effect.gen(function*() {
      const seed = 2024
      const run = (queue: DurableProducerQueueService) =>
        Effect.gen(function*() {
          const retry = <A, E extends { readonly _tag: string }>(effect: Effect.Effect<A, E>) =>
            Effect.retry(effect, { while: (error) => error._tag === "QueueBackendError", times: 50 })
          const { epoch } = yield* retry(queue.load)
          for (let i = 0; i < 30; i++) {
            yield* retry(queue.store(epoch, { messageId: `m${i}`, payload: bytes(`${i}`) }))
            yield* retry(queue.accept(epoch, `m${i}`))
            if (i % 5 === 4) yield* retry(queue.confirm(epoch, i - 2))
          }
          yield* retry(queue.storeChunked(epoch, "big", [bytes("1"), bytes("2")]))
          yield* retry(queue.acceptBatch(epoch, ["big"]))
        })
      const reliable = yield* MemoryProducerQueue.makeMemory
      const inner = yield* MemoryProducerQueue.makeMemory
      yield* run(reliable)
      yield* run(yield* flakyProducerQueue(inner, { seed, failureRate: 0.3, failLoad: false }))
      const expected = (yield* reliable.load).state
      const actual = (yield* inner.load).state
      expect(actual).toEqual(expected)
    }).pipe(Effect.tapErrorCause(() => Effect.sync(() => console.error("flaky retry run failed with seed 2024")))))

  it.effect("a flaky work queue fails with QueueBackendError and keeps the inner queue consistent", () =>
    Effect.gen(function*() {
      const inner = yield* MemoryWorkQueue.makeWorkMemory
      const queue = yield* flakyWorkQueue(inner, { seed: 5, failureRate: 0.5 })
      const retry = <A, E extends { readonly _tag: string }>(effect: Effect.Effect<A, E>) =>
        Effect.retry(effect, { while: (error) => error._tag === "QueueBackendError", schedule: Schedule.recurs(50) })
      const { epoch } = yield* retry(queue.load)
      // a load that failed "after" still took a new epoch: the epoch we hold is the newest
      for (let i = 0; i < 20; i++) {
        yield* retry(queue.store(epoch, { messageId: `j${i}`, payload: bytes(`${i}`) }))
        yield* retry(queue.accept(epoch, `j${i}`))
        if (i % 2 === 0) yield* retry(queue.confirmMessage(epoch, `j${i}`))
      }
      const { state } = yield* inner.load
      expect(state.currentSeq).toBe(20)
      expect(state.pending.map((entry) => entry.messageId)).toEqual(
        Array.from({ length: 10 }, (_, i) => `j${2 * i + 1}`)
      )
    }))

  it.effect("every backlog, dead-letter, failure and inspection operation goes through the fault injector", () =>
    Effect.gen(function*() {
      const innerProducer = yield* MemoryProducerQueue.makeMemory
      const innerWork = yield* MemoryWorkQueue.makeWorkMemory
      const producer = yield* flakyProducerQueue(innerProducer, { seed: 3, failureRate: 1, failLoad: false })
      const work = yield* flakyWorkQueue(innerWork, { seed: 3, failureRate: 1, failLoad: false })
      const { epoch } = yield* producer.load
      const { epoch: workEpoch } = yield* work.load
      // every operation below succeeds on the inner queues, so each failure is an injected one
      const jobs = ["m", "n"].map((id) => ({ messageId: id, payload: bytes(id) }))
      yield* innerProducer.storeAccepted!(epoch, jobs)
      yield* innerWork.storeAccepted!(workEpoch, jobs)
      const deadLetter = { messageId: "m", attempts: 1, lastError: "e", at: 1 }
      const operations: ReadonlyArray<Effect.Effect<unknown, { readonly _tag: string; readonly cause?: unknown }>> = [
        producer.deadLetter(epoch, deadLetter),
        work.deadLetter(workEpoch, deadLetter),
        work.recordFailure(workEpoch, { messageId: "n", attempts: 1, lastError: "e", notBefore: 1 }),
        work.recordFailureBatch(workEpoch, []),
        ...[producer, work].flatMap((queue) => [
          queue.enqueue([{ messageId: "x", payload: bytes("x") }]),
          queue.backlog(1),
          queue.deadLetters({ limit: 1 }),
          queue.requeueDeadLetter("m"),
          queue.discardDeadLetter("m"),
          queue.inspect({ limit: 1 })
        ])
      ]
      for (const operation of operations) {
        const error = yield* Effect.flip(operation)
        expect([error._tag, error.cause instanceof FlakyFailure]).toEqual(["QueueBackendError", true])
      }
      expect(producer.backlogSignal).toBeDefined()
    }))

  it.effect("refuses bad options with ReliableConfigError: a failure rate outside [0, 1], a bad seed, an unknown option", () =>
    Effect.gen(function*() {
      const inner = yield* MemoryProducerQueue.makeMemory
      const work = yield* MemoryWorkQueue.makeWorkMemory
      const refused = (effect: Effect.Effect<unknown, ReliableConfigError>) =>
        Effect.map(Effect.flip(effect), (error) => [error._tag, error.option])
      expect(yield* refused(flakyProducerQueue(inner, { seed: 1, failureRate: 1.5 }))).toEqual(["ReliableConfigError", "failureRate"])
      expect(yield* refused(flakyProducerQueue(inner, { seed: 1, failureRate: Number.NaN }))).toEqual(["ReliableConfigError", "failureRate"])
      expect(yield* refused(flakyWorkQueue(work, { seed: Number.NaN, failureRate: 0.1 }))).toEqual(["ReliableConfigError", "seed"])
      const misspelt = { seed: 1, failureRate: 0.1, failload: false } as FlakyOptions
      expect(yield* refused(flakyWorkQueue(work, misspelt))).toEqual(["ReliableConfigError", "failload"])
    }))
})
