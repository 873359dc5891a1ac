/**
 * Work-pulling: one producer endpoint hands a stream of jobs to a dynamic pool of workers. Each
 * worker pulls through its own demand window, jobs go round-robin to workers with free demand,
 * and a lost worker's unconfirmed jobs go back to the head of the pending pool for survivors.
 *
 * The endpoints are the point-to-point ones: `producer` returns a `Producer<A>` and `worker` a
 * `Consumer<A>`, so code written against those types runs unchanged on either pattern. Delivery
 * is at least once, with no ordering across workers: deduplicate by `messageId` against shared
 * state when effects must happen once.
 */
import { Effect } from "effect"
import type { Duration, Schedule, Schema, Scope } from "effect"
import type * as Consumer from "./Consumer.js"
import * as ConsumerEndpoint from "./internal/ConsumerEndpoint.js"
import * as WorkPullingController from "./Controller/WorkPullingController.js"
import type { WorkPullingStats } from "./Controller/WorkPullingController.js"
import type { DurableWorkQueueService } from "./DurableQueue/DurableWorkQueue.js"
import * as ProducerEndpoint from "./internal/ProducerEndpoint.js"
import * as Producer from "./Producer.js"
import * as Config from "./Protocol/Config.js"
import { EndpointNotFound, ReliableConfigError } from "./Protocol/Errors.js"
import type { ReliableEndpointConfigError } from "./Protocol/Errors.js"
import * as PayloadCodec from "./Protocol/PayloadCodec.js"
import { ReliableSystem } from "./ReliableSystem.js"

export type { WorkerStats, WorkPullingStats } from "./Controller/WorkPullingController.js"

export interface ProducerOptions<A, I> {
  /** This endpoint's name, unique on its system. Workers name it; the producer names no peer. */
  readonly name: string
  /** Every payload is encoded with this Schema before it is stored. */
  readonly payload: Schema.Schema<A, I, never>
  /**
   * Persist accepted jobs, so a producer crash, restart or respawn loses none: the next
   * controller reloads the accepted, unconfirmed jobs and dispatches them again. Default none.
   */
  readonly durableWorkQueue?: DurableWorkQueueService
  /** Publish a `DeliveryConfirmed` on `confirmations` whenever a worker confirms a job; default off. */
  readonly deliveryConfirmation?: boolean
  /** Cadence for offering an unanswered grant again and for re-checking bound workers; default 500ms. */
  readonly retryInterval?: Duration.DurationInput
  /** Durable operation retries before the controller restarts; default 3 attempts, 100ms apart. */
  readonly queueRetry?: Config.QueueRetry
  /**
   * A durable queue call not answered within this long counts as backend trouble (retried like
   * a refused connection); default 5 seconds.
   */
  readonly queueTimeout?: Duration.DurationInput
  /**
   * While the durable queue does not answer, the reload after a restart is retried for as long as
   * it takes: from `initial` (default 100ms), doubling, never more than `max` (default 1s) apart.
   */
  readonly queueBackoff?: Config.QueueBackoff
  /**
   * Closing the endpoint's scope waits this long at most for its durable queue to finish what it
   * holds (the store in flight, the watermark of every confirmation received), so a clean
   * restart redelivers nothing that was confirmed; default 5 seconds.
   */
  readonly drainTimeout?: Duration.DurationInput
  /**
   * How often the durable queue's backlog (`enqueue`, writers) is read when nothing says it has
   * news; PostgreSQL queues signal new backlog at once, SQLite ones are only polled. Default 1s.
   */
  readonly backlogPollInterval?: Duration.DurationInput
}

export interface WorkerOptions<A, I> {
  /** This endpoint's name, unique on its system. */
  readonly name: string
  /** The work-pulling producer's name. */
  readonly producer: string
  /** Payloads are decoded with this Schema; a payload it cannot decode stops the worker. */
  readonly payload: Schema.Schema<A, I, never>
  /** Jobs the worker may hold at once (demand per request and buffer capacity), 1..10,000; default 50. */
  readonly window?: number
  /** Tick for re-registration, re-delivery and gap re-requests; default 2s. */
  readonly resendInterval?: Duration.DurationInput
  /** Closing the worker lets the jobs in flight finish, waiting at most this long; default 5s. */
  readonly drainTimeout?: Duration.DurationInput
  /**
   * Jobs the worker runs at once (its handler runs up to this many times concurrently); default
   * 1. A worker needs no more fibers than this for N parallel jobs.
   */
  readonly concurrency?: number
  /**
   * The delays before a failed job is tried again (by whichever worker takes it then): the n-th
   * delay comes before attempt n + 1; when the schedule ends the job is dead-lettered. Default:
   * exponential from 200ms, doubling, never more than 10 seconds apart.
   */
  readonly retry?: Schedule.Schedule<unknown, unknown>
  /** Attempts before a failing job is dead-lettered; default 5. */
  readonly maxAttempts?: number
  /** A handler running longer is interrupted and the attempt counts as failed; default off. */
  readonly handlerTimeout?: Duration.DurationInput
}

const producerKeys = Config.optionKeys<ProducerOptions<unknown, unknown>>({
  name: true,
  payload: true,
  durableWorkQueue: true,
  deliveryConfirmation: true,
  retryInterval: true,
  queueRetry: true,
  queueTimeout: true,
  queueBackoff: true,
  drainTimeout: true,
  backlogPollInterval: true
})

const noPeerAddresses = "work-pulling does not support peer addresses; a worker set spanning nodes requires cluster mode"

/** Options a point-to-point producer takes that a work-pulling producer refuses, and why. */
const refusedByProducer: Readonly<Record<string, string>> = {
  chunkSize: "work-pulling producers do not chunk payloads; send payloads that fit one message",
  durableQueue: "a work-pulling producer persists jobs with durableWorkQueue: workers complete jobs out of order, " +
    "which a point-to-point queue's cumulative confirmation watermark cannot express",
  consumer: "a work-pulling producer names no peer: workers name the producer and register with it",
  remoteConsumer: noPeerAddresses
}

const workerKeys = Config.optionKeys<WorkerOptions<unknown, unknown>>({
  name: true,
  producer: true,
  payload: true,
  window: true,
  resendInterval: true,
  drainTimeout: true,
  concurrency: true,
  retry: true,
  maxAttempts: true,
  handlerTimeout: true
})

/** Checks the options of a work-pulling producer. */
const checkProducerOptions = <A, I>(options: ProducerOptions<A, I>) =>
  Effect.zipRight(
    Effect.zipRight(
      Config.checkKeys("WorkPulling.producer", options, producerKeys, refusedByProducer),
      Config.checkSchema("payload", options.payload)
    ),
    Effect.all({
      name: Config.checkName("name", options.name),
      deliveryConfirmation: Config.checkFlag("deliveryConfirmation", options.deliveryConfirmation),
      retryInterval: Config.checkInterval("retryInterval", options.retryInterval, Config.DefaultRetryInterval),
      queueRetry: Config.checkQueuePolicy(options),
      drainTimeout: Config.checkDrainTimeout(options.drainTimeout),
    backlogPollInterval: Config.checkInterval("backlogPollInterval", options.backlogPollInterval, Config.DefaultBacklogPollInterval)
    })
  )

/**
 * A work-pulling producer endpoint: the same `Producer<A>` as point-to-point (`send`, `sendAll`,
 * the `requestNext`/`produce`/`storedAck` contract, `confirmations`). `Stored.seq` and
 * `DeliveryConfirmed.seq` carry the producer-visible store sequence.
 */
export const producer = <A, I>(
  options: ProducerOptions<A, I>
): Effect.Effect<Producer.Producer<A>, ReliableConfigError, ReliableSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const checked = yield* checkProducerOptions(options)
    const system = (yield* ReliableSystem).internal
    const codec = PayloadCodec.make(options.payload)
    const settings: WorkPullingController.WorkPullingSettings = {
      endpoint: checked.name,
      deliveryConfirmation: checked.deliveryConfirmation,
      retryInterval: checked.retryInterval,
      durableQueue: options.durableWorkQueue,
      queueRetry: checked.queueRetry,
      drainTimeout: checked.drainTimeout
    }
    const endpoint = yield* ProducerEndpoint.make({
      system,
      record: { name: checked.name, kind: "WorkProducer", peer: undefined, address: undefined },
      codec,
      start: (hooks) => WorkPullingController.make(settings, codec, system, hooks),
      details: (current, degraded) => ({
        workStats: () => {
          const stats = current()?.workStats()
          return stats === undefined ? undefined : { ...stats, degraded: degraded() }
        }
      }),
      backlog: ProducerEndpoint.backlogOf(options.durableWorkQueue, checked)
    })
    system.registry.setView(checked.name, { stats: endpoint.producer.stats, queue: options.durableWorkQueue, payload: options.payload })
    return endpoint.producer
  })

/** Shows a worker's stats to operators (`ReliableSystem.snapshot`). */
const showView = (options: WorkerOptions<any, any>, consumer: Consumer.Consumer<unknown>) =>
  Effect.map(ReliableSystem, (system) =>
    system.internal.registry.setView(options.name, { stats: consumer.stats, payload: options.payload, window: options.window ?? Config.DefaultWindow }))

/**
 * A worker endpoint: the same `Consumer<A>` as point-to-point (`run(handler)`, `deliveries`). It
 * registers with the producer named in `producer` and keeps at most `window` jobs at a time.
 */
export const worker = <A, I>(
  options: WorkerOptions<A, I>
): Effect.Effect<Consumer.Consumer<A>, ReliableEndpointConfigError, ReliableSystem | Scope.Scope> =>
  Effect.zipRight(
    Config.checkKeys("WorkPulling.worker", options, workerKeys, { remoteProducer: noPeerAddresses }),
    Effect.tap(ConsumerEndpoint.make(options, "Worker", ["WorkProducer"]), (worker) => showView(options, worker))
  )

/**
 * What the work-pulling producer `name` of the system in context holds right now: bound workers
 * and what each has in flight, the pending pool, and counters since its controller started.
 */
export const stats = (name: string): Effect.Effect<WorkPullingStats, EndpointNotFound, ReliableSystem> =>
  Effect.flatMap(ReliableSystem, (system) => {
    const source = system.internal.registry.get(name)?.details.workStats
    const stats = source?.()
    return stats === undefined ? Effect.fail(new EndpointNotFound({ name })) : Effect.succeed(stats)
  })
