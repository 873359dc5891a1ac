/**
 * One handler loop of `run`, on a hand-off filled in advance: it must not cost a scheduler task
 * per delivery (`Effect.forever` yields after every round), and a loop interrupted while a
 * delivery is on its way to it gives that delivery back.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Scheduler, Schedule } from "effect"
import * as Metrics from "../src/Observability/Metrics.js"
import type { Delivery } from "../src/Protocol/Contract.js"
import { Handoff } from "../src/internal/Handoff.js"
import * as RunLoop from "../src/internal/RunLoop.js"

const policy: RunLoop.FailurePolicy = {
  endpoint: "c",
  retriesAtProducer: false,
  retry: Schedule.stop,
  maxAttempts: 1,
  handlerTimeout: undefined,
  publishDeadLetter: () => {},
  counted: { failed: 0, deadLettered: 0 },
  metrics: Metrics.off
}

const delivery = (seq: number): Delivery<number> => ({ messageId: `m${seq}`, seq, payload: seq, attempt: 1, confirm: Effect.void }) as unknown as Delivery<number>

/** A scheduler that counts the tasks it is given and runs them as the default one does. */
const countingScheduler = () => {
  let tasks = 0
  const scheduler = Scheduler.make((task, priority) => {
    tasks++
    Scheduler.defaultScheduler.scheduleTask(task, priority)
  })
  return { scheduler, tasks: () => tasks }
}

describe("RunLoop", () => {
  it.effect("a loop whose next delivery is always ready does not yield to the scheduler after each one", () =>
    Effect.gen(function*() {
      const handoff = new Handoff<Delivery<number>>("c")
      for (let seq = 1; seq <= 1000; seq++) handoff.put(delivery(seq))
      const handled: Array<number> = []
      const loop = RunLoop.make<number, never, never, never>(handoff, (d) => Effect.sync(() => void handled.push(d.payload)), () => {}, policy, undefined)
      const { scheduler, tasks } = countingScheduler()
      const fiber = yield* Effect.fork(Effect.withScheduler(loop.run, scheduler))
      yield* Effect.yieldNow().pipe(Effect.repeat({ until: () => handled.length === 1000 || tasks() > 500 }))
      yield* Fiber.interrupt(fiber)
      expect(handled.length).toBe(1000)
      // The runtime still yields every couple of thousand operations; one task per delivery is what this rules out.
      expect(tasks()).toBeLessThan(50)
    }))

  it.effect("a loop interrupted while a delivery is on its way to it gives that delivery back", () =>
    Effect.gen(function*() {
      const handoff = new Handoff<Delivery<number>>("c")
      const released: Array<number> = []
      const loop = RunLoop.make<number, never, never, never>(handoff, () => Effect.void, (d) => void released.push(d.payload), policy, undefined)
      const fiber = yield* Effect.fork(loop.run)
      yield* Effect.yieldNow()
      expect(handoff.waiting()).toBe(1)
      handoff.put(delivery(7))
      yield* Fiber.interrupt(fiber)
      expect(released).toEqual([7])
    }))
})
