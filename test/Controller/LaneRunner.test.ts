/**
 * The lane runner under TestClock: deferred work waits for a pause (or at most its longest
 * wait), runs beside handshake operations when concurrent, and the first attempt of a queue call
 * needs no retry schedule while a failure is retried at the policy's interval. Operations run on
 * one long-lived fiber per lane, not a fiber each. A call past its timeout makes the lane
 * degraded at its deadline, and fails one more timeout later if it has not let go by then.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Exit, FiberSet, Scope, TestClock } from "effect"
import * as LaneRunner from "../../src/Controller/internal/LaneRunner.js"
import { QueueBackendError } from "../../src/DurableQueue/QueueErrors.js"
import * as EndpointHealth from "../../src/internal/EndpointHealth.js"

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

/** A lane whose operations run `perform` bare (no queue call), counting the fibers it forks. */
const bareLane = (perform: (name: string) => Effect.Effect<void>, concurrent = false) =>
  Effect.gen(function*() {
    const fork = yield* FiberSet.makeRuntime<never>()
    const forks = { count: 0 }
    const deferred: Array<string> = []
    const runner = LaneRunner.make<string>({
      retry: { attempts: 3, interval: Duration.millis(100) },
      runFork: (effect) => {
        forks.count++
        return fork(effect)
      },
      failed: () => undefined,
      run: (name) => perform(name),
      takeDeferred: () => deferred.shift(),
      hasDeferred: () => deferred.length > 0,
      concurrentDeferred: concurrent
    })
    const defer = (name: string) => {
      deferred.push(name)
      runner.kick()
    }
    return { runner, forks, defer }
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

  it.scoped("paced concurrent deferred work waits for a pause or the longest wait, then runs beside an operation", () =>
    Effect.gen(function*() {
      const { defer, log, runner } = yield* harness({ concurrent: true, idleMs: 5, maxWaitMs: 20 })
      // one 30 ms store: the lane is busy throughout, so c1 waits its longest wait and then runs
      // beside the store instead of after it
      runner.enqueue({ name: "s1", millis: 30 })
      yield* step(1)
      defer("c1")
      for (let t = 0; t < 35; t++) yield* step(1)
      // s1 ended at 30: c2, deferred at 36, finds the lane paused long enough and runs at once
      defer("c2")
      for (let t = 0; t < 10; t++) yield* step(1)
      // c3, deferred while s2 runs, waits for the 5 ms pause after s2 (ended at 51)
      runner.enqueue({ name: "s2", millis: 5 })
      yield* step(1)
      defer("c3")
      for (let t = 0; t < 15; t++) yield* step(1)
      expect(log).toEqual(["22 c1", "30 s1", "37 c2", "51 s2", "57 c3"])
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

  it.scoped("a call past the timeout makes the lane degraded at its deadline; one that does not let go fails a timeout later", () =>
    Effect.gen(function*() {
      const runFork = yield* FiberSet.makeRuntime<never>()
      const clock = yield* Effect.clock
      const log: Array<string> = []
      const at = (what: string) => () => void log.push(`${clock.unsafeCurrentTimeMillis()} ${what}`)
      // A hung query under @effect/sql-pg: interrupting it waits for a cancel request to the server.
      const hung = Effect.onInterrupt(Effect.never, () => Effect.zipRight(Effect.sleep("3 seconds"), Effect.sync(at("let go"))))
      const runner = LaneRunner.make<string>({
        retry: { attempts: 1, interval: Duration.millis(100), timeout: Duration.seconds(1) },
        runFork,
        health: EndpointHealth.make({ endpointName: "lane", role: "Producer", publish: (event) => at(event._tag)(), now: () => clock.unsafeCurrentTimeMillis() }),
        failed: at("failed"),
        run: (_op, guard) => guard("Store", hung, () => undefined),
        takeDeferred: () => undefined
      })
      runner.enqueue("store")
      for (let t = 0; t < 50; t++) yield* step(100)
      // Interrupted at 1 s, it would let go at 4 s: the lane gives up waiting at 2 s.
      expect(log).toEqual(["1000 ReliableDegraded", "2000 failed", "4000 let go"])
    }))

  it.scoped("operations run in order on one fiber forked at the first, each on a later turn than it was given", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const { defer, forks, runner } = yield* bareLane((name) => Effect.sync(() => void log.push(name)), true)
      // queued while the lane runs (each starts after a yield) ...
      for (const name of ["a", "b", "c"]) runner.enqueue(name)
      expect(log).toEqual([])
      for (let turn = 0; turn < 10; turn++) yield* Effect.yieldNow()
      // ... and given to a waiting worker
      runner.enqueue("d")
      expect(log).toEqual(["a", "b", "c"])
      for (let turn = 0; turn < 10; turn++) yield* Effect.yieldNow()
      defer("c1")
      defer("c2")
      for (let turn = 0; turn < 10; turn++) yield* Effect.yieldNow()
      expect(log).toEqual(["a", "b", "c", "d", "c1", "c2"])
      // one worker for handshake operations, one for deferred work beside them: no fiber per operation
      expect(forks.count).toBe(2)
      yield* runner.drain
    }))

  it.effect("closing the lane's scope interrupts the running operation; a dying operation does not end the lane", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const scope = yield* Scope.make()
      const { runner } = yield* Scope.extend(
        bareLane((name) =>
          name === "dies"
            ? Effect.die("boom")
            : name === "hangs"
            ? Effect.onInterrupt(Effect.never, () => Effect.sync(() => void log.push("hangs interrupted")))
            : Effect.sync(() => void log.push(name))
        ),
        scope
      )
      runner.enqueue("dies")
      runner.enqueue("after")
      runner.enqueue("hangs")
      for (let turn = 0; turn < 10; turn++) yield* Effect.yieldNow()
      expect(log).toEqual(["after"])
      yield* Scope.close(scope, Exit.void)
      expect(log).toEqual(["after", "hangs interrupted"])
    }))

  it.effect("an operation given after the lane's scope closed never runs, and a drain does not wait for it", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const record = (name: string) => Effect.sync(() => void log.push(name))
      // A lane that ran an operation before its scope closed, and one whose scope closed before its first.
      const used = yield* Scope.make()
      const { runner: usedLane } = yield* Scope.extend(bareLane(record), used)
      usedLane.enqueue("before")
      for (let turn = 0; turn < 10; turn++) yield* Effect.yieldNow()
      yield* Scope.close(used, Exit.void)
      const unused = yield* Scope.make()
      const { runner: unusedLane } = yield* Scope.extend(bareLane(record), unused)
      yield* Scope.close(unused, Exit.void)
      for (const lane of [usedLane, unusedLane]) {
        lane.enqueue("late")
        lane.enqueue("later")
        const drained = yield* Effect.fork(lane.drain)
        for (let turn = 0; turn < 10; turn++) yield* Effect.yieldNow()
        expect(drained.unsafePoll()).toEqual(Exit.void)
      }
      expect(log).toEqual(["before"])
    }))
})
