import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { Signal } from "../src/internal/Signal.js"

describe("Signal", () => {
  it.effect("a fire between next() and the wait is not missed", () =>
    Effect.gen(function*() {
      const signal = new Signal()
      const waiting = signal.next()
      signal.fire()
      yield* waiting
    }))

  it.effect("wakes every waiter of the generation, and only the next fire wakes a later one", () =>
    Effect.gen(function*() {
      const signal = new Signal()
      const first = yield* Effect.fork(signal.next())
      const second = yield* Effect.fork(signal.next())
      yield* Effect.yieldNow()
      signal.fire()
      yield* Fiber.join(first)
      yield* Fiber.join(second)
      const later = yield* Effect.fork(signal.next())
      yield* Effect.yieldNow()
      expect(later.unsafePoll()).toBeNull()
      signal.fire()
      yield* Fiber.join(later)
    }))

  it.effect("an interrupted waiter leaves; the others are still woken", () =>
    Effect.gen(function*() {
      const signal = new Signal()
      const leaving = yield* Effect.fork(signal.next())
      const staying = yield* Effect.fork(signal.next())
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(leaving)
      signal.fire()
      yield* Fiber.join(staying)
    }))
})

describe("Signal without per-wait interruption handlers", () => {
  it.effect("a fire after a waiter was interrupted does not resume the fiber where it went on to wait", () =>
    Effect.gen(function*() {
      const signal = new Signal()
      const gate = yield* Deferred.make<string>()
      let outcome = ""
      // Interrupted out of the wait, the fiber survives (it observes the interruption as an exit)
      // and waits on something else; the stale entry it left must not wake it there.
      const fiber = yield* Effect.fork(Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          const exit = yield* Effect.exit(restore(signal.next()))
          const value = yield* Deferred.await(gate)
          outcome = `${exit._tag}:${value}`
        })
      ))
      yield* Effect.yieldNow()
      expect(signal.waiting()).toBe(1)
      yield* Fiber.interruptFork(fiber)
      yield* Effect.yieldNow()
      signal.fire()
      yield* Effect.yieldNow()
      expect(fiber.unsafePoll()).toBeNull()
      yield* Deferred.succeed(gate, "opened")
      yield* Fiber.await(fiber)
      expect(outcome).toBe("Failure:opened")
    }))

  it.effect("entries of ended fibers are dropped: a generation that never fires stays bounded", () =>
    Effect.gen(function*() {
      const signal = new Signal()
      // A thousand waits given up one after another (a `send` under a timeout, say).
      for (let attempt = 0; attempt < 1000; attempt++) {
        const waiter = yield* Effect.fork(signal.next())
        yield* Effect.yieldNow()
        yield* Fiber.interrupt(waiter)
      }
      expect(signal.waiting()).toBeLessThanOrEqual(16)
      const survivor = yield* Effect.fork(signal.next())
      yield* Effect.yieldNow()
      signal.fire()
      yield* Fiber.join(survivor)
    }))

  it.effect("live waiters are never dropped, however many there are", () =>
    Effect.gen(function*() {
      const signal = new Signal()
      const waiters = yield* Effect.forEach(Array.from({ length: 200 }), () => Effect.fork(signal.next()))
      yield* Effect.yieldNow()
      expect(signal.waiting()).toBe(200)
      signal.fire()
      yield* Effect.forEach(waiters, Fiber.join)
    }))
})
