/**
 * The producer endpoint of a point-to-point flow. `send` is the everyday path: it waits for
 * demand, stores the message and completes the handshake. `requestNext`, `produce` and
 * `storedAck` are the contract underneath, for producers fed from their own recoverable source.
 */
import { Effect } from "effect"
import type { Duration, Schema, Scope } from "effect"
import * as ProducerController from "./Controller/ProducerController.js"
import type { DurableProducerQueueService } from "./DurableQueue/DurableProducerQueue.js"
import * as ProducerEndpoint from "./internal/ProducerEndpoint.js"
import * as Config from "./Protocol/Config.js"
import type { ReliableEndpointConfigError } from "./Protocol/Errors.js"
import * as PayloadCodec from "./Protocol/PayloadCodec.js"
import { ReliableSystem } from "./ReliableSystem.js"

export type { ProduceError } from "./Controller/internal/ProducerCalls.js"
export type { ProducerStats } from "./Controller/ProducerController.js"

export interface ProducerOptions<A, I> {
  /** This endpoint's name, unique on its system. */
  readonly name: string
  /** The consumer endpoint's name. */
  readonly consumer: string
  /** Every payload is encoded with this Schema before it is sequenced. */
  readonly payload: Schema.Schema<A, I, never>
  /** Publish a `DeliveryConfirmed` on `confirmations` for every confirmed message; default off. */
  readonly deliveryConfirmation?: boolean
  /** Cadence for offering an unanswered grant again; default 500ms. */
  readonly retryInterval?: Duration.DurationInput
  /** Split payloads larger than this many bytes into chunks; default off. */
  readonly chunkSize?: number
  /** Store messages durably so a producer crash loses nothing; default none. */
  readonly durableQueue?: DurableProducerQueueService
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
  /**
   * The remoting address of the node hosting the consumer (a remoting-only flow); needs a socket
   * transport. Default: the consumer is on this system.
   */
  readonly remoteConsumer?: Config.PeerAddress
}

export type { Message, Producer, SendError, SendOptions } from "./internal/ProducerEndpoint.js"

const producerKeys = Config.optionKeys<ProducerOptions<unknown, unknown>>({
  name: true,
  consumer: true,
  payload: true,
  deliveryConfirmation: true,
  retryInterval: true,
  chunkSize: true,
  durableQueue: true,
  queueRetry: true,
  queueTimeout: true,
  queueBackoff: true,
  drainTimeout: true,
  backlogPollInterval: true,
  remoteConsumer: true
})

/** Unknown options are refused; the work-pulling durable queue with why (its watermark cannot hold per-job confirmations). */
const checkKeys = (options: object) =>
  Config.checkKeys("Producer.make", options, producerKeys, {
    durableWorkQueue: "durableWorkQueue is for work-pulling producers (WorkPulling.producer); a point-to-point producer persists with durableQueue"
  })

/** Checks the options of a producer endpoint. */
const checkOptions = <A, I>(options: ProducerOptions<A, I>) =>
  Effect.zipRight(Effect.zipRight(checkKeys(options), Config.checkSchema("payload", options.payload)), Effect.all({
    name: Config.checkName("name", options.name),
    consumer: Config.checkName("consumer", options.consumer),
    deliveryConfirmation: Config.checkFlag("deliveryConfirmation", options.deliveryConfirmation),
    retryInterval: Config.checkInterval("retryInterval", options.retryInterval, Config.DefaultRetryInterval),
    chunkSize: Config.checkChunkSize(options.chunkSize),
    queueRetry: Config.checkQueuePolicy(options),
    drainTimeout: Config.checkDrainTimeout(options.drainTimeout),
    backlogPollInterval: Config.checkInterval("backlogPollInterval", options.backlogPollInterval, Config.DefaultBacklogPollInterval)
  }))

/** A point-to-point producer endpoint. */
export const make = <A, I>(
  options: ProducerOptions<A, I>
): Effect.Effect<ProducerEndpoint.Producer<A>, ReliableEndpointConfigError, ReliableSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const checked = yield* checkOptions(options)
    const system = (yield* ReliableSystem).internal
    const consumerNode = yield* Config.checkPeerAddress("remoteConsumer", options.remoteConsumer, {
      remoting: system.transport.remoting,
      clustered: system.clustered
    })
    if (consumerNode !== undefined) yield* Config.checkChunkFitsFrame(checked.chunkSize, system.transport.maxFrameSize)
    const codec = PayloadCodec.make(options.payload)
    const settings: ProducerController.ProducerSettings = {
      endpoint: checked.name,
      consumer: checked.consumer,
      deliveryConfirmation: checked.deliveryConfirmation,
      retryInterval: checked.retryInterval,
      chunkSize: checked.chunkSize,
      durableQueue: options.durableQueue,
      queueRetry: checked.queueRetry,
      drainTimeout: checked.drainTimeout,
      consumerNode
    }
    const endpoint = yield* ProducerEndpoint.make({
      system,
      record: { name: checked.name, kind: "Producer", peer: checked.consumer, address: undefined },
      codec,
      start: (hooks) => ProducerController.make(settings, codec, system, hooks),
      backlog: ProducerEndpoint.backlogOf(options.durableQueue, checked)
    })
    system.registry.setView(checked.name, { stats: endpoint.producer.stats, queue: options.durableQueue, payload: options.payload })
    return endpoint.producer
  })
