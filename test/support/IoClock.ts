/**
 * Driving the TestClock while real I/O (a database) runs: between clock steps, a macrotask turn
 * lets pending I/O complete (a turn, not a sleep).
 */
import { Effect, TestClock } from "effect"
import { settle } from "./Harness.js"

/** Lets real I/O progress: one macrotask turn. */
export const ioTurn = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

/**
 * Advances the TestClock in steps until `done` holds, letting I/O complete between steps; fails
 * after `limitMs` of test time, naming `label` (by default the condition's source).
 */
export const advanceWithIo = (done: () => boolean, stepMs: number, limitMs: number, label = done.toString().replace(/\s+/g, " ").slice(0, 160)) =>
  Effect.gen(function*() {
    let elapsed = 0
    while (true) {
      yield* settle
      yield* ioTurn
      yield* settle
      if (done()) return
      if (elapsed >= limitMs) return yield* Effect.fail(new Error(`advanceWithIo "${label}": not reached within ${limitMs}ms of test time`))
      yield* TestClock.adjust(stepMs)
      elapsed += stepMs
    }
  })

/** Lets `millis` of test time pass in steps of `stepMs`, letting I/O complete between steps (a plain wait). */
export const advanceByWithIo = (millis: number, stepMs: number) =>
  Effect.gen(function*() {
    for (let elapsed = 0; elapsed < millis; elapsed += stepMs) {
      yield* settle
      yield* ioTurn
      yield* settle
      yield* TestClock.adjust(Math.min(stepMs, millis - elapsed))
    }
    yield* settle
    yield* ioTurn
    yield* settle
  })
