/**
 * The producer endpoint around any producer-side controller (point-to-point or work-pulling):
 * it checks and encodes what callers send, queues them fairly (`Ingress`), runs the contract
 * calls, publishes confirmations, and outlives its controllers (`EndpointLifecycle`).
 *
 * A message's way in: `send` checks its id and encodes its payload in the caller's fiber (a
 * mistake fails that call and nothing else), joins the ingress queue, and resolves with its
 * `Stored` once the controller has stored (and, when durable, accepted) it.
 */
import { Effect, Either, Exit, PubSub, Stream } from "effect"
import type { Queue, Scope } from "effect"
import type { ProduceError } from "../Controller/internal/ProducerCalls.js"
import type { ProduceItem } from "../Controller/internal/ProducerHandshake.js"
import type { ProducerHooks, ProducerSide } from "../Controller/internal/ProducerShell.js"
import type { ControllerStats, ProducerStats } from "../Controller/ProducerController.js"
import type { DeliveryConfirmed, Produced, RequestNext, Stored, StoredAck } from "../Protocol/Contract.js"
import { EndpointClosed, PayloadEncodeError, ProducerContractError } from "../Protocol/Errors.js"
import type { ReliableConfigError } from "../Protocol/Errors.js"
import { checkMessageId } from "../Protocol/MessageIdRule.js"
import type { PayloadCodec } from "../Protocol/PayloadCodec.js"
import type { SystemInternals } from "./SystemInternals.js"
import type { EndpointDetails, EndpointRecord } from "./EndpointRegistry.js"
import * as EndpointLifecycle from "./EndpointLifecycle.js"
import * as Ingress from "./Ingress.js"
import { newMessageId } from "./MessageId.js"

/** Why a call on a producer endpoint can fail. */
export type SendError = ProduceError | EndpointClosed

export interface SendOptions {
  /** The stable deduplication key; default a fresh time-ordered UUID (version 7). */
  readonly messageId?: string
}

/** One message of a `sendAll`. */
export interface Message<A> {
  readonly payload: A
  readonly messageId?: string
}

export interface Producer<A> {
  readonly name: string
  /**
   * Waits for demand, stores the message and completes the handshake; resolves with `Stored`.
   * Senders are served in the order they called. A message id or payload that cannot be sent
   * (see `ProducerContractError`, `PayloadEncodeError`, `FrameTooLarge`, `MessageRejected`)
   * fails this call only: nothing is stored and the flow goes on.
   */
  readonly send: (payload: A, options?: SendOptions) => Effect.Effect<Stored, SendError>
  /**
   * Sends many messages, as many at a time as demand allows. Every id is checked and every
   * payload encoded before anything is stored: one bad message fails the call and stores none.
   * Results are in input order and identical to sending one by one.
   */
  readonly sendAll: (messages: Iterable<Message<A>>) => Effect.Effect<ReadonlyArray<Stored>, SendError>
  /** Waits for the next grant (the contract's `RequestNext`), in line with senders. */
  readonly requestNext: Effect.Effect<RequestNext, EndpointClosed>
  /** Answers a grant; resolves with `Stored` once the message is stored. */
  readonly produce: (produced: Produced<A>) => Effect.Effect<Stored, SendError>
  /** Completes a message's handshake; the controller then emits it. */
  readonly storedAck: (ack: StoredAck) => Effect.Effect<void, ProducerContractError | EndpointClosed>
  /** Consumer confirmations (with `deliveryConfirmation: true`); best effort. */
  readonly confirmations: Stream.Stream<DeliveryConfirmed>
  /** A subscription to confirmations for the life of the scope (no race with the first one). */
  readonly subscribeConfirmations: Effect.Effect<Queue.Dequeue<DeliveryConfirmed>, never, Scope.Scope>
  readonly stats: Effect.Effect<ProducerStats>
}

/** The largest batch one grant carries. */
export const MaxBatch = 1000

/** A producer-side controller as its endpoint uses it. */
export interface EndpointController<A> extends ProducerSide<A> {
  readonly stats: () => ControllerStats
}

/** Starts a controller in the current scope, wired to the endpoint's hooks. */
export type ControllerStart<A, C extends EndpointController<A>> = (hooks: ProducerHooks) => Effect.Effect<C, never, Scope.Scope>

const noStats: ControllerStats = { sent: 0, resent: 0, confirmed: 0, dropped: 0 }

/** Checks a caller's id (a generated one is fine by construction) and encodes the payload. */
const encoder = <A>(endpoint: string, codec: PayloadCodec<A>) => {
  // The controller copies binary payloads into its own snapshot; until then they are the caller's.
  const asIs = (bytes: Uint8Array) => bytes
  return (payload: A, messageId: string | undefined): Either.Either<ProduceItem, ProduceError> => {
    if (messageId !== undefined) {
      const problem = checkMessageId(messageId)
      if (problem !== undefined) {
        const reason = problem.problem === "Blank" ? "BlankMessageId" : problem.problem === "Reserved" ? "ReservedMessageId" : "InvalidMessageId"
        return Either.left(new ProducerContractError({ reason, message: problem.message }))
      }
    }
    const id = messageId ?? newMessageId()
    if (payload === undefined) {
      return Either.left(new ProducerContractError({ reason: "MissingPayload", message: `message ${id} carries no payload` }))
    }
    const bytes = codec.encode(payload, asIs)
    return Either.isLeft(bytes)
      ? Either.left(new PayloadEncodeError({ endpointName: endpoint, messageId: id, cause: bytes.left }))
      : Either.right({ messageId: id, payload: bytes.right })
  }
}

export const make = <A, C extends EndpointController<A>>(
  system: SystemInternals,
  record: EndpointRecord,
  codec: PayloadCodec<A>,
  start: ControllerStart<A, C>,
  details?: (current: () => C | undefined, degraded: () => boolean) => EndpointDetails
): Effect.Effect<{ readonly producer: Producer<A>; readonly current: () => C | undefined }, ReliableConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const confirmations = yield* Effect.acquireRelease(PubSub.sliding<DeliveryConfirmed>(4096), PubSub.shutdown)
    const encode = encoder(record.name, codec)
    let closed = false
    const ingress = Ingress.make({
      endpoint: record.name,
      maxBatch: MaxBatch,
      controllerOf: (grant) => controllerOf(grant)
    })
    // Added before the controller's lifecycle, so it runs after the controller has closed: a
    // store in flight gets its answer first.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
        ingress.close()
      })
    )
    const lifecycle: EndpointLifecycle.Lifecycle<C> = yield* EndpointLifecycle.make<C>({
      system,
      record,
      role: "Producer",
      address: (controller) => controller.address,
      onStop: ingress.voidGrant,
      details: details?.(() => lifecycle.current(), () => lifecycle.health.degradedSince() !== undefined),
      start: (stopped, health) =>
        start({
          health,
          offerGrant: ingress.offer,
          notify: (confirmed) => {
            for (const item of confirmed) confirmations.unsafeOffer(item)
          },
          stopped
        })
    })

    // Added after the lifecycle, so it runs before the controller is closed: a graceful shutdown
    // lets the durable lane finish what it holds.
    yield* Effect.addFinalizer(() => Effect.suspend(() => lifecycle.current()?.drain ?? Effect.void))

    const controllerOf = (grant: RequestNext): C | undefined => {
      const controller = lifecycle.current()
      return controller !== undefined && controller.address.incarnation === grant.controller ? controller : undefined
    }

    const closedError = () => Exit.fail(new EndpointClosed({ name: record.name }))

    const send = (payload: A, options?: SendOptions): Effect.Effect<Stored, SendError> =>
      Effect.suspend(() => {
        if (closed) return closedError()
        const item = encode(payload, options?.messageId)
        if (Either.isLeft(item)) return Exit.fail(item.left)
        const sent = ingress.send([item.right])
        if (!Exit.isExit(sent)) return Effect.map(sent, (stored) => stored[0])
        const settled = sent as Exit.Exit<ReadonlyArray<Stored>, SendError>
        return Exit.isSuccess(settled) ? Exit.succeed(settled.value[0]) : settled as Exit.Exit<never, SendError>
      })

    const sendAll = (messages: Iterable<Message<A>>): Effect.Effect<ReadonlyArray<Stored>, SendError> =>
      Effect.suspend(() => {
        if (closed) return closedError()
        const items: Array<ProduceItem> = []
        for (const message of messages) {
          const item = encode(message.payload, message.messageId)
          if (Either.isLeft(item)) return Exit.fail(item.left)
          items.push(item.right)
        }
        return items.length === 0 ? Exit.succeed([]) : ingress.send(items)
      })

    const produce = (produced: Produced<A>): Effect.Effect<Stored, SendError> =>
      Effect.suspend((): Effect.Effect<Stored, SendError> => {
        if (closed) return closedError()
        const controller = controllerOf(produced.grant) ?? lifecycle.current()
        if (controller === undefined) return Effect.die(new Error("producer endpoint has no controller"))
        return controller.produce(produced.grant, produced.messageId, produced.payload)
      })

    const storedAck = (ack: StoredAck): Effect.Effect<void, ProducerContractError | EndpointClosed> =>
      Effect.suspend((): Effect.Effect<void, ProducerContractError | EndpointClosed> => {
        if (closed) return closedError()
        const controller = lifecycle.current()
        if (controller === undefined) return Effect.die(new Error("producer endpoint has no controller"))
        return controller.storedAck(ack)
      })

    const producer: Producer<A> = {
      name: record.name,
      send,
      sendAll,
      requestNext: ingress.requestNext,
      produce,
      storedAck,
      confirmations: Stream.fromPubSub(confirmations),
      subscribeConfirmations: PubSub.subscribe(confirmations),
      stats: Effect.sync(() => ({ ...(lifecycle.current()?.stats() ?? noStats), degraded: lifecycle.health.degradedSince() !== undefined }))
    }
    return { producer, current: lifecycle.current }
  })
