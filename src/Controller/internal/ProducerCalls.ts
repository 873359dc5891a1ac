/**
 * The endpoint calls of a producer-side controller shell (`produce`, `produceAll`, `storedAck`,
 * `ackAll`, `sendNow`), shared by point-to-point and work-pulling. Each call folds through the
 * controller's machine in the caller's fiber: a fold is synchronous, so the JS thread already
 * serializes it with the inbox fiber's folds. A volatile controller answers in the same fold; a
 * durable one answers when its store completes (the machine's `Answer` action, passed to `settle`).
 * `sendNow` (the everyday path) produces and acknowledges in one event: a durable controller
 * answers it once the messages are stored and accepted, in one durable step.
 */
import { Deferred, Effect, Either, FiberId } from "effect"
import type { RequestNext, Stored, StoredAck } from "../../Protocol/Contract.js"
import { PayloadEncodeError, ProducerContractError } from "../../Protocol/Errors.js"
import type { FrameTooLarge } from "../../Protocol/Errors.js"
import type { ReliableDeliveryStage } from "../../Protocol/Failure.js"
import type { PayloadCodec } from "../../Protocol/PayloadCodec.js"
import type { AckRejectedAction, AnswerAction, HandshakeEvent, ProduceItem } from "./ProducerHandshake.js"
import { isEitherOf } from "../../internal/IsEither.js"

/** Why a produce call can fail. */
export type ProduceError = ProducerContractError | PayloadEncodeError | FrameTooLarge

/** An item handed to the controller by the endpoint. */
export interface Item<A> {
  readonly messageId: string
  readonly payload: A
}

/** The events the calls fold: the contract events, and a terminal failure. */
export type CallEvent = HandshakeEvent | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }

export interface CallsOptions<A> {
  readonly endpoint: string
  readonly codec: PayloadCodec<A>
  readonly durable: boolean
  readonly now: () => number
  readonly stopped: () => boolean
  /** Validates one item before its payload is encoded (see `ProducerHandshake.checkProduced`). */
  readonly check: (grant: RequestNext, messageId: string, payload: unknown) => ProducerContractError | undefined
  /** The earlier answer of a retried grant (see `ProducerHandshake.answeredBefore`). */
  readonly answeredBefore: (grant: RequestNext, messageId: string) => Either.Either<Stored, ProducerContractError> | undefined
  /** Makes the snapshots of binary payloads (see `SnapshotPool`); default: fresh copies. */
  readonly snapshot?: ((bytes: Uint8Array) => Uint8Array) | undefined
  /** Refuses an encoded payload that could never be sent (a frame limit); default: none. */
  readonly refuse?: ((messageId: string, bytes: number) => FrameTooLarge | undefined) | undefined
  /** Folds one event through the machine and performs its actions; returns the actions. */
  readonly dispatch: (event: CallEvent) => ReadonlyArray<{ readonly _tag: string }>
}

export interface Calls<A> {
  readonly produce: (grant: RequestNext, messageId: string, payload: A) => Effect.Effect<Stored, ProduceError>
  readonly produceAll: (grant: RequestNext, items: ReadonlyArray<Item<A>>) => Effect.Effect<ReadonlyArray<Stored>, ProduceError>
  readonly storedAck: (ack: StoredAck) => Effect.Effect<void, ProducerContractError>
  readonly ackAll: (token: string) => void
  /**
   * Produces and acknowledges under one grant: settled at once when volatile; when durable, an
   * effect that resolves once the messages are stored and accepted (a message whose accept never
   * landed is not in the queue's reload, so its sender must not think it is sent). If the
   * controller stops first, the caller is told to retry (same messageId, same seq).
   */
  readonly sendNow: (
    grant: RequestNext,
    items: ReadonlyArray<Item<A>>
  ) => Either.Either<ReadonlyArray<Stored>, ProduceError> | Effect.Effect<ReadonlyArray<Stored>, ProduceError>
  /** The machine answered a grant whose caller may be waiting. */
  readonly settle: (action: AnswerAction) => void
  /** The controller stopped: every waiting caller is told to take a new grant. */
  readonly abandon: () => void
}

type Answer = Either.Either<ReadonlyArray<Stored>, ProduceError>

const findAnswer = (actions: ReadonlyArray<{ readonly _tag: string }>, token: string) => {
  for (const action of actions) {
    if (action._tag === "Answer" && (action as AnswerAction).token === token) return (action as AnswerAction).result
  }
  return undefined
}

export const make = <A>(options: CallsOptions<A>): Calls<A> => {
  const replies = new Map<string, Deferred.Deferred<ReadonlyArray<Stored>, ProducerContractError>>()
  const { dispatch, now } = options

  const stoppedError = (grant: RequestNext | string) =>
    new ProducerContractError({
      reason: "StaleGrant",
      message: `the controller of "${options.endpoint}" has stopped; grant ${typeof grant === "string" ? grant : grant.token} is void, take a new one`
    })

  /**
   * Validates and encodes every item and folds one Produce (or, `acknowledged`, one
   * produce-and-acknowledge). Volatile controllers answer in the same fold; durable ones answer
   * when the store completes (the returned Deferred).
   */
  const produceNow = (
    grant: RequestNext,
    items: ReadonlyArray<Item<A>>,
    acknowledged: boolean
  ): Answer | Deferred.Deferred<ReadonlyArray<Stored>, ProducerContractError> => {
    if (options.stopped()) return Either.left(stoppedError(grant))
    const encoded: Array<ProduceItem> = new Array(items.length)
    for (let index = 0; index < items.length; index++) {
      const item = items[index]
      const invalid = options.check(grant, item.messageId, item.payload)
      if (invalid !== undefined) return Either.left(invalid)
      if (items.length === 1) {
        const before = options.answeredBefore(grant, item.messageId)
        if (before !== undefined) return Either.map(before, (stored) => [stored])
      }
      const bytes = options.codec.encode(item.payload, options.snapshot)
      if (Either.isLeft(bytes)) {
        const error = new PayloadEncodeError({ endpointName: options.endpoint, messageId: item.messageId, cause: bytes.left })
        dispatch({ _tag: "Fail", stage: "Protocol", cause: error })
        return Either.left(error)
      }
      const refused = options.refuse?.(item.messageId, bytes.right.length)
      if (refused !== undefined) return Either.left(refused)
      encoded[index] = { messageId: item.messageId, payload: bytes.right }
    }
    const answered = findAnswer(
      dispatch({ _tag: acknowledged ? "ProduceAcked" : "Produce", grant, items: encoded, now: now() }),
      grant.token
    )
    if (answered !== undefined) return answered
    if (options.stopped()) return Either.left(stoppedError(grant))
    let reply = replies.get(grant.token)
    if (reply === undefined) {
      reply = Deferred.unsafeMake<ReadonlyArray<Stored>, ProducerContractError>(FiberId.none)
      replies.set(grant.token, reply)
    }
    return reply
  }

  const produceAll = (grant: RequestNext, items: ReadonlyArray<Item<A>>) =>
    Effect.suspend((): Effect.Effect<ReadonlyArray<Stored>, ProduceError> => {
      const answered = produceNow(grant, items, false)
      return isEitherOf(answered) ? answered : Deferred.await(answered)
    })

  const ackAll = (token: string) => void dispatch({ _tag: "AckAll", token, now: now() })

  return {
    produce: (grant, messageId, payload) => Effect.map(produceAll(grant, [{ messageId, payload }]), (stored) => stored[0]),
    produceAll,
    storedAck: (ack) =>
      Effect.suspend((): Effect.Effect<void, ProducerContractError> => {
        for (const action of dispatch({ _tag: "StoredAck", ack, now: now() })) {
          if (action._tag === "AckRejected") return Effect.fail((action as AckRejectedAction).error)
        }
        return Effect.void
      }),
    ackAll,
    sendNow: (grant, items) => {
      // The durable answer comes with the completion of the store-and-accept step.
      const answered = produceNow(grant, items, true)
      return isEitherOf(answered) ? answered : Deferred.await(answered)
    },
    settle: (action) => {
      // The everyday volatile path answers in the fold and never waits: skip hashing its token.
      if (replies.size === 0) return
      const reply = replies.get(action.token)
      if (reply === undefined) return
      replies.delete(action.token)
      Deferred.unsafeDone(reply, Either.isRight(action.result) ? Effect.succeed(action.result.right) : Effect.fail(action.result.left))
    },
    abandon: () => {
      for (const [token, reply] of replies) {
        Deferred.unsafeDone(reply, Effect.fail(new ProducerContractError({
          reason: "StaleGrant",
          message: `the controller of "${options.endpoint}" stopped before grant ${token} was stored; take a new grant`
        })))
      }
      replies.clear()
    }
  }
}
