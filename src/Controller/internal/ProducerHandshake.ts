/**
 * The producer-side endpoint contract as pure rule functions, shared by every producer-side
 * machine (point-to-point and work-pulling): grants (`RequestNext`), `Produced` checks, `Stored`
 * answers, `StoredAck`/`AckAll`, the durable Storing/Accepting states and the retry deadline.
 *
 * The rules work on the handshake fields of a machine's draft (`HandshakeDraft`) and push the
 * contract actions into the machine's action list; what a message *is* (`M`), how it is stored and
 * what happens once it is emitted stays with the machine. One grant is answered by one message on
 * the contract path; the everyday `sendAll` path answers one grant with a batch (stored and
 * accepted together, exactly as one by one would).
 *
 * The everyday path produces and acknowledges in one event (`ProduceAcked`). A durable machine
 * then stores and accepts in one durable step (`acknowledged` Storing): nothing can happen
 * between the two that the caller could act on, and one transaction instead of two halves the
 * commits and leaves nothing half done after a crash.
 */
import { Either } from "effect"
import { RequestNext, Stored } from "../../Protocol/Contract.js"
import type { StoredAck } from "../../Protocol/Contract.js"
import { MessageRejected, ProducerContractError } from "../../Protocol/Errors.js"
import { checkMessageId } from "../../Protocol/MessageIdRule.js"
import type { MessageIdProblem } from "../../Protocol/MessageIdRule.js"

/** Where the one-at-a-time producer handshake stands; `M` is the machine's stored-message form. */
export type Handshake<M = unknown> =
  | { readonly _tag: "Idle" }
  | { readonly _tag: "Granted"; readonly grant: RequestNext; readonly offeredAt: number }
  | {
    readonly _tag: "Storing"
    readonly grant: RequestNext
    readonly messageIds: ReadonlyArray<string>
    /** Acknowledged with the produce: the store accepts too, and completes the handshake. */
    readonly acknowledged: boolean
  }
  | StoredHandshake<M>
  | AcceptingHandshake<M>

export interface StoredHandshake<M> {
  readonly _tag: "Stored"
  readonly grant: RequestNext
  readonly stored: ReadonlyArray<Stored>
  readonly messages: ReadonlyArray<M>
  /** Per message: a resubmission of something already held or accepted, so emit nothing. */
  readonly known: ReadonlyArray<boolean>
  readonly offeredAt: number
}

export interface AcceptingHandshake<M> {
  readonly _tag: "Accepting"
  readonly grant: RequestNext
  readonly stored: ReadonlyArray<Stored>
  readonly messages: ReadonlyArray<M>
  readonly known: ReadonlyArray<boolean>
}

/** The handshake's settled messages: what the machine emits once the handshake completes. */
export type Settled<M> = StoredHandshake<M> | AcceptingHandshake<M>

export interface HandshakeConfig {
  readonly endpoint: string
  readonly incarnation: string
  readonly retryIntervalMs: number
  readonly durable: boolean
}

/** The handshake fields of a producer-side machine's draft state. */
export interface HandshakeDraft<M> {
  readonly config: HandshakeConfig
  handshake: Handshake<M>
  grantCount: number
  /** The token whose handshake completed last; a repeated StoredAck for it is a no-op. */
  lastCompletedToken: string | undefined
}

/** One message handed to the controller: its id and encoded payload. */
export interface ProduceItem {
  readonly messageId: string
  readonly payload: Uint8Array
  /** Taken from the queue's backlog: storing it removes it from there, in the same transaction. */
  readonly fromBacklog?: boolean | undefined
  /** When it was sent or enqueued (clock millis), kept with it for lag. */
  readonly at?: number | undefined
  /** The sender's trace context, kept with it so a reload keeps the trace. */
  readonly trace?: string | undefined
}

/** The contract events every producer-side machine takes, in the same shape. */
export type HandshakeEvent =
  | { readonly _tag: "Produce"; readonly grant: RequestNext; readonly items: ReadonlyArray<ProduceItem>; readonly now: number }
  /** The everyday path: produce and acknowledge in one fold (durable: one store-and-accept). */
  | { readonly _tag: "ProduceAcked"; readonly grant: RequestNext; readonly items: ReadonlyArray<ProduceItem>; readonly now: number }
  | { readonly _tag: "StoredAck"; readonly ack: StoredAck; readonly now: number }
  /** The everyday path acknowledges every message stored under its grant at once. */
  | { readonly _tag: "AckAll"; readonly token: string; readonly now: number }
  /** The durable store of `token` was refused for its content (`messageId` when it was one message). */
  | { readonly _tag: "StoreRejected"; readonly token: string; readonly messageId: string | undefined; readonly cause: unknown; readonly now: number }

export type OfferAction = { readonly _tag: "Offer"; readonly grant: RequestNext }
export type AnswerAction = {
  readonly _tag: "Answer"
  readonly token: string
  readonly result: Either.Either<ReadonlyArray<Stored>, ProducerContractError | MessageRejected>
}
export type AckRejectedAction = { readonly _tag: "AckRejected"; readonly token: string; readonly error: ProducerContractError }
export type AcceptAction = { readonly _tag: "Accept"; readonly token: string; readonly messageIds: ReadonlyArray<string> }
/** A handshake ended: its messages are emitted (or were already held). */
export type CompletedAction = { readonly _tag: "Completed"; readonly token: string }

/** The contract actions the rules below emit. */
export type HandshakeAction = OfferAction | AnswerAction | AckRejectedAction | AcceptAction | CompletedAction

/** Where the rules push their actions: any machine's action list whose union includes them. */
export interface Sink {
  push(...actions: Array<HandshakeAction>): number
}

export const idle: Handshake<never> = { _tag: "Idle" }

// ---------------------------------------------------------------------------------------------
// Grants

/** Opens a grant; the machine has checked that it is running, idle and has demand to spend. */
export const offerGrant = <M>(s: HandshakeDraft<M>, now: number, out: Sink): void => {
  s.grantCount++
  const grant = new RequestNext({
    endpoint: s.config.endpoint,
    controller: s.config.incarnation,
    // Base 36: a base-10 conversion goes through V8's number-to-string cache, which keeps each
    // result alive long enough to be promoted (one old-generation string per grant).
    token: `${s.config.incarnation}:${s.grantCount.toString(36)}`
  })
  s.handshake = { _tag: "Granted", grant, offeredAt: now }
  out.push({ _tag: "Offer", grant })
}

/** When the retry timer must next look at the handshake; undefined when nothing waits on it. */
export const nextDeadline = (handshake: Handshake<unknown>, retryIntervalMs: number): number | undefined =>
  handshake._tag === "Granted" || handshake._tag === "Stored" ? handshake.offeredAt + retryIntervalMs : undefined

/** The retry rule: an unanswered grant, or the grant of an unacknowledged Stored, is offered again. */
export const retry = <M>(s: HandshakeDraft<M>, now: number, out: Sink): void => {
  const handshake = s.handshake
  if ((handshake._tag === "Granted" || handshake._tag === "Stored") && now - handshake.offeredAt >= s.config.retryIntervalMs) {
    s.handshake = { ...handshake, offeredAt: now }
    out.push({ _tag: "Offer", grant: handshake.grant })
  }
}

// ---------------------------------------------------------------------------------------------
// Produced

const contractError = (reason: ProducerContractError["reason"], message: string) =>
  new ProducerContractError({ reason, message })

/** A grant (or acknowledgement) must name this endpoint and this controller incarnation. */
export const checkGrant = (
  config: HandshakeConfig,
  endpoint: string,
  controller: string,
  what: string
): ProducerContractError | undefined => {
  if (endpoint !== config.endpoint) {
    return contractError("ForeignGrant", `${what} answers a grant of endpoint "${endpoint}", not "${config.endpoint}"`)
  }
  if (controller !== config.incarnation) {
    return contractError("StaleGrant", `${what} answers a grant of an earlier controller of "${endpoint}"; take a new grant`)
  }
  return undefined
}

const reasons: Record<MessageIdProblem, ProducerContractError["reason"]> = {
  Blank: "BlankMessageId",
  Invalid: "InvalidMessageId",
  Reserved: "ReservedMessageId"
}

/** Checks a `Produced` before its payload is encoded. Returns an error, or undefined when valid. */
export const checkProduced = (
  config: HandshakeConfig,
  grant: RequestNext,
  messageId: string,
  payload: unknown
): ProducerContractError | undefined => {
  const problem = checkMessageId(messageId)
  if (problem !== undefined) return contractError(reasons[problem.problem], problem.message)
  if (payload === undefined) return contractError("MissingPayload", `Produced ${messageId} carries no payload`)
  return checkGrant(config, grant.endpoint, grant.controller, "Produced")
}

const tokenAnswered = (grant: RequestNext, messageIds: string) =>
  contractError(
    "TokenAlreadyAnswered",
    `grant ${grant.token} was already answered with ${messageIds}; a retried grant must receive the same Produced`
  )

/**
 * The answer of an already-answered token when the same single message is produced again (a
 * retried grant must receive the same `Produced`); undefined when the token is not answered yet.
 */
export const answeredBefore = (
  handshake: Handshake<unknown>,
  grant: RequestNext,
  messageId: string
): Either.Either<Stored, ProducerContractError> | undefined => {
  if (handshake._tag === "Idle" || handshake._tag === "Granted" || handshake.grant.token !== grant.token) return undefined
  const ids = handshake._tag === "Storing" ? handshake.messageIds : handshake.stored.map((stored) => stored.messageId)
  if (ids.length !== 1 || ids[0] !== messageId) return Either.left(tokenAnswered(grant, ids.join(", ")))
  return handshake._tag === "Storing" ? undefined : Either.right(handshake.stored[0])
}

export const answer = (token: string, result: Either.Either<ReadonlyArray<Stored>, ProducerContractError | MessageRejected>, out: Sink): void =>
  void out.push({ _tag: "Answer", token, result })

/**
 * Admits a `Produce`: true when it answers the outstanding grant, so the machine stores its
 * items. Otherwise the caller is answered here (a retried single message gets its earlier
 * `Stored`; a retry while that message is being stored waits for the same answer).
 */
export const admitProduce = <M>(s: HandshakeDraft<M>, grant: RequestNext, items: ReadonlyArray<ProduceItem>, out: Sink): boolean => {
  const invalid = checkGrant(s.config, grant.endpoint, grant.controller, "Produced")
  if (invalid !== undefined) {
    answer(grant.token, Either.left(invalid), out)
    return false
  }
  const handshake = s.handshake
  if (handshake._tag === "Granted" && handshake.grant.token === grant.token) return true
  if (items.length === 1) {
    const previous = answeredBefore(handshake, grant, items[0].messageId)
    if (previous !== undefined) {
      answer(grant.token, Either.map(previous, (stored) => [stored]), out)
      return false
    }
    if (handshake._tag === "Storing" && handshake.grant.token === grant.token) return false
  }
  answer(grant.token, Either.left(contractError("StaleGrant", `grant ${grant.token} is not outstanding`)), out)
  return false
}

/**
 * A durable machine stores the admitted items before it answers; `acknowledged` items (the
 * everyday path) are accepted in the same durable step.
 */
export const startStoring = <M>(
  s: HandshakeDraft<M>,
  grant: RequestNext,
  items: ReadonlyArray<ProduceItem>,
  acknowledged: boolean
): void => {
  s.handshake = { _tag: "Storing", grant, messageIds: items.map((item) => item.messageId), acknowledged }
}

/** The store in progress, when `token` names it (a late completion names none). */
export const storing = <M>(s: HandshakeDraft<M>, token: string): StoringHandshake | undefined => {
  const handshake = s.handshake
  return handshake._tag === "Storing" && handshake.grant.token === token ? handshake : undefined
}

/**
 * The queue refused the messages of the store in progress for their content: nothing was
 * stored. The caller is told (`MessageRejected`), and the grant is outstanding again, offered
 * anew, so the next messages (or the same batch without the refused one) can use it.
 */
export const storeRejected = <M>(
  s: HandshakeDraft<M>,
  token: string,
  messageId: string | undefined,
  cause: unknown,
  now: number,
  out: Sink
): void => {
  const handshake = storing(s, token)
  if (handshake === undefined) return
  s.handshake = { _tag: "Granted", grant: handshake.grant, offeredAt: now }
  answer(token, Either.left(new MessageRejected({ endpointName: s.config.endpoint, messageId, cause })), out)
  out.push({ _tag: "Offer", grant: handshake.grant })
}

/** How a machine tells the store seq and id of one of its messages. */
export interface MessageView<M> {
  readonly messageId: (message: M) => string
  /** The producer-visible store seq `Stored` reports. */
  readonly storeSeq: (message: M) => number
}

const noneKnown: ReadonlyArray<boolean> = []

/** The messages are stored: answer `Stored` for each and wait for the acknowledgement. */
export const stored = <M>(
  s: HandshakeDraft<M>,
  view: MessageView<M>,
  grant: RequestNext,
  messages: ReadonlyArray<M>,
  alreadyStored: ReadonlyArray<boolean> | undefined,
  known: ReadonlyArray<boolean> | undefined,
  now: number,
  out: Sink
): StoredHandshake<M> => {
  const answers: Array<Stored> = new Array(messages.length)
  for (let index = 0; index < messages.length; index++) {
    const message = messages[index]
    answers[index] = new Stored({
      endpoint: s.config.endpoint,
      controller: s.config.incarnation,
      token: grant.token,
      messageId: view.messageId(message),
      seq: view.storeSeq(message),
      alreadyStored: alreadyStored?.[index] ?? false
    })
  }
  const handshake: StoredHandshake<M> = { _tag: "Stored", grant, stored: answers, messages, known: known ?? noneKnown, offeredAt: now }
  s.handshake = handshake
  answer(grant.token, Either.right(answers), out)
  return handshake
}

/**
 * A volatile machine's produce-and-acknowledge (`ProduceAcked`): the messages are stored and
 * acknowledged in the same fold, so the caller is answered `Stored` for each and the handshake
 * ends at once, exactly as `stored` then `ackAll` then `complete` would, without the `Stored`
 * handshake in between. `seqs[index]` is the store seq of `items[index]`.
 */
export const storedAndCompleted = <M>(
  s: HandshakeDraft<M>,
  grant: RequestNext,
  items: ReadonlyArray<ProduceItem>,
  seqs: ReadonlyArray<number>,
  out: Sink
): void => {
  const answers: Array<Stored> = new Array(items.length)
  for (let index = 0; index < items.length; index++) {
    answers[index] = new Stored({
      endpoint: s.config.endpoint,
      controller: s.config.incarnation,
      token: grant.token,
      messageId: items[index].messageId,
      seq: seqs[index],
      alreadyStored: false
    })
  }
  answer(grant.token, Either.right(answers), out)
  s.handshake = idle
  s.lastCompletedToken = grant.token
  out.push({ _tag: "Completed", token: grant.token })
}

/** The store in progress. */
export type StoringHandshake = Extract<Handshake<never>, { readonly _tag: "Storing" }>

/**
 * The durable store of `storing` finished: answer `Stored` for each message. An acknowledged
 * store accepted them too, so its handshake is settled at once (returned); otherwise it waits
 * for the acknowledgement.
 */
export const storeCompleted = <M>(
  s: HandshakeDraft<M>,
  view: MessageView<M>,
  storing: StoringHandshake,
  messages: ReadonlyArray<M>,
  alreadyStored: ReadonlyArray<boolean>,
  known: ReadonlyArray<boolean>,
  now: number,
  out: Sink
): Settled<M> | undefined => {
  const handshake = stored(s, view, storing.grant, messages, alreadyStored, known, now, out)
  return storing.acknowledged ? handshake : undefined
}

/**
 * Whether a store result's `accepted` shows the message was taken care of before this handshake
 * (reloaded, emitted or confirmed already), so it must not be emitted again. Not when the store
 * accepted (`acknowledged`) and had to be retried: an earlier attempt may have committed with its
 * answer lost, and then `accepted` is this handshake's own acceptance.
 */
export const acceptedBefore = (storing: StoringHandshake, retried: boolean, accepted: boolean): boolean =>
  accepted && !(storing.acknowledged && retried)

// ---------------------------------------------------------------------------------------------
// StoredAck

const ackRejected = (token: string, message: string, out: Sink): void =>
  void out.push({ _tag: "AckRejected", token, error: contractError("UnknownStored", message) })

/**
 * A `StoredAck`: the settled handshake when it completes one at once (volatile), or undefined
 * (durable: accepting first; a repeat is ignored; one that matches no Stored is rejected here).
 */
export const storedAck = <M>(s: HandshakeDraft<M>, ack: StoredAck, out: Sink): Settled<M> | undefined => {
  const invalid = checkGrant(s.config, ack.endpoint, ack.controller, "StoredAck")
  if (invalid !== undefined) return void out.push({ _tag: "AckRejected", token: ack.token, error: invalid })
  const handshake = s.handshake
  if (handshake._tag === "Accepting" && handshake.grant.token === ack.token) return undefined
  if (handshake._tag !== "Stored" || handshake.grant.token !== ack.token) {
    if (ack.token === s.lastCompletedToken) return undefined
    return void ackRejected(ack.token, `StoredAck for ${ack.messageId} (token ${ack.token}) matches no Stored awaiting acknowledgement`, out)
  }
  const answers = handshake.stored
  if (answers.length !== 1 || answers[0].seq !== ack.seq || answers[0].messageId !== ack.messageId) {
    return void ackRejected(ack.token, `StoredAck for ${ack.messageId}/${ack.seq} does not match the Stored of grant ${ack.token}`, out)
  }
  return acknowledge(s, handshake, out)
}

/** `AckAll`: acknowledges the Stored handshake of `token`, if that is the one awaiting it. */
export const ackAll = <M>(s: HandshakeDraft<M>, token: string, out: Sink): Settled<M> | undefined => {
  const handshake = s.handshake
  return handshake._tag === "Stored" && handshake.grant.token === token ? acknowledge(s, handshake, out) : undefined
}

/**
 * Acknowledged: a durable machine accepts first (returns undefined; `acceptCompleted` settles
 * later), a volatile one is settled at once.
 */
const acknowledge = <M>(s: HandshakeDraft<M>, handshake: StoredHandshake<M>, out: Sink): Settled<M> | undefined => {
  if (!s.config.durable) return handshake
  s.handshake = { _tag: "Accepting", grant: handshake.grant, stored: handshake.stored, messages: handshake.messages, known: handshake.known }
  out.push({ _tag: "Accept", token: handshake.grant.token, messageIds: handshake.stored.map((answer) => answer.messageId) })
  return undefined
}

/** The durable accept of `token` finished: the settled handshake, or undefined for a late one. */
export const acceptCompleted = <M>(s: HandshakeDraft<M>, token: string): Settled<M> | undefined => {
  const handshake = s.handshake
  return handshake._tag === "Accepting" && handshake.grant.token === token ? handshake : undefined
}

/** Ends the handshake; the machine then emits the settled messages not `known` and offers again. */
export const complete = <M>(s: HandshakeDraft<M>, settled: Settled<M>, out: Sink): void => {
  s.handshake = idle
  s.lastCompletedToken = settled.grant.token
  out.push({ _tag: "Completed", token: settled.grant.token })
}
