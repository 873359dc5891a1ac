/**
 * Seeded fault runs of a point-to-point flow: one seed decides the loss each way, duplicates,
 * reordering, the consumer window and when the consumer (and, for durable flows, the producer)
 * restarts. The run sends numbered messages through the flow made by the caller's own
 * constructors, records what each consumer incarnation received, and checks the guarantees:
 * every message delivered, intact, in order; exactly once when nothing restarts; contiguous per
 * consumer incarnation when it does; ordered at least once across producer restarts. A failing
 * run names its seed, which replays it.
 */
import { Context, Data, Duration, Effect, Exit, Fiber, Layer, Queue, Scope } from "effect"
import type { Consumer } from "../internal/ConsumerEndpoint.js"
import type { Producer } from "../internal/ProducerEndpoint.js"
import { ReliableSystem } from "../internal/ReliableSystemTag.js"
import * as SeededRandom from "../internal/SeededRandom.js"
import type { ReliableDeliveryFailed } from "../Protocol/Failure.js"
import { layer as systemLayer, snapshot } from "../ReliableSystem.js"
import { layerFaulty } from "../Transport/FaultyTransport.js"
import type { FaultOptions } from "../Transport/FaultyTransport.js"
import { advanceUntil } from "./Advance.js"

export interface FaultPlan {
  readonly seed: number
  readonly messages: number
  readonly dropToProducer: number
  readonly dropToConsumer: number
  readonly duplicate: number
  readonly reorder: number
  /** Deliveries after which the consumer is closed and made again; empty: never. */
  readonly restartsAfter: ReadonlyArray<number>
  /** A consumer window the caller may use (`plan.window`); 1..20. */
  readonly window: number
  /** Deliveries after which the producer is respawned (a crash); for durable producers. */
  readonly producerRestartsAfter?: ReadonlyArray<number>
}

/** Derives a whole run from one seed: 30..80 messages, 10-50% loss each way, and so on. */
export const faultPlan = (seed: number, options: { readonly restarts?: boolean } = {}): FaultPlan => {
  const random = SeededRandom.make(seed)
  const messages = random.int(30, 80)
  return {
    seed,
    messages,
    dropToProducer: 0.1 + random.next() * 0.4,
    dropToConsumer: 0.1 + random.next() * 0.4,
    duplicate: random.next() * 0.2,
    reorder: random.next() * 0.3,
    restartsAfter: options.restarts === true ? [random.int(1, messages / 2), random.int(messages / 2, messages - 1)] : [],
    window: random.int(1, 20)
  }
}

/** The faulty transport's options for a plan (its seed by default). */
export const faultOptions = (plan: FaultPlan, seed: number = plan.seed): FaultOptions => ({
  seed,
  drop: { toProducer: plan.dropToProducer, toConsumer: plan.dropToConsumer },
  duplicate: plan.duplicate,
  reorder: plan.reorder,
  reorderWindow: "30 millis"
})

/** Where a run happens: the systems of each side, and how time passes until a condition holds. */
export interface FaultWorld {
  readonly producer: Context.Context<ReliableSystem>
  readonly consumer: Context.Context<ReliableSystem>
  /** Lets time pass until `done` holds; fails after `limitMs`. */
  readonly until: (label: string, done: () => boolean, limitMs: number, dump: Effect.Effect<unknown>) => Effect.Effect<void, Error>
}

/** One system on the faulty memory transport (the plan's faults), timed by the TestClock. */
export const memoryWorld = (plan: FaultPlan): Effect.Effect<FaultWorld, never, Scope.Scope> =>
  Effect.map(Effect.orDie(Layer.build(systemLayer().pipe(Layer.provideMerge(layerFaulty(faultOptions(plan)))))), (context) => ({
    producer: context,
    consumer: context,
    until: (label, done, limitMs, dump) => advanceUntil(done, { label, step: "25 millis", within: limitMs, dump })
  }))

/** One delivery the run saw. */
export interface FaultRunReceived {
  /** 1 for the first consumer, +1 per restart. */
  readonly incarnation: number
  readonly index: number
  /** The payload arrived as sent (`intact` of the options). */
  readonly intact: boolean
}

export interface FaultRunResult {
  readonly received: ReadonlyArray<FaultRunReceived>
  /** Terminal failures the producer's system published (each answered by a respawn). */
  readonly failures: ReadonlyArray<ReliableDeliveryFailed>
}

export interface FaultRunFlow<A> {
  /** Makes the producer, in the world's producer system, once. */
  readonly producer: (world: FaultWorld) => Effect.Effect<Producer<A>, unknown, ReliableSystem | Scope.Scope>
  /** Makes the consumer, in the world's consumer system, at the start and after each restart. */
  readonly consumer: (world: FaultWorld) => Effect.Effect<Consumer<A>, unknown, ReliableSystem | Scope.Scope>
  /** The payload of message `index` (sent with `messageId` `message-<index>`). */
  readonly message: (index: number) => A
  /** Whether a delivered payload is intact; default: always. */
  readonly intact?: (index: number, payload: A) => boolean
  /**
   * The producer endpoint's name: it is respawned after each terminal failure (as an operator
   * would) and after `plan.producerRestartsAfter` deliveries.
   */
  readonly producerName?: string
}

export interface FaultRunOptions<A> extends FaultRunFlow<A> {
  readonly plan: FaultPlan
  /** Default: `memoryWorld(plan)`. */
  readonly world?: Effect.Effect<FaultWorld, Error, Scope.Scope>
  /** The most time to let pass for each stage of the run; default 600 seconds. */
  readonly within?: Duration.DurationInput
}

const messageIdPrefix = "message-"

/** Runs one plan through the flow; returns what the consumer incarnations received, in order. */
export const runFaults = <A>(options: FaultRunOptions<A>): Effect.Effect<FaultRunResult, Error> =>
  Effect.scoped(Effect.gen(function*() {
    const { plan } = options
    const world = yield* (options.world ?? memoryWorld(plan))
    const limit = Duration.toMillis(options.within ?? Duration.seconds(600))
    const producer = yield* Effect.mapError(Effect.provide(options.producer(world), world.producer), (cause) => new Error(`the producer: ${String(cause)}`))
    const producerSystem = Context.get(world.producer, ReliableSystem)
    const failed: Array<ReliableDeliveryFailed> = []
    const failures = yield* producerSystem.subscribeFailures
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(failures), (failure) => {
      failed.push(failure)
      return options.producerName === undefined ? Effect.void : Effect.ignore(producerSystem.respawn(options.producerName))
    })))
    const received: Array<FaultRunReceived> = []
    const consumers = { incarnation: 0, scope: undefined as Scope.CloseableScope | undefined }
    const startConsumer = Effect.gen(function*() {
      const mine = ++consumers.incarnation
      const scope = yield* Scope.make()
      consumers.scope = scope
      const consumer = yield* options.consumer(world).pipe(
        Scope.extend(scope),
        Effect.provide(world.consumer),
        Effect.mapError((cause) => new Error(`the consumer: ${String(cause)}`))
      )
      yield* Effect.forkIn(consumer.run((delivery) =>
        Effect.sync(() => {
          const index = Number(delivery.messageId.slice(messageIdPrefix.length))
          received.push({ incarnation: mine, index, intact: options.intact?.(index, delivery.payload) ?? true })
        })
      ), scope)
    })
    yield* startConsumer
    const sending = yield* Effect.fork(Effect.forEach(
      Array.from({ length: plan.messages }, (_, index) => index),
      (index) => producer.send(options.message(index), { messageId: `${messageIdPrefix}${index}` }),
      { discard: true }
    ))
    const restarts = [...plan.restartsAfter]
    const producerRestarts = [...(plan.producerRestartsAfter ?? [])]
    const allSeen = () => new Set(received.map((entry) => entry.index)).size === plan.messages
    const consumerDue = () => restarts.length > 0 && received.length >= restarts[0]
    const producerDue = () => producerRestarts.length > 0 && received.length >= producerRestarts[0]
    const dump = Effect.map(Effect.provide(snapshot, world.producer), (system) => {
      const seen = new Set(received.map((entry) => entry.index))
      const missing = Array.from({ length: plan.messages }, (_, index) => index).filter((index) => !seen.has(index))
      return { seed: plan.seed, received: received.length, missing: missing.slice(0, 10), restarts, producerRestarts, failures: failed.length, system }
    })
    const until = (label: string, done: () => boolean) => world.until(`fault run seed ${plan.seed}: ${label}`, done, limit, dump)
    yield* until("every message or a restart", () => consumerDue() || producerDue() || allSeen())
    while (consumerDue() || producerDue()) {
      if (producerDue()) {
        producerRestarts.shift()
        if (options.producerName !== undefined) yield* Effect.ignore(producerSystem.respawn(options.producerName))
      } else {
        restarts.shift()
        yield* Scope.close(consumers.scope!, Exit.void)
        yield* startConsumer
      }
      yield* until("every message or a restart", () => consumerDue() || producerDue() || allSeen())
    }
    yield* until("every message", allSeen)
    // Every message can be in before the last send returns: a durable resubmission may still be
    // retrying its store on the world's clock, which must keep moving until it answers.
    yield* until("the last send", () => sending.unsafePoll() !== null)
    yield* Effect.mapError(Fiber.join(sending), (cause) => new Error(`a send failed: ${String(cause)}`))
    yield* Scope.close(consumers.scope!, Exit.void)
    return { received, failures: failed }
  }))

/** The guarantee a run is checked against. */
export type FaultGuarantee =
  /** Exactly once in order without restarts; contiguous per consumer incarnation with them. */
  | "exactlyOnce"
  /** Ordered at least once: a redelivery may go back, never skip (durable producers that restart). */
  | "atLeastOnce"

/** Checks the guarantees; a description of the first violation, or undefined. */
export const checkDeliveries = (
  plan: FaultPlan,
  received: ReadonlyArray<FaultRunReceived>,
  guarantee: FaultGuarantee = "exactlyOnce"
): string | undefined => {
  const seen = new Set(received.map((entry) => entry.index))
  for (let index = 0; index < plan.messages; index++) {
    if (!seen.has(index)) return `message ${index} never delivered`
  }
  const damaged = received.find((entry) => !entry.intact)
  if (damaged !== undefined) return `message ${damaged.index} arrived damaged`
  if (guarantee === "atLeastOnce") return orderedAtLeastOnce(received.map((entry) => entry.index))
  if (plan.restartsAfter.length === 0) {
    const indices = received.map((entry) => entry.index)
    const inOrder = indices.length === plan.messages && indices.every((index, position) => index === position)
    return inOrder ? undefined : `fault-free consumer saw duplicates or disorder: ${indices.join(",")}`
  }
  return contiguousPerIncarnation(plan, received)
}

/** Each consumer incarnation received a contiguous run that never skips past what came before. */
const contiguousPerIncarnation = (plan: FaultPlan, received: ReadonlyArray<FaultRunReceived>): string | undefined => {
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
  for (const index of indices) {
    if (index > highest + 1) return `delivery skipped from ${highest} to ${index}: ${indices.join(",")}`
    highest = Math.max(highest, index)
  }
  return undefined
}

/** A fault run broke a guarantee (or could not finish); its seed replays it. */
export class FaultRunFailed extends Data.TaggedError("FaultRunFailed")<{
  readonly plan: FaultPlan
  readonly problem: string
}> {
  override get message(): string {
    return `fault run seed ${this.plan.seed} failed: ${this.problem} (replay it with seed ${this.plan.seed}; plan ${JSON.stringify(this.plan)})`
  }
}

/** `runFaults` then `checkDeliveries`: fails with `FaultRunFailed` naming the seed. */
export const faultRun = <A>(
  options: FaultRunOptions<A> & { readonly guarantee?: FaultGuarantee }
): Effect.Effect<FaultRunResult, FaultRunFailed> =>
  runFaults(options).pipe(
    Effect.catchAll((error) => Effect.fail(new FaultRunFailed({ plan: options.plan, problem: error.message }))),
    Effect.flatMap((result) => {
      const problem = checkDeliveries(options.plan, result.received, options.guarantee)
      return problem === undefined ? Effect.succeed(result) : Effect.fail(new FaultRunFailed({ plan: options.plan, problem }))
    })
  )
