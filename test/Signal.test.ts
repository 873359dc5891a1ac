import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
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
