/**
 * The endpoint calls of a producer-side controller (`produce`, `storedAck`, `ackAll`, `submit`),
 * shared by point-to-point and work-pulling. Each call folds through the controller's machine in
 * the caller's fiber. A volatile controller answers in the same fold; a durable one answers when
 * its store completes (the machine's `Answer` action, passed to `settle`).
 *
 * `submit` is the everyday path: items the endpoint has already validated and encoded are
 * produced and acknowledged in one event, and the answer is handed back at once (volatile) or as
 * a `PendingAnswer` that settles when the durable store-and-accept step completes.
 */
import { Effect, Either } from "effect"
import type { RequestNext, Stored, StoredAck } from "../../Protocol/Contract.js"
import { PayloadEncodeError, ProducerContractError } from "../../Protocol/Errors.js"
import type { FrameTooLarge, MessageRejected } from "../../Protocol/Errors.js"
import type { ReliableDeliveryStage } from "../../Protocol/Failure.js"
import type { PayloadCodec } from "../../Protocol/PayloadCodec.js"
import * as SlabCopy from "../../Protocol/SlabCopy.js"
import type { AckRejectedAction, AnswerAction, HandshakeEvent, ProduceItem } from "./ProducerHandshake.js"

export type { AnswerAction } from "./ProducerHandshake.js"

/** Why a produce call can fail. */
export type ProduceError = ProducerContractError | PayloadEncodeError | FrameTooLarge | MessageRejected

/** What a submit answers: the `Stored` of every item in order, or why none was stored. */
export type Answer = Either.Either<ReadonlyArray<Stored>, ProduceError>

/** The answer of a submit that waits for a durable store; it settles exactly once. */
export class PendingAnswer {
  private answer: Answer | undefined
  private listener: ((answer: Answer) => void) | undefined

  /** Calls `listener` with the answer: at once if it is already known. */
  onAnswer(listener: (answer: Answer) => void): void {
    if (this.answer !== undefined) listener(this.answer)
    else this.listener = listener
  }

  resolve(answer: Answer): void {
    if (this.answer !== undefined) return
    this.answer = answer
    const listener = this.listener
    this.listener = undefined
    listener?.(answer)
  }
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
  /** Makes the snapshots of binary payloads (see `SnapshotPool`); default: `SlabCopy.copy`. */
  readonly snapshot?: ((bytes: Uint8Array) => Uint8Array) | undefined
  /** Refuses an encoded payload that could never be sent (a frame limit); default: none. */
  readonly refuse?: ((messageId: string, bytes: number) => FrameTooLarge | undefined) | undefined
  /** Folds one event through the machine and performs its actions; returns the actions. */
  readonly dispatch: (event: CallEvent) => ReadonlyArray<{ readonly _tag: string }>
}

export interface Calls<A> {
  /**
   * The contract's `Produced`: encodes and stores one message; resolves with its `Stored`. The
   * message carries `trace`, its sender's trace context, when given.
   */
  readonly produce: (grant: RequestNext, messageId: string, payload: A, trace?: string) => Effect.Effect<Stored, ProduceError>
  readonly storedAck: (ack: StoredAck) => Effect.Effect<void, ProducerContractError>
  readonly ackAll: (token: string) => void
  /**
   * Produces and acknowledges the endpoint's encoded items (ids and payloads checked there) under
   * one grant: answered at once when volatile; when durable, a `PendingAnswer` that settles once
   * the items are stored and accepted (a message whose accept never landed is not in the queue's
   * reload, so its sender must not think it is sent). If the controller stops first, the answer
   * is `StaleGrant`: take a new grant and submit again (same messageIds, same seqs).
   */
  readonly submit: (grant: RequestNext, items: ReadonlyArray<ProduceItem>) => Answer | PendingAnswer
  /** The machine answered a grant whose caller may be waiting. */
  readonly settle: (action: AnswerAction) => void
  /** The controller stopped: every waiting caller is told to take a new grant. */
  readonly abandon: () => void
}

const findAnswer = (actions: ReadonlyArray<{ readonly _tag: string }>, token: string) => {
  for (const action of actions) {
    if (action._tag === "Answer" && (action as AnswerAction).token === token) return (action as AnswerAction).result
  }
  return undefined
}

export const make = <A>(options: CallsOptions<A>): Calls<A> => {
  const replies = new Map<string, PendingAnswer>()
  const { dispatch, now } = options
  const copy = options.codec.binary ? (options.snapshot ?? SlabCopy.copy) : undefined

  const stoppedError = (grant: RequestNext | string) =>
    new ProducerContractError({
      reason: "StaleGrant",
      message: `the controller of "${options.endpoint}" has stopped; grant ${typeof grant === "string" ? grant : grant.token} is void, take a new one`
    })

  /**
   * Prepares every item; the first refusal answers the whole call (nothing is stored). The ids
   * and payloads were checked by the endpoint (`submit` takes only its items), and the machine
   * checks the grant, so only the frame limit is left to check here.
   */
  const prepare = (items: ReadonlyArray<ProduceItem>): Either.Either<ReadonlyArray<ProduceItem>, ProduceError> => {
    const refuse = options.refuse
    if (refuse === undefined && copy === undefined) return Either.right(items)
    let prepared: Array<ProduceItem> | undefined
    for (let index = 0; index < items.length; index++) {
      const item = items[index]
      const refused = refuse?.(item.messageId, item.payload.length)
      if (refused !== undefined) return Either.left(refused)
      if (copy !== undefined) (prepared ??= new Array(items.length))[index] = { ...item, payload: copy(item.payload) }
    }
    return Either.right(prepared ?? items)
  }

  /** Folds one Produce (or one produce-and-acknowledge) and returns its answer, or waits for it. */
  const fold = (grant: RequestNext, items: ReadonlyArray<ProduceItem>, acknowledged: boolean): Answer | PendingAnswer => {
    const answered = findAnswer(
      dispatch({ _tag: acknowledged ? "ProduceAcked" : "Produce", grant, items, now: now() }),
      grant.token
    )
    if (answered !== undefined) return answered
    if (options.stopped()) return Either.left(stoppedError(grant))
    let reply = replies.get(grant.token)
    if (reply === undefined) {
      reply = new PendingAnswer()
      replies.set(grant.token, reply)
    }
    return reply
  }

  const submit = (grant: RequestNext, items: ReadonlyArray<ProduceItem>): Answer | PendingAnswer => {
    if (options.stopped()) return Either.left(stoppedError(grant))
    if (items.length === 1) {
      const before = options.answeredBefore(grant, items[0].messageId)
      if (before !== undefined) return Either.map(before, (stored) => [stored])
    }
    const prepared = prepare(items)
    return Either.isLeft(prepared) ? Either.left(prepared.left) : fold(grant, prepared.right, true)
  }

  /**
   * The contract's `Produced`: a payload its Schema cannot encode is the caller's mistake, like a
   * blank id: it fails this call, stores nothing, and the grant stays good for the next answer.
   */
  const produce = (grant: RequestNext, messageId: string, payload: A, trace?: string) =>
    Effect.suspend((): Effect.Effect<Stored, ProduceError> => {
      if (options.stopped()) return Effect.fail(stoppedError(grant))
      const invalid = options.check(grant, messageId, payload)
      if (invalid !== undefined) return Effect.fail(invalid)
      const before = options.answeredBefore(grant, messageId)
      if (before !== undefined) return before
      const bytes = options.codec.encode(payload, copy)
      if (Either.isLeft(bytes)) return Effect.fail(new PayloadEncodeError({ endpointName: options.endpoint, messageId, cause: bytes.left }))
      const refused = options.refuse?.(messageId, bytes.right.length)
      if (refused !== undefined) return Effect.fail(refused)
      const item: ProduceItem = trace === undefined ? { messageId, payload: bytes.right } : { messageId, payload: bytes.right, trace }
      const answer = fold(grant, [item], false)
      return Effect.map(awaitAnswer(answer), (stored) => stored[0])
    })

  return {
    produce,
    storedAck: (ack) =>
      Effect.suspend((): Effect.Effect<void, ProducerContractError> => {
        for (const action of dispatch({ _tag: "StoredAck", ack, now: now() })) {
          if (action._tag === "AckRejected") return Effect.fail((action as AckRejectedAction).error)
        }
        return Effect.void
      }),
    ackAll: (token) => void dispatch({ _tag: "AckAll", token, now: now() }),
    submit,
    settle: (action) => {
      // The everyday volatile path answers in the fold and never waits: skip hashing its token.
      if (replies.size === 0) return
      const reply = replies.get(action.token)
      if (reply === undefined) return
      replies.delete(action.token)
      reply.resolve(action.result)
    },
    abandon: () => {
      const waiting = [...replies]
      replies.clear()
      for (const [token, reply] of waiting) {
        reply.resolve(Either.left(new ProducerContractError({
          reason: "StaleGrant",
          message: `the controller of "${options.endpoint}" stopped before grant ${token} was stored; take a new grant`
        })))
      }
    }
  }
}

/** An answer as an effect: at once when known, else when it settles. */
export const awaitAnswer = (answer: Answer | PendingAnswer): Effect.Effect<ReadonlyArray<Stored>, ProduceError> =>
  answer instanceof PendingAnswer
    ? Effect.async<ReadonlyArray<Stored>, ProduceError>((resume) => answer.onAnswer(resume))
    : answer
