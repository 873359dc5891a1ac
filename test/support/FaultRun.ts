/**
 * A randomized point-to-point fault run derived from one seed, and the guarantees it must keep:
 * the test kit's fault run (`effect-reliable/testing`) applied to this library's order flow, with
 * its extras (a durable producer on a flaky queue, chunked and lent payloads). The run happens in
 * a "world": one system on the faulty memory transport under TestClock, or two nodes on real
 * sockets wrapped by the faulty layer under the live clock.
 */
import { Effect, Layer, Schema } from "effect"
import type { Duration, Scope } from "effect"
import * as Consumer from "../../src/Consumer.js"
import { flakyProducerQueue } from "../../src/DurableQueue/FlakyQueue.js"
import * as MemoryProducerQueue from "../../src/DurableQueue/MemoryProducerQueue.js"
import * as SeededRandom from "../../src/internal/SeededRandom.js"
import type { PeerAddress } from "../../src/Protocol/Config.js"
import * as Producer from "../../src/Producer.js"
import * as Testing from "../../src/Testing.js"
import * as FaultyTransport from "../../src/Transport/FaultyTransport.js"
import type { Transport } from "../../src/Transport/Transport.js"
import { host, startNode, waitUntil } from "./Nodes.js"

const Order = Schema.Struct({ index: Schema.Number, pad: Schema.optional(Schema.String) })

/** The same order carried as binary (its JSON's UTF-8 bytes), so a consumer may lend the bytes. */
const OrderBytes = Schema.transform(Schema.Uint8ArrayFromSelf, Order, {
  strict: true,
  decode: (bytes) => JSON.parse(new TextDecoder().decode(bytes)) as typeof Order.Encoded,
  encode: (order) => new TextEncoder().encode(JSON.stringify(order))
})

/** The plan's order Schema; both have the same type side, and endpoints never see the encoded one. */
const orderSchema = (plan: FaultPlan): typeof Order => (plan.lent === true ? OrderBytes : Order) as unknown as typeof Order

export interface FaultPlan extends Testing.FaultPlan {
  /** A durable producer on a flaky queue, respawned (a crash) after these many deliveries. */
  readonly durable?: {
    readonly failureRate: number
    readonly producerRestartsAfter: ReadonlyArray<number>
  }
  /** Producer chunk size; each message is then padded to 2..5 chunks. */
  readonly chunkSize?: number
  /** Orders travel as binary payloads to a consumer that lends them (`lendPayloads`). */
  readonly lent?: boolean
}

/** The most chunks a message of a chunked plan takes. */
const MaxChunksPerMessage = 5

/** A plan with chunking at `chunkSize`: every message several chunks, a window that fits them. */
export const withChunks = (plan: FaultPlan, chunkSize: number): FaultPlan => ({
  ...plan,
  chunkSize,
  window: Math.max(MaxChunksPerMessage, plan.window)
})

/** Room in a chunked message for its JSON around the padding (`{"index":…,"pad":"…"}`). */
const OrderJsonBytes = 64

/**
 * The padding of message `index` in a chunked plan: between 1 and 4 chunk sizes, plus less than
 * one more with the rest of its JSON, so the message takes 2..5 chunks and always fits the window.
 */
const padFor = (plan: FaultPlan, index: number): string | undefined =>
  plan.chunkSize === undefined
    ? undefined
    : "x".repeat(
      plan.chunkSize * (1 + ((index * 7 + plan.seed) % (MaxChunksPerMessage - 1))) + ((index * 131) % (plan.chunkSize - OrderJsonBytes))
    )

/** A durable plan: the same seeded faults plus a flaky durable queue and producer crashes. */
export const durablePlanFor = (seed: number, restarts: boolean): FaultPlan => {
  const plan = planFor(seed, restarts)
  const random = SeededRandom.make(seed * 7 + 1)
  return {
    ...plan,
    durable: {
      failureRate: 0.05 + random.next() * 0.2,
      producerRestartsAfter: [random.int(1, plan.messages / 2), random.int(plan.messages / 2, plan.messages - 1)]
    }
  }
}

/** Derives a whole run from one seed (the kit's `faultPlan`). */
export const planFor = (seed: number, restarts: boolean): FaultPlan => Testing.faultPlan(seed, { restarts })

/**
 * A plan for real sockets: the same seeded plan with half the loss and a window of at least 2.
 * Under the live clock every lost registration round trip costs real resend intervals, and the
 * heaviest memory plans (50% loss each way, window 1) would take minutes.
 */
export const socketPlanFor = (seed: number, restarts: boolean): FaultPlan => {
  const plan = planFor(seed, restarts)
  return { ...plan, dropToProducer: plan.dropToProducer / 2, dropToConsumer: plan.dropToConsumer / 2, window: Math.max(2, plan.window) }
}

/** Where a run happens (the kit's world) and the delays its endpoints use. */
export interface FaultWorld extends Testing.FaultWorld {
  readonly remoteConsumer?: PeerAddress
  readonly remoteProducer?: PeerAddress
  readonly resendInterval: Duration.DurationInput
}

/** One system on the faulty memory transport, timed by TestClock (the kit's memory world). */
export const memoryWorld = (plan: FaultPlan): Effect.Effect<FaultWorld, never, Scope.Scope> =>
  Effect.map(Testing.memoryWorld(plan), (world) => ({ ...world, resendInterval: "100 millis" }))

/**
 * Two nodes on TCP sockets on 127.0.0.1, each node's outgoing envelopes passed through the faulty
 * layer (its own seed, derived from the plan's), under the live clock: fault decisions replay
 * from the seed, their interleaving with real I/O does not.
 */
export const socketWorld = (plan: FaultPlan): Effect.Effect<FaultWorld, Error, Scope.Scope> =>
  Effect.gen(function*() {
    // Lookups cross the faulty links too; a short timeout keeps a dropped one from costing 500ms.
    const faulty = (seed: number) => (socket: Layer.Layer<Transport>) =>
      FaultyTransport.layerWithFaults(Testing.faultOptions(plan, seed)).pipe(Layer.provide(socket))
    const a = yield* startNode({ lookupTimeout: "100 millis", wrap: faulty(plan.seed * 2) })
    const b = yield* startNode({ lookupTimeout: "100 millis", wrap: faulty(plan.seed * 2 + 1) })
    const world: FaultWorld = {
      producer: a.context,
      consumer: b.context,
      remoteConsumer: { host, port: b.port },
      remoteProducer: { host, port: a.port },
      resendInterval: "50 millis",
      // The limit is test time for TestClock worlds; real time here is capped well below it.
      until: (label, done, limitMs, dump) =>
        waitUntil(label, done, Math.min(limitMs, 45_000)).pipe(Effect.tapError(() => Effect.flatMap(dump, (state) => Effect.sync(() => console.error(label, JSON.stringify(state))))))
    }
    return world
  }).pipe(Effect.mapError((error) => new Error(String(error))))

/** Runs one plan in a world (the kit's `runFaults`); returns what the consumer incarnations received, in order. */
export const runPlan = (plan: FaultPlan, makeWorld: (plan: FaultPlan) => Effect.Effect<FaultWorld, Error, Scope.Scope> = memoryWorld) =>
  Effect.gen(function*() {
    const world = yield* makeWorld(plan)
    const queue = plan.durable === undefined
      ? undefined
      : yield* flakyProducerQueue(yield* MemoryProducerQueue.makeMemory, { seed: plan.seed, failureRate: plan.durable.failureRate })
    const result = yield* Testing.runFaults<typeof Order.Type>({
      plan: plan.durable === undefined ? plan : { ...plan, producerRestartsAfter: plan.durable.producerRestartsAfter },
      world: Effect.succeed(world),
      within: Number(process.env.FAULT_LIMIT ?? 600_000),
      producerName: "orders-out",
      producer: () =>
        Producer.make({
          name: "orders-out",
          consumer: "orders-in",
          payload: orderSchema(plan),
          retryInterval: "50 millis",
          ...(plan.chunkSize === undefined ? {} : { chunkSize: plan.chunkSize }),
          ...(queue === undefined ? {} : { durableQueue: queue }),
          ...(world.remoteConsumer === undefined ? {} : { remoteConsumer: world.remoteConsumer })
        }),
      consumer: () =>
        Consumer.make({
          name: "orders-in",
          producer: "orders-out",
          payload: orderSchema(plan),
          lendPayloads: plan.lent === true,
          window: plan.window,
          resendInterval: world.resendInterval,
          ...(world.remoteProducer === undefined ? {} : { remoteProducer: world.remoteProducer })
        }),
      message: (index) => {
        const pad = padFor(plan, index)
        return pad === undefined ? { index } : { index, pad }
      },
      intact: (index, order) => order.index === index && order.pad === padFor(plan, index)
    })
    return result.received
  }).pipe(Effect.scoped)

/** Checks the guarantees (the kit's `checkDeliveries`); a description of the first violation, or undefined. */
export const violation = (plan: FaultPlan, received: ReadonlyArray<Testing.FaultRunReceived>): string | undefined =>
  Testing.checkDeliveries(plan, received, plan.durable === undefined ? "exactlyOnce" : "atLeastOnce")
