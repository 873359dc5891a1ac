/**
 * The test kit (`effect-reliable/testing`), imported by name as an application imports it:
 * advancing the TestClock until a condition holds (and the labelled failure with the system's
 * stats when it does not), plain waits, a seeded fault run through a user's own producer and
 * consumer, and the recorder of failures, dead letters and confirmations.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, Layer, Schedule, Schema, TestClock } from "effect"
import { Consumer, Producer, ReliableSystem, Transport } from "effect-reliable"
import * as Testing from "effect-reliable/testing"

const Greeting = Schema.Struct({ index: Schema.Number, text: Schema.String })
const system = ReliableSystem.layer().pipe(Layer.provide(Transport.layerMemory))

describe("advanceUntil and advanceBy", () => {
  it.effect("advanceUntil moves the clock until the condition holds", () =>
    Effect.gen(function*() {
      let woke = false
      yield* Effect.fork(Effect.delay(Effect.sync(() => void (woke = true)), "250 millis"))
      yield* Testing.advanceUntil(() => woke, { label: "the sleeper wakes", step: "50 millis", within: "1 second" })
      expect(woke).toBe(true)
      expect(yield* Clock.currentTimeMillis).toBe(250)
    }))

  it.effect("the condition may be an Effect", () =>
    Effect.gen(function*() {
      yield* Testing.advanceUntil(Effect.map(Clock.currentTimeMillis, (now) => now >= 100), { label: "100ms pass" })
      expect(yield* Clock.currentTimeMillis).toBe(100)
    }))

  it.effect("a condition that never holds fails with its label and the dumped state", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Testing.advanceUntil(() => false, { label: "never", within: "200 millis", dump: Effect.succeed({ held: 3 }) }))
      expect(error._tag).toBe("AdvanceTimeout")
      expect(error.label).toBe("never")
      expect(error.message).toBe(`advanceUntil "never": not reached within 200ms of test time; state: {"held":3}`)
      expect(yield* Clock.currentTimeMillis).toBe(200)
    }))

  it.effect("by default the failure shows the stats of the system's endpoints", () =>
    Effect.gen(function*() {
      yield* Producer.make({ name: "greeter", consumer: "listener", payload: Greeting })
      const error = yield* Effect.flip(Testing.advanceUntil(() => false, { label: "a listener", within: "100 millis" }))
      expect(error.message).toContain(`advanceUntil "a listener"`)
      expect(error.message).toContain(`"name":"greeter"`)
      expect(error.message).toContain(`"sent":0`)
    }).pipe(Effect.scoped, Effect.provide(system)))

  it.effect("advanceBy moves the clock by exactly the duration and lets sleepers wake", () =>
    Effect.gen(function*() {
      let woke = 0
      yield* Effect.fork(Effect.forever(Effect.delay(Effect.sync(() => void woke++), "100 millis")))
      yield* Testing.advanceBy("1 second", "30 millis")
      expect(yield* TestClock.currentTimeMillis).toBe(1000)
      expect(woke).toBe(10)
    }))
})

describe("faultRun on a user's own flow", () => {
  const flow = {
    producer: () => Producer.make({ name: "greeter", consumer: "listener", payload: Greeting, retryInterval: "50 millis" }),
    consumer: () => Consumer.make({ name: "listener", producer: "greeter", payload: Greeting, window: 5, resendInterval: "100 millis" }),
    message: (index: number) => ({ index, text: `hello ${index}` })
  }

  it.effect("a seeded run with loss, duplicates, reordering and consumer restarts keeps the guarantees", () =>
    Effect.gen(function*() {
      const plan = Testing.faultPlan(7, { restarts: true })
      const result = yield* Testing.faultRun({ ...flow, plan, intact: (index, greeting) => greeting.text === `hello ${index}` })
      expect(plan.restartsAfter.length).toBe(2)
      expect(new Set(result.received.map((entry) => entry.index)).size).toBe(plan.messages)
      expect(Math.max(...result.received.map((entry) => entry.incarnation))).toBe(3)
    }).pipe(Testing.onMicrotasks))

  it.effect("the same seed gives the same plan; a broken guarantee fails naming the seed", () =>
    Effect.gen(function*() {
      expect(Testing.faultPlan(11)).toEqual(Testing.faultPlan(11))
      const plan = Testing.faultPlan(11)
      // A flow that damages message 3 on the way: the run reports it, with the seed to replay it.
      const error = yield* Effect.flip(Testing.faultRun({ ...flow, plan, intact: (index) => index !== 3 }))
      expect(error._tag).toBe("FaultRunFailed")
      expect(error.message).toContain("fault run seed 11 failed: message 3 arrived damaged")
    }).pipe(Testing.onMicrotasks))

  it("checkDeliveries names the first violation", () => {
    const plan = { ...Testing.faultPlan(1), messages: 3 }
    const received = (indices: ReadonlyArray<number>) => indices.map((index) => ({ incarnation: 1, index, intact: true }))
    expect(Testing.checkDeliveries(plan, received([0, 1, 2]))).toBeUndefined()
    expect(Testing.checkDeliveries(plan, received([0, 2]))).toBe("message 1 never delivered")
    expect(Testing.checkDeliveries(plan, received([0, 1, 1, 2]))).toContain("duplicates or disorder")
    expect(Testing.checkDeliveries(plan, received([0, 1, 0, 1, 2]), "atLeastOnce")).toBeUndefined()
    expect(Testing.checkDeliveries(plan, received([0, 2, 1]), "atLeastOnce")).toContain("skipped from 0 to 2")
  })
})

describe("recorder", () => {
  it.scoped("records dead letters and the confirmations of a watched producer", () =>
    Effect.gen(function*() {
      const recorder = yield* Testing.recorder()
      const producer = yield* Producer.make({ name: "greeter", consumer: "listener", payload: Greeting, deliveryConfirmation: true })
      yield* recorder.watch(producer)
      const consumer = yield* Consumer.make({ name: "listener", producer: "greeter", payload: Greeting, maxAttempts: 2, retry: Schedule.spaced("10 millis") })
      yield* Effect.forkScoped(consumer.run((delivery) => delivery.payload.index === 1 ? Effect.fail("refused") : Effect.void))
      for (let index = 0; index < 3; index++) yield* producer.send({ index, text: "hi" }, { messageId: `greeting-${index}` })
      yield* Testing.advanceUntil(() => recorder.deadLetters.length === 1 && recorder.confirmations.length >= 2, {
        label: "a dead letter and two confirmations"
      })
      const confirmed = recorder.confirmations.map((confirmed) => confirmed.messageId)
      expect(confirmed).toContain("greeting-0")
      expect(confirmed).toContain("greeting-2")
      expect(recorder.deadLetters.map((dead) => [dead.endpointName, dead.messageId, dead.attempts])).toEqual([["listener", "greeting-1", 2]])
      expect(recorder.failures).toEqual([])
      expect(recorder.dropped()).toBe(0)
    }).pipe(Effect.provide(system)))
})
