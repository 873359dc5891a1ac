/**
 * A randomized point-to-point fault run derived from one seed, and the guarantees it must keep.
 */
import { Effect, Exit, Fiber, Layer, Schema, Scope } from "effect"
import * as Consumer from "../../src/Consumer.js"
import * as SeededRandom from "../../src/internal/SeededRandom.js"
import * as Producer from "../../src/Producer.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as FaultyTransport from "../../src/Transport/FaultyTransport.js"
import { advanceUntil } from "./Harness.js"

const Order = Schema.Struct({ index: Schema.Number })

export interface FaultPlan {
  readonly seed: number
  readonly messages: number
  readonly dropToProducer: number
  readonly dropToConsumer: number
  readonly duplicate: number
  readonly reorder: number
  /** Deliveries after which the consumer is closed and made again; empty: never. */
  readonly restartsAfter: ReadonlyArray<number>
  readonly window: number
}

/** Derives a whole run from one seed. */
export const planFor = (seed: number, restarts: boolean): FaultPlan => {
  const random = SeededRandom.make(seed)
  const messages = random.int(30, 80)
  return {
    seed,
    messages,
    dropToProducer: 0.1 + random.next() * 0.4,
    dropToConsumer: 0.1 + random.next() * 0.4,
    duplicate: random.next() * 0.2,
    reorder: random.next() * 0.3,
    restartsAfter: restarts ? [random.int(1, messages / 2), random.int(messages / 2, messages - 1)] : [],
    window: random.int(1, 20)
  }
}

interface Received {
  readonly incarnation: number
  readonly index: number
}

/** Runs one plan under TestClock; returns what the consumer incarnations received, in order. */
export const runPlan = (plan: FaultPlan) =>
  Effect.gen(function*() {
    const producer = yield* Producer.make({ name: "orders-out", consumer: "orders-in", payload: Order, retryInterval: "50 millis" })
    const received: Array<Received> = []
    let incarnation = 0
    let scope: Scope.CloseableScope | undefined

    const startConsumer = Effect.gen(function*() {
      incarnation++
      const mine = incarnation
      scope = yield* Scope.make()
      const consumer = yield* Consumer.make({
        name: "orders-in",
        producer: "orders-out",
        payload: Order,
        window: plan.window,
        resendInterval: "100 millis"
      }).pipe(Scope.extend(scope))
      yield* Effect.forkIn(consumer.run((delivery) => Effect.sync(() => void received.push({ incarnation: mine, index: delivery.payload.index }))), scope)
    })

    yield* startConsumer
    const sending = yield* Effect.fork(Effect.forEach(
      Array.from({ length: plan.messages }, (_, index) => index),
      (index) => producer.send({ index }, { messageId: `order-${index}` }),
      { discard: true }
    ))

    const restarts = [...plan.restartsAfter]
    const allSeen = () => new Set(received.map((entry) => entry.index)).size === plan.messages
    yield* advanceUntil(() => {
      if (restarts.length > 0 && received.length >= restarts[0]) return true
      return allSeen()
    }, 25, Number(process.env.FAULT_LIMIT ?? 600_000))
    while (restarts.length > 0) {
      restarts.shift()
      yield* Scope.close(scope!, Exit.void)
      yield* startConsumer
      yield* advanceUntil(() => (restarts.length > 0 && received.length >= restarts[0]) || allSeen(), 25, Number(process.env.FAULT_LIMIT ?? 600_000))
    }
    yield* advanceUntil(allSeen, 25, Number(process.env.FAULT_LIMIT ?? 600_000)).pipe(
      Effect.tapError(() =>
        Effect.gen(function*() {
          const seen = new Set(received.map((entry) => entry.index))
          const missing = Array.from({ length: plan.messages }, (_, index) => index).filter((index) => !seen.has(index))
          console.error(`stuck: received ${received.length}, missing ${missing.slice(0, 10).join(",")}`, yield* producer.stats)
        })
      )
    )
    yield* Fiber.join(sending)
    yield* Scope.close(scope!, Exit.void)
    return received
  }).pipe(
    Effect.scoped,
    Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(FaultyTransport.layerFaulty({
      seed: plan.seed,
      drop: { toProducer: plan.dropToProducer, toConsumer: plan.dropToConsumer },
      duplicate: plan.duplicate,
      reorder: plan.reorder,
      reorderWindow: "30 millis"
    }))))
  )

/** Checks the guarantees; returns a description of the first violation, or undefined. */
export const violation = (plan: FaultPlan, received: ReadonlyArray<Received>): string | undefined => {
  const seen = new Set(received.map((entry) => entry.index))
  for (let index = 0; index < plan.messages; index++) {
    if (!seen.has(index)) return `message ${index} never delivered`
  }
  if (plan.restartsAfter.length === 0) {
    const indices = received.map((entry) => entry.index)
    const expected = Array.from({ length: plan.messages }, (_, index) => index)
    if (JSON.stringify(indices) !== JSON.stringify(expected)) return `fault-free consumer saw duplicates or disorder: ${indices.join(",")}`
    return undefined
  }
  let previousLast = -1
  for (let incarnation = 1; incarnation <= plan.restartsAfter.length + 1; incarnation++) {
    const mine = received.filter((entry) => entry.incarnation === incarnation).map((entry) => entry.index)
    if (mine.length === 0) continue
    if (mine[0] > previousLast + 1) return `incarnation ${incarnation} started at ${mine[0]}, skipping after ${previousLast}`
    for (let position = 1; position < mine.length; position++) {
      if (mine[position] !== mine[position - 1] + 1) return `incarnation ${incarnation} not contiguous: ${mine.join(",")}`
    }
    previousLast = Math.max(previousLast, mine[mine.length - 1])
  }
  return undefined
}

