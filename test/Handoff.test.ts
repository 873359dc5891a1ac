/** The consumer endpoint's hand-off slot: deliveries in order to takers, and what a shutdown waits for. */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"
import { Handoff, LoopTaker } from "../src/internal/Handoff.js"

describe("Handoff", () => {
  it.effect("a delivery put before anyone takes it is taken at once, in order", () =>
    Effect.gen(function*() {
      const handoff = new Handoff<string>("c")
      handoff.put("a")
      handoff.put("b")
      expect(Exit.isExit(handoff.take())).toBe(true)
      expect(yield* Effect.suspend(() => handoff.take())).toBe("b")
      expect(handoff.holding()).toBe(true)
    }))

  it.effect("a taker that waits gets the next delivery put; takers are served first come, first served", () =>
    Effect.gen(function*() {
      const handoff = new Handoff<string>("c")
      const first = yield* Effect.fork(Effect.suspend(() => handoff.take()))
      const second = yield* Effect.fork(Effect.suspend(() => handoff.take()))
      yield* Effect.yieldNow()
      expect(handoff.waiting()).toBe(2)
      handoff.put("a")
      handoff.put("b")
      expect([yield* Fiber.join(first), yield* Fiber.join(second)]).toEqual(["a", "b"])
    }))

  it.effect("a delivery put between a take and its wait is not missed", () =>
    Effect.gen(function*() {
      const handoff = new Handoff<string>("c")
      const take = handoff.take() // nothing ready yet: a wait, not yet started
      handoff.put("a")
      expect(yield* take).toBe("a")
      expect(handoff.waiting()).toBe(0)
    }))

  it.effect("held deliveries are counted until done; closing fails waiting and later takers", () =>
    Effect.gen(function*() {
      const handoff = new Handoff<string>("c")
      handoff.put("a")
      yield* Effect.suspend(() => handoff.take())
      expect(handoff.holding()).toBe(true)
      handoff.done()
      expect(handoff.holding()).toBe(false)
      const waiting = yield* Effect.fork(Effect.suspend(() => handoff.take()))
      yield* Effect.yieldNow()
      handoff.close()
      const exit = yield* Fiber.await(waiting)
      expect(Exit.isFailure(exit) && JSON.stringify(exit.cause)).toContain("EndpointClosed")
      const later = yield* Effect.exit(Effect.suspend(() => handoff.take()))
      expect(Exit.isFailure(later)).toBe(true)
      handoff.put("dropped")
      expect(handoff.waiting()).toBe(0)
    }))

  it.effect("a loop taker that stops after a delivery was put to it, before it received it, gets that delivery back", () =>
    Effect.gen(function*() {
      const handoff = new Handoff<string>("c")
      const taker = new LoopTaker<string>()
      const waiting = yield* Effect.fork(Effect.suspend(() => handoff.takeAs(taker)))
      yield* Effect.yieldNow()
      expect(handoff.waiting()).toBe(1)
      handoff.put("a")
      // The loop is interrupted before it runs again: the delivery was put but never received.
      yield* Fiber.interrupt(waiting)
      expect(handoff.leave(taker)).toBe("a")
      expect(handoff.holding()).toBe(true)
    }))

  it.effect("a loop taker that received its delivery, or left while waiting, has nothing to give back and leaves the line", () =>
    Effect.gen(function*() {
      const handoff = new Handoff<string>("c")
      const taker = new LoopTaker<string>()
      const waiting = yield* Effect.fork(Effect.suspend(() => handoff.takeAs(taker)))
      yield* Effect.yieldNow()
      handoff.put("a")
      expect(yield* Fiber.join(waiting)).toBe("a")
      taker.received()
      expect(handoff.leave(taker)).toBeUndefined()
      const again = yield* Effect.fork(Effect.suspend(() => handoff.takeAs(taker)))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(again)
      expect(handoff.leave(taker)).toBeUndefined()
      expect(handoff.waiting()).toBe(0)
      handoff.put("b")
      expect(yield* Effect.suspend(() => handoff.take())).toBe("b")
    }))
})
