/**
 * The controller timer on the TestClock: it ticks at the machine's deadline, waits to be woken
 * when there is none, and a deadline that comes before the end of its sleep cuts the sleep short
 * when the timer is told of it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, TestClock } from "effect"
import * as DeadlineTimer from "../../src/Controller/internal/DeadlineTimer.js"

/** A timer over a machine whose next deadline is `due` (reset at each tick); the tick times. */
const started = Effect.gen(function*() {
  const clock = yield* Effect.clock
  const now = () => clock.unsafeCurrentTimeMillis()
  const timer = DeadlineTimer.make()
  const ticks: Array<number> = []
  const machine = { due: undefined as number | undefined }
  yield* timer.run({
    tick: () => {
      ticks.push(now())
      if (machine.due !== undefined && machine.due <= now()) machine.due = undefined
    },
    deadline: () => machine.due,
    now,
    recheckMs: 500
  })
  yield* TestClock.adjust(0)
  return { timer, ticks, machine }
})

const at = (millis: number) => Effect.flatMap(Clock.currentTimeMillis, (now) => TestClock.adjust(millis - now))

describe("DeadlineTimer", () => {
  it.scoped("ticks at the deadline; with none it waits to be woken", () =>
    Effect.gen(function*() {
      const { machine, ticks, timer } = yield* started
      expect(ticks).toEqual([0])
      machine.due = 300
      timer.wake()
      yield* at(299)
      expect(ticks).toEqual([0])
      yield* at(300)
      expect(ticks).toEqual([0, 300])
      yield* at(5_000)
      expect(ticks).toEqual([0, 300])
    }))

  it.scoped("a deadline before the end of the sleep in progress wakes it when told; a later one or a bare wake does not", () =>
    Effect.gen(function*() {
      const { machine, ticks, timer } = yield* started
      machine.due = 500
      timer.wake()
      yield* at(100)
      // A failed job's retry is due at 120, sooner than the sleep ends (at 500).
      machine.due = 120
      timer.wake()
      timer.wake(700)
      yield* at(110)
      expect(ticks).toEqual([0])
      timer.wake(120)
      yield* at(119)
      expect(ticks).toEqual([0])
      yield* at(120)
      expect(ticks).toEqual([0, 120])
      machine.due = 400
      timer.wake(400)
      yield* at(400)
      expect(ticks).toEqual([0, 120, 400])
      yield* at(2_000)
      expect(ticks).toEqual([0, 120, 400])
    }))
})
