/**
 * The Effect metrics of a flow, read back from Effect's metric registry: after a seeded lossy
 * run they agree with the endpoints' stats and the run's plan; the lag grows while a consumer
 * is stalled and falls back to 0 once it confirms; a work-pulling producer's pending lag grows
 * while jobs wait for a worker.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Layer, Metric, MetricKey, MetricLabel, Schema, Scope, TestClock } from "effect"
import * as Consumer from "../../src/Consumer.js"
import * as Metrics from "../../src/Observability/Metrics.js"
import * as Producer from "../../src/Producer.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as FaultyTransport from "../../src/Transport/FaultyTransport.js"
import * as MemoryTransport from "../../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../../src/WorkPulling.js"
import { planFor } from "../support/FaultRun.js"
import { advanceBy, advanceUntil, settle } from "../support/Harness.js"

const Order = Schema.Struct({ index: Schema.Number })

// The registry is global: every test's endpoints get names of their own.
let nameCount = 0
const uniqueName = (base: string) => `${base}-${++nameCount}-${Math.random().toString(36).slice(2, 8)}`

const labels = (endpoint: string, role: Metrics.Role) => [MetricLabel.make("endpoint", endpoint), MetricLabel.make("role", role)]

const counter = (key: MetricKey.MetricKey.Counter<number>, endpoint: string, role: Metrics.Role) =>
  Effect.map(Metric.value(Metric.fromMetricKey(MetricKey.taggedWithLabels(key, labels(endpoint, role)))), (state) => state.count)

const gauge = (key: MetricKey.MetricKey.Gauge<number>, endpoint: string, role: Metrics.Role) =>
  Effect.map(Metric.value(Metric.fromMetricKey(MetricKey.taggedWithLabels(key, labels(endpoint, role)))), (state) => state.value)

const histogramCount = (key: MetricKey.MetricKey.Histogram, endpoint: string, role: Metrics.Role) =>
  Effect.map(Metric.value(Metric.fromMetricKey(MetricKey.taggedWithLabels(key, labels(endpoint, role)))), (state) => state.count)

const histogram = (key: MetricKey.MetricKey.Histogram, endpoint: string, role: Metrics.Role) =>
  Metric.value(Metric.fromMetricKey(MetricKey.taggedWithLabels(key, labels(endpoint, role))))

const memorySystem = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

describe("metrics", () => {
  const seed = Number(process.env.METRICS_SEED ?? 11)

  it.scoped(`after a seeded lossy flow the counters and histograms agree with stats and the plan (seed ${seed})`, () => {
    const plan = planFor(seed, false)
    console.log(`metrics fault run: seed ${seed} (replay with METRICS_SEED=${seed})`)
    const faulty = FaultyTransport.layerFaulty({
      seed,
      drop: { toProducer: plan.dropToProducer, toConsumer: plan.dropToConsumer },
      duplicate: plan.duplicate,
      reorder: plan.reorder,
      reorderWindow: "30 millis"
    })
    const out = uniqueName("orders-out")
    const inName = uniqueName("orders-in")
    return Effect.gen(function*() {
      const producer = yield* Producer.make({ name: out, consumer: inName, payload: Order, retryInterval: "50 millis" })
      const consumer = yield* Consumer.make({ name: inName, producer: out, payload: Order, window: plan.window, resendInterval: "100 millis" })
      const seen = new Set<number>()
      yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void seen.add(delivery.payload.index))))
      const sending = yield* Effect.fork(Effect.forEach(
        Array.from({ length: plan.messages }, (_, index) => index),
        (index) => producer.send({ index }, { messageId: `order-${index}` }),
        { discard: true }
      ))
      let stats = yield* producer.stats
      yield* advanceUntil(() => seen.size === plan.messages && sending.unsafePoll() !== null, 25, 600_000)
      // The last confirmations come back after the last delivery.
      yield* advanceUntil(() => {
        stats = Effect.runSync(producer.stats)
        return stats.confirmed === plan.messages
      }, 25, 600_000)
      const consumerStats = yield* consumer.stats
      // Counters are added every sample interval.
      yield* TestClock.adjust(Metrics.SampleInterval)

      expect(yield* counter(Metrics.keys.sent, out, "producer")).toBe(stats.sent)
      expect(yield* counter(Metrics.keys.resent, out, "producer")).toBe(stats.resent)
      // The plan loses messages both ways: some are sent again.
      expect(stats.resent).toBeGreaterThan(0)
      expect(yield* counter(Metrics.keys.confirmed, out, "producer")).toBe(plan.messages)
      expect(yield* counter(Metrics.keys.dropped, out, "producer")).toBe(stats.dropped)
      expect(yield* counter(Metrics.keys.delivered, inName, "consumer")).toBe(consumerStats.delivered)
      expect(consumerStats.delivered).toBe(plan.messages)
      expect(yield* counter(Metrics.keys.redelivered, inName, "consumer")).toBe(consumerStats.redelivered)
      // One send latency per send call, one end-to-end latency per confirmed message.
      expect(yield* histogramCount(Metrics.keys.sendLatency, out, "producer")).toBe(plan.messages)
      expect(yield* histogramCount(Metrics.keys.endToEndLatency, out, "producer")).toBe(plan.messages)
      // Everything is confirmed: no lag, in stats and (at the next sample) in the gauge.
      expect(stats.oldestUnconfirmedAgeMillis).toBe(0)
      yield* TestClock.adjust(Metrics.SampleInterval)
      expect(yield* gauge(Metrics.keys.oldestUnconfirmedAge, out, "producer")).toBe(0)
      expect(yield* gauge(Metrics.keys.inFlight, out, "producer")).toBe(0)
    }).pipe(Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(faulty))))
  }, 120_000)

  it.scoped("the lag grows while the consumer is stalled and returns to 0 once it confirms", () => {
    const out = uniqueName("lag-out")
    const inName = uniqueName("lag-in")
    return Effect.gen(function*() {
      const producer = yield* Producer.make({ name: out, consumer: inName, payload: Order })
      const consumer = yield* Consumer.make({ name: inName, producer: out, payload: Order, window: 10 })
      const release = yield* Deferred.make<void>()
      const seen: Array<number> = []
      yield* Effect.forkScoped(consumer.run((delivery) => Effect.zipRight(Deferred.await(release), Effect.sync(() => void seen.push(delivery.payload.index)))))
      yield* settle
      yield* Effect.forkScoped(Effect.forEach([0, 1, 2, 3, 4], (index) => producer.send({ index }), { discard: true }))
      yield* settle
      yield* TestClock.adjust("5 seconds")
      yield* settle
      const stalled = yield* producer.stats
      expect(stalled.confirmed).toBe(0)
      expect(stalled.oldestUnconfirmedAgeMillis).toBeGreaterThanOrEqual(5_000)
      // Sampled each second: the last sample is at most a second old.
      expect(yield* gauge(Metrics.keys.oldestUnconfirmedAge, out, "producer")).toBeGreaterThanOrEqual(4_000)
      expect(yield* gauge(Metrics.keys.inFlight, out, "producer")).toBe(5)

      yield* Deferred.succeed(release, undefined)
      yield* advanceUntil(() => Effect.runSync(producer.stats).confirmed === 5, 10, 10_000)
      expect((yield* producer.stats).oldestUnconfirmedAgeMillis).toBe(0)
      yield* TestClock.adjust(Metrics.SampleInterval)
      expect(yield* gauge(Metrics.keys.oldestUnconfirmedAge, out, "producer")).toBe(0)
      expect(yield* gauge(Metrics.keys.inFlight, out, "producer")).toBe(0)
      expect(yield* histogramCount(Metrics.keys.endToEndLatency, out, "producer")).toBe(5)
    }).pipe(Effect.provide(memorySystem()))
  })

  it.scoped("a send that waits for demand records how long it waited; one answered at once records 0", () => {
    const out = uniqueName("wait-out")
    const inName = uniqueName("wait-in")
    return Effect.gen(function*() {
      const producer = yield* Producer.make({ name: out, consumer: inName, payload: Order })
      // No consumer yet: the send waits in line for its first grant.
      const waiting = yield* Effect.forkScoped(producer.send({ index: 0 }))
      yield* settle
      yield* TestClock.adjust("3 seconds")
      const consumer = yield* Consumer.make({ name: inName, producer: out, payload: Order, window: 10 })
      yield* Effect.forkScoped(consumer.run(() => Effect.void))
      yield* advanceUntil(() => waiting.unsafePoll() !== null, 10, 10_000)
      const waited = yield* histogram(Metrics.keys.sendLatency, out, "producer")
      expect(waited.count).toBe(1)
      expect(waited.sum).toBeGreaterThanOrEqual(3_000)
      // With the grant in hand the next send is answered in the call.
      yield* producer.send({ index: 1 })
      const both = yield* histogram(Metrics.keys.sendLatency, out, "producer")
      expect(both.count).toBe(2)
      expect(both.sum).toBe(waited.sum)
    }).pipe(Effect.provide(memorySystem()))
  })

  it.scoped("a work-pulling producer's pending lag grows while jobs wait for a worker", () => {
    const dispatcher = uniqueName("dispatcher")
    const workerName = uniqueName("w")
    return Effect.gen(function*() {
      const producer = yield* WorkPulling.producer({ name: dispatcher, payload: Order })
      const scope = yield* Scope.make()
      const done: Array<number> = []
      const worker = yield* WorkPulling.worker({ name: workerName, producer: dispatcher, payload: Order, window: 4, resendInterval: "200 millis" })
        .pipe(Scope.extend(scope))
      yield* Effect.forkIn(worker.run((delivery) => Effect.zipRight(Effect.sleep("50 millis"), Effect.sync(() => void done.push(delivery.payload.index)))), scope)
      yield* settle
      yield* Effect.forkScoped(Effect.forEach(Array.from({ length: 20 }, (_, index) => index), (index) => producer.send({ index }), { discard: true }))
      yield* advanceUntil(() => done.length >= 3, 10, 60_000)
      // The only worker leaves: what it held goes back to the pool, and waits there.
      yield* Scope.close(scope, Exit.void)
      yield* advanceBy("3 seconds", "100 millis")
      const parked = yield* WorkPulling.stats(dispatcher)
      expect(parked.workers).toBe(0)
      expect(parked.pending).toBeGreaterThan(0)
      expect(parked.oldestPendingAgeMillis).toBeGreaterThanOrEqual(3_000)
      expect(yield* gauge(Metrics.keys.pending, dispatcher, "work_producer")).toBeGreaterThanOrEqual(parked.pending)
      expect(yield* gauge(Metrics.keys.oldestPendingAge, dispatcher, "work_producer")).toBeGreaterThanOrEqual(2_000)
      expect(yield* gauge(Metrics.keys.workers, dispatcher, "work_producer")).toBe(0)

      const rescuer = yield* WorkPulling.worker({ name: uniqueName("w"), producer: dispatcher, payload: Order, window: 4 })
      yield* Effect.forkScoped(rescuer.run((delivery) => Effect.sync(() => void done.push(delivery.payload.index))))
      yield* advanceUntil(() => new Set(done).size >= 20, 10, 60_000)
      yield* TestClock.adjust(Metrics.SampleInterval)
      expect((yield* WorkPulling.stats(dispatcher)).oldestPendingAgeMillis).toBe(0)
      expect(yield* gauge(Metrics.keys.oldestPendingAge, dispatcher, "work_producer")).toBe(0)
      const confirmed = (yield* WorkPulling.stats(dispatcher)).confirmed
      expect(yield* counter(Metrics.keys.confirmed, dispatcher, "work_producer")).toBe(confirmed)
      expect(yield* histogramCount(Metrics.keys.endToEndLatency, dispatcher, "work_producer")).toBe(confirmed)
    }).pipe(Effect.provide(memorySystem()))
  })
})
