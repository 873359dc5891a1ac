/**
 * A randomized point-to-point fault run derived from one seed, and the guarantees it must keep.
 * The run happens in a "world": one system on the faulty memory transport under TestClock, or
 * two nodes on real sockets wrapped by the faulty layer under the live clock.
 */
import { Context, Effect, Exit, Fiber, Layer, Queue, Schema, Scope } from "effect"
import type { Duration } from "effect"
import * as Consumer from "../../src/Consumer.js"
import { flakyProducerQueue } from "../../src/DurableQueue/FlakyQueue.js"
import * as MemoryProducerQueue from "../../src/DurableQueue/MemoryProducerQueue.js"
import * as SeededRandom from "../../src/internal/SeededRandom.js"
import type { PeerAddress } from "../../src/Protocol/Config.js"
import * as Producer from "../../src/Producer.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as FaultyTransport from "../../src/Transport/FaultyTransport.js"
import type { FaultOptions } from "../../src/Transport/FaultyTransport.js"
import { advanceUntil } from "./Harness.js"
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

/**
 * A plan for real sockets: the same seeded plan with half the loss and a window of at least 2.
 * Under the live clock every lost registration round trip costs real resend intervals, and the
 * heaviest memory plans (50% loss each way, window 1) would take minutes.
 */
export const socketPlanFor = (seed: number, restarts: boolean): FaultPlan => {
  const plan = planFor(seed, restarts)
  return { ...plan, dropToProducer: plan.dropToProducer / 2, dropToConsumer: plan.dropToConsumer / 2, window: Math.max(2, plan.window) }
}

interface Received {
  readonly incarnation: number
  readonly index: number
  /** The payload arrived exactly as sent (for chunked plans: reassembled whole). */
  readonly intact: boolean
}

/** Where a run happens: the systems of each side, how they name each other, how time passes. */
export interface FaultWorld {
  readonly producer: Context.Context<ReliableSystem.ReliableSystem>
  readonly consumer: Context.Context<ReliableSystem.ReliableSystem>
  readonly remoteConsumer?: PeerAddress
  readonly remoteProducer?: PeerAddress
  readonly resendInterval: Duration.DurationInput
  /** Lets time pass until `done` holds; fails after `limitMs`. */
  readonly until: (done: () => boolean, limitMs: number) => Effect.Effect<void, Error>
}

const faultOptions = (plan: FaultPlan, seed = plan.seed): FaultOptions => ({
  seed,
  drop: { toProducer: plan.dropToProducer, toConsumer: plan.dropToConsumer },
  duplicate: plan.duplicate,
  reorder: plan.reorder,
  reorderWindow: "30 millis"
})

/** One system on the faulty memory transport, timed by TestClock. */
export const memoryWorld = (plan: FaultPlan): Effect.Effect<FaultWorld, never, Scope.Scope> =>
  Effect.map(
    Effect.orDie(Layer.build(ReliableSystem.layer().pipe(Layer.provideMerge(FaultyTransport.layerFaulty(faultOptions(plan)))))),
    (context) => ({
      producer: context,
      consumer: context,
      resendInterval: "100 millis",
      until: (done, limitMs) => advanceUntil(done, 25, limitMs)
    })
  )

/**
 * Two nodes on TCP sockets on 127.0.0.1, each node's outgoing envelopes passed through the faulty
 * layer (its own seed, derived from the plan's), under the live clock: fault decisions replay
 * from the seed, their interleaving with real I/O does not.
 */
export const socketWorld = (plan: FaultPlan): Effect.Effect<FaultWorld, Error, Scope.Scope> =>
  Effect.gen(function*() {
    // Lookups cross the faulty links too; a short timeout keeps a dropped one from costing 500ms.
    const a = yield* startNode({ lookupTimeout: "100 millis", wrap: (socket) => FaultyTransport.layerWithFaults(faultOptions(plan, plan.seed * 2)).pipe(Layer.provide(socket)) })
    const b = yield* startNode({ lookupTimeout: "100 millis", wrap: (socket) => FaultyTransport.layerWithFaults(faultOptions(plan, plan.seed * 2 + 1)).pipe(Layer.provide(socket)) })
    const world: FaultWorld = {
      producer: a.context,
      consumer: b.context,
      remoteConsumer: { host, port: b.port },
      remoteProducer: { host, port: a.port },
      resendInterval: "50 millis",
      // The limit is test time for TestClock worlds; real time here is capped well below it.
      until: (done, limitMs) => waitUntil("the fault run's condition", done, Math.min(limitMs, 45_000))
    }
    return world
  }).pipe(Effect.mapError((error) => new Error(String(error))))

/** Runs one plan in a world; returns what the consumer incarnations received, in order. */
export const runPlan = (plan: FaultPlan, makeWorld: (plan: FaultPlan) => Effect.Effect<FaultWorld, Error, Scope.Scope> = memoryWorld) =>
  Effect.gen(function*() {
    const world = yield* makeWorld(plan)
    const queue = plan.durable === undefined
      ? undefined
      : yield* flakyProducerQueue(yield* MemoryProducerQueue.makeMemory, { seed: plan.seed, failureRate: plan.durable.failureRate })
    const producer = yield* Producer.make({
      name: "orders-out",
      consumer: "orders-in",
      payload: orderSchema(plan),
      retryInterval: "50 millis",
      ...(plan.chunkSize === undefined ? {} : { chunkSize: plan.chunkSize }),
      ...(queue === undefined ? {} : { durableQueue: queue }),
      ...(world.remoteConsumer === undefined ? {} : { remoteConsumer: world.remoteConsumer })
    }).pipe(Effect.provide(world.producer))
    const producerSystem = Context.get(world.producer, ReliableSystem.ReliableSystem)
    // The operator: a flaky queue can exhaust a reload's retries (a terminal Load event); respawn.
    const failures = yield* producerSystem.subscribeFailures
    const failed: Array<unknown> = []
    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(
      Effect.tap(Queue.take(failures), (failure) => void failed.push(failure)),
      producerSystem.respawn("orders-out").pipe(Effect.ignore)
    )))
    const producerRestarts = [...(plan.durable?.producerRestartsAfter ?? [])]
    const received: Array<Received> = []
    let incarnation = 0
    let scope: Scope.CloseableScope | undefined
    let consumer: Consumer.Consumer<unknown> | undefined

    const startConsumer = Effect.gen(function*() {
      incarnation++
      const mine = incarnation
      scope = yield* Scope.make()
      const made = yield* Consumer.make({
        name: "orders-in",
        producer: "orders-out",
        payload: orderSchema(plan),
        lendPayloads: plan.lent === true,
        window: plan.window,
        resendInterval: world.resendInterval,
        ...(world.remoteProducer === undefined ? {} : { remoteProducer: world.remoteProducer })
      }).pipe(Scope.extend(scope), Effect.provide(world.consumer))
      consumer = made as Consumer.Consumer<unknown>
      yield* Effect.forkIn(made.run((delivery) =>
        Effect.sync(() => void received.push({
          incarnation: mine,
          index: delivery.payload.index,
          intact: delivery.payload.pad === padFor(plan, delivery.payload.index)
        }))
      ), scope)
    })

    yield* startConsumer
    const sending = yield* Effect.fork(Effect.forEach(
      Array.from({ length: plan.messages }, (_, index) => index),
      (index) => {
        const pad = padFor(plan, index)
        return producer.send(pad === undefined ? { index } : { index, pad }, { messageId: `order-${index}` })
      },
      { discard: true }
    ))

    const restarts = [...plan.restartsAfter]
    const allSeen = () => new Set(received.map((entry) => entry.index)).size === plan.messages
    const restartDue = () =>
      (restarts.length > 0 && received.length >= restarts[0]) ||
      (producerRestarts.length > 0 && received.length >= producerRestarts[0])
    /** What a stuck run had got to, printed before it fails. */
    const report = (where: string) =>
      Effect.gen(function*() {
        const seen = new Set(received.map((entry) => entry.index))
        const missing = Array.from({ length: plan.messages }, (_, index) => index).filter((index) => !seen.has(index))
        console.error(
          `stuck ${where}: received ${received.length}, distinct ${seen.size}, missing ${missing.slice(0, 10).join(",")}; ` +
            `consumer restarts left ${restarts}, producer restarts left ${producerRestarts}; producer`,
          yield* producer.stats,
          "consumer",
          yield* consumer!.stats,
          "failures",
          failed
        )
      })
    const limit = Number(process.env.FAULT_LIMIT ?? 600_000)
    yield* world.until(() => restartDue() || allSeen(), limit).pipe(Effect.tapError(() => report("before any restart")))
    while (restartDue()) {
      if (producerRestarts.length > 0 && received.length >= producerRestarts[0]) {
        producerRestarts.shift()
        yield* producerSystem.respawn("orders-out")
      } else {
        restarts.shift()
        yield* Scope.close(scope!, Exit.void)
        yield* startConsumer
      }
      yield* world.until(() => restartDue() || allSeen(), limit).pipe(Effect.tapError(() => report("during restarts")))
    }
    yield* world.until(allSeen, limit).pipe(Effect.tapError(() => report("after the restarts")))
    // Every message can be in before the last send returns: a durable resubmission may still be
    // retrying its store on the world's clock, which must keep moving until it answers.
    yield* world.until(() => sending.unsafePoll() !== null, limit).pipe(Effect.tapError(() => report("waiting for the last send")))
    yield* Fiber.join(sending)
    yield* Scope.close(scope!, Exit.void)
    return received
  }).pipe(Effect.scoped)

/** Checks the guarantees; returns a description of the first violation, or undefined. */
export const violation = (plan: FaultPlan, received: ReadonlyArray<Received>): string | undefined => {
  const seen = new Set(received.map((entry) => entry.index))
  for (let index = 0; index < plan.messages; index++) {
    if (!seen.has(index)) return `message ${index} never delivered`
  }
  const damaged = received.find((entry) => !entry.intact)
  if (damaged !== undefined) return `message ${damaged.index} arrived damaged`
  if (plan.durable !== undefined) return orderedAtLeastOnce(received.map((entry) => entry.index))
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

/**
 * At least once, in order, across producer sessions: deliveries form contiguous runs, and a new
 * run (a redelivery after a restart) may go back but never skips past what was delivered.
 */
const orderedAtLeastOnce = (indices: ReadonlyArray<number>): string | undefined => {
  let highest = -1
  for (let position = 0; position < indices.length; position++) {
    const index = indices[position]
    if (index > highest + 1) return `delivery skipped from ${highest} to ${index}: ${indices.join(",")}`
    highest = Math.max(highest, index)
  }
  return undefined
}
