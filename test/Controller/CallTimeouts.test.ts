/**
 * The lane's call timeouts under TestClock: a call past its deadline is interrupted (its
 * finalizers run before its caller hears of the timeout, `onOverdue` is told at the deadline)
 * and fails with the timeout, each call at its own deadline, or a timeout later when it does not
 * let go (it ends in the background); an interrupted caller interrupts its call and waits for it
 * a timeout at most; the sleeper re-arms after a quiet spell; and a call costs one fiber, not
 * `Effect.timeout`'s three.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either, Exit, Fiber, FiberSet, Supervisor, TestClock } from "effect"
import * as CallTimeouts from "../../src/Controller/internal/CallTimeouts.js"

const harness = Effect.gen(function*() {
  const runFork = yield* FiberSet.makeRuntime<never>()
  return CallTimeouts.make(Duration.seconds(5), runFork)
})

const timedOut = () => "timed out" as const

/** Forks the call and lets it start. */
const start = <A, E>(effect: Effect.Effect<A, E>) => Effect.tap(Effect.fork(effect), () => Effect.yieldNow())

describe("CallTimeouts", () => {
  it.scoped("a call answered in time gives its answer; one past the timeout is interrupted, then fails with the timeout", () =>
    Effect.gen(function*() {
      const timeouts = yield* harness
      const quick = yield* start(Effect.either(timeouts.timed(Effect.as(Effect.sleep("1 second"), 42), timedOut)))
      const log: Array<string> = []
      const hanging = yield* start(Effect.either(timeouts.timed(
        Effect.onInterrupt(Effect.never, () => Effect.sync(() => void log.push("call interrupted"))),
        () => {
          log.push("caller told")
          return "timed out" as const
        }
      )))
      yield* TestClock.adjust("1 second")
      expect(yield* Fiber.join(quick)).toEqual(Either.right(42))
      yield* TestClock.adjust("3999 millis")
      expect(hanging.unsafePoll()).toBeNull()
      yield* TestClock.adjust("1 millis")
      expect(yield* Fiber.join(hanging)).toEqual(Either.left("timed out"))
      expect(log).toEqual(["call interrupted", "caller told"])
    }))

  it.scoped("onOverdue is told at the deadline; a call slow to let go fails with the timeout only once it has ended", () =>
    Effect.gen(function*() {
      const timeouts = yield* harness
      const log: Array<string> = []
      // As a hung query under @effect/sql-pg: its interruption waits for a cancel request to the server.
      const slowToLetGo = Effect.onInterrupt(Effect.never, () =>
        Effect.zipRight(Effect.sleep("3 seconds"), Effect.sync(() => void log.push("call ended"))))
      const hanging = yield* start(Effect.either(timeouts.timed(slowToLetGo, timedOut, () => void log.push("overdue"))))
      yield* TestClock.adjust("4999 millis")
      expect(log).toEqual([])
      yield* TestClock.adjust("1 millis")
      expect(log).toEqual(["overdue"])
      yield* TestClock.adjust("2999 millis")
      expect(hanging.unsafePoll()).toBeNull()
      yield* TestClock.adjust("1 millis")
      expect(yield* Fiber.join(hanging)).toEqual(Either.left("timed out"))
      expect(log).toEqual(["overdue", "call ended"])
    }))

  it.scoped("a call that does not let go within one more timeout fails with the timeout then, and ends in the background", () =>
    Effect.gen(function*() {
      const timeouts = yield* harness
      const log: Array<string> = []
      // As a transaction under @effect/sql on a connection gone silent: its rollback waits for an answer.
      const stuck = Effect.onInterrupt(Effect.never, () =>
        Effect.zipRight(Effect.sleep("60 seconds"), Effect.sync(() => void log.push("call ended"))))
      const hanging = yield* start(Effect.either(timeouts.timed(stuck, timedOut, () => void log.push("overdue"))))
      yield* TestClock.adjust("5 seconds")
      expect(log).toEqual(["overdue"])
      yield* TestClock.adjust("4999 millis")
      expect(hanging.unsafePoll()).toBeNull()
      yield* TestClock.adjust("1 millis")
      expect(yield* Fiber.join(hanging)).toEqual(Either.left("timed out"))
      // A later call is timed as any other, while the first still hangs.
      const next = yield* start(Effect.either(timeouts.timed(Effect.as(Effect.sleep("1 second"), 7), timedOut)))
      yield* TestClock.adjust("1 second")
      expect(yield* Fiber.join(next)).toEqual(Either.right(7))
      yield* TestClock.adjust("54 seconds")
      expect(log).toEqual(["overdue", "call ended"])
    }))

  it.scoped("an interrupted caller waits for a call that does not let go a timeout at most", () =>
    Effect.gen(function*() {
      const timeouts = yield* harness
      const stuck = Effect.onInterrupt(Effect.never, () => Effect.never)
      const caller = yield* start(timeouts.timed(stuck, timedOut))
      const interrupting = yield* start(Fiber.interrupt(caller))
      let waitedMs = 0
      while (interrupting.unsafePoll() === null && waitedMs < 10_000) {
        yield* TestClock.adjust("100 millis")
        waitedMs += 100
      }
      expect(waitedMs).toBe(5_000)
      expect(Exit.isInterrupted(yield* Fiber.join(interrupting))).toBe(true)
    }))

  it.scoped("each call times out at its own deadline, and the sleeper re-arms after a quiet spell", () =>
    Effect.gen(function*() {
      const timeouts = yield* harness
      const first = yield* start(Effect.either(timeouts.timed(Effect.never, timedOut)))
      yield* TestClock.adjust("2 seconds")
      const second = yield* start(Effect.either(timeouts.timed(Effect.never, timedOut)))
      yield* TestClock.adjust("3 seconds")
      expect(yield* Fiber.join(first)).toEqual(Either.left("timed out"))
      expect(second.unsafePoll()).toBeNull()
      yield* TestClock.adjust("2 seconds")
      expect(yield* Fiber.join(second)).toEqual(Either.left("timed out"))
      // Nothing runs for a minute, then a call hangs: it still times out.
      yield* TestClock.adjust("60 seconds")
      const third = yield* start(Effect.either(timeouts.timed(Effect.never, timedOut)))
      yield* TestClock.adjust("5 seconds")
      expect(yield* Fiber.join(third)).toEqual(Either.left("timed out"))
    }))

  it.scoped("an interrupted caller interrupts its call and waits for it", () =>
    Effect.gen(function*() {
      const timeouts = yield* harness
      const log: Array<string> = []
      const call = Effect.onInterrupt(Effect.never, () => Effect.sync(() => void log.push("call interrupted")))
      const caller = yield* start(timeouts.timed(call, timedOut))
      const exit = yield* Fiber.interrupt(caller)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(log).toEqual(["call interrupted"])
    }))

  it.scoped("a call forks one fiber of its own, and no sleeper of its own", () =>
    Effect.gen(function*() {
      const timeouts = yield* harness
      // The lane's sleeper is one per lane, not per call: armed here, before counting.
      yield* Effect.fork(timeouts.timed(Effect.never, timedOut))
      const counted = (effect: Effect.Effect<unknown, unknown>) =>
        Effect.gen(function*() {
          const counter = new Started()
          yield* Effect.supervised(effect, counter)
          return counter.started
        })
      expect(yield* counted(Effect.forEach([1, 2, 3, 4], (n) => timeouts.timed(Effect.succeed(n), timedOut)))).toBe(4)
    }))
})

/** Counts the fibers started under it. */
class Started extends Supervisor.AbstractSupervisor<void> {
  started = 0
  readonly value = Effect.void
  override onStart() {
    this.started++
  }
}
