/**
 * The lane runner under TestClock: deferred work waits for a pause (or at most its longest
 * wait), runs beside handshake operations when concurrent, and the first attempt of a queue call
 * needs no retry schedule while a failure is retried at the policy's interval.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, FiberSet, TestClock } from "effect"
import * as LaneRunner from "../../src/Controller/internal/LaneRunner.js"
import { QueueBackendError } from "../../src/DurableQueue/QueueErrors.js"

type Op = { readonly name: string; readonly millis: number }

const harness = (options: { readonly idleMs?: number; readonly maxWaitMs?: number; readonly concurrent?: boolean }) =>
  Effect.gen(function*() {
    const runFork = yield* FiberSet.makeRuntime<never>()
    const clock = yield* Effect.clock
    const log: Array<string> = []
    let deferred: Array<string> = []
    const runner = LaneRunner.make<Op>({
      retry: { attempts: 3, interval: Duration.millis(100) },
      runFork,
      failed: (stage) => void log.push(`failed ${stage}`),
      run: (op, guard) =>
        guard("Store", Effect.as(Effect.sleep(Duration.millis(op.millis)), op.name), (name) => {
          log.push(`${clock.unsafeCurrentTimeMillis()} ${name}`)
        }),
      takeDeferred: () => {
        if (deferred.length === 0) return undefined
        const name = deferred.join("+")
        deferred = []
        return { name, millis: 1 }
      },
      hasDeferred: () => deferred.length > 0,
      now: () => clock.unsafeCurrentTimeMillis(),
      ...(options.idleMs === undefined ? {} : { deferredIdleMs: options.idleMs }),
      ...(options.maxWaitMs === undefined ? {} : { deferredMaxWaitMs: options.maxWaitMs }),
      ...(options.concurrent === undefined ? {} : { concurrentDeferred: options.concurrent })
    })
    const defer = (name: string) => {
      deferred.push(name)
      runner.kick()
    }
    return { log, runner, defer }
  })

const step = (millis: number) => Effect.zipRight(TestClock.adjust(Duration.millis(millis)), Effect.yieldNow())

describe("LaneRunner", () => {
  it.scoped("deferred work waits until the lane has paused for the idle time", () =>
    Effect.gen(function*() {
      const { defer, log, runner } = yield* harness({ idleMs: 5, maxWaitMs: 250 })
      runner.enqueue({ name: "s1", millis: 2 })
      defer("c1")
      for (let t = 0; t < 4; t++) yield* step(1)
      // s1 ended at 2; a second store arrives at 4, before the pause is long enough
      runner.enqueue({ name: "s2", millis: 2 })
      for (let t = 0; t < 20; t++) yield* step(1)
      expect(log).toEqual(["2 s1", "6 s2", "12 c1"])
    }))

  it.scoped("a lane that never pauses runs its deferred work after the longest wait", () =>
    Effect.gen(function*() {
      const { defer, log, runner } = yield* harness({ idleMs: 5, maxWaitMs: 20 })
      defer("c1")
      for (let t = 0; t < 40; t++) {
        if (t % 2 === 0) runner.enqueue({ name: `s${t}`, millis: 2 })
        yield* step(1)
      }
      const confirm = log.find((line) => line.endsWith(" c1"))
      expect(confirm).toBeDefined()
      expect(Number(confirm!.split(" ")[0])).toBeLessThanOrEqual(25)
    }))

  it.scoped("a lane whose next operation is always queued runs its deferred work after the longest wait", () =>
    Effect.gen(function*() {
      const { defer, log, runner } = yield* harness({ idleMs: 5, maxWaitMs: 20 })
      // 20 operations of 2 ms queued at once: the lane never finds its queue empty until 40 ms
      for (let index = 0; index < 20; index++) runner.enqueue({ name: `s${index}`, millis: 2 })
      yield* step(1)
      defer("c1")
      for (let t = 0; t < 60; t++) yield* step(1)
      const at = (name: string) => log.findIndex((line) => line.endsWith(` ${name}`))
      // c1 became due at 21 and runs as the next operation ends, ahead of the queued ones
      expect(log[at("c1")]).toBe("23 c1")
      expect(at("c1")).toBeLessThan(at("s19"))
      expect(log.filter((line) => line.endsWith(" c1"))).toHaveLength(1)
    }))

  it.scoped("concurrent deferred work runs beside a handshake operation", () =>
    Effect.gen(function*() {
      const { defer, log, runner } = yield* harness({ concurrent: true })
      runner.enqueue({ name: "s1", millis: 10 })
      yield* step(1)
      defer("c1")
      defer("c2")
      for (let t = 0; t < 15; t++) yield* step(1)
      // c1 starts at once beside s1; c2, deferred meanwhile, goes next; s1 ends at 10
      expect(log).toEqual(["2 c1", "3 c2", "10 s1"])
    }))

  it.effect("retrying: the first attempt runs bare; a failure is retried after the interval, up to the attempts", () =>
    Effect.gen(function*() {
      let calls = 0
      const flaky = Effect.suspend(() => {
        calls++
        return calls < 3 ? Effect.fail(new QueueBackendError({ operation: "store", cause: "down" })) : Effect.succeed(calls)
      })
      const fiber = yield* Effect.fork(LaneRunner.retrying({ attempts: 3, interval: Duration.millis(100) }, flaky))
      yield* Effect.yieldNow()
      expect(calls).toBe(1)
      yield* TestClock.adjust(Duration.millis(100))
      expect(calls).toBe(2)
      yield* TestClock.adjust(Duration.millis(100))
      expect(yield* fiber.await).toMatchObject({ _tag: "Success", value: 3 })
      calls = -10
      const exhausted = yield* Effect.fork(Effect.flip(LaneRunner.retrying({ attempts: 3, interval: Duration.millis(100) }, flaky)))
      yield* TestClock.adjust(Duration.millis(1000))
      expect((yield* exhausted.await)._tag).toBe("Success")
      expect(calls).toBe(-7)
    }))
})
