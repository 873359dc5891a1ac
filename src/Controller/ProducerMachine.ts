/**
 * The point-to-point producer controller as a pure state machine: `step(state, event)` returns the
 * next state and the actions the shell performs (send, offer a grant, answer a caller, verify a
 * registration, notify confirmations, run a durable operation, fail). No clocks, no fibers: time
 * arrives as `now` on the events that need it.
 *
 * Two sequence spaces: the *wire* sequence numbers one producer session's messages for the
 * consumer (contiguous, one per message or chunk), and the *store* sequence that `Stored` and
 * `DeliveryConfirmed` report (from the durable queue when one is attached, else equal to the
 * wire sequence). They differ only after a reload skips entries that were stored but never
 * accepted, so the consumer never waits on a hole.
 */
import { Either } from "effect"
import { sameAddress } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import { isReservedMessageId, parseChunkMessageId } from "../Protocol/ChunkId.js"
import { MaxWindow } from "../Protocol/Config.js"
import { DeliveryConfirmed, RequestNext, Stored } from "../Protocol/Contract.js"
import type { StoredAck } from "../Protocol/Contract.js"
import { ProducerContractError, ProtocolViolation } from "../Protocol/Errors.js"
import type { ReliableDeliveryStage } from "../Protocol/Failure.js"
import type { Ack, ChunkMark, ConsumerToProducer, ProducerToConsumer, Request, SequencedMessage } from "../Protocol/WireMessage.js"
import type { DurableQueueState, StoredEntry, StoreResult } from "../DurableQueue/DurableProducerQueue.js"
import { SeqLog } from "./internal/SeqLog.js"

export interface ProducerConfig {
  readonly endpoint: string
  /** The configured consumer endpoint; only its live controller may bind. */
  readonly consumer: string
  readonly incarnation: string
  readonly sessionId: string
  readonly deliveryConfirmation: boolean
  readonly retryIntervalMs: number
  readonly durable: boolean
  /** Payloads longer than this many bytes are split into chunks; undefined: never. */
  readonly chunkSize: number | undefined
}

/** One emitted wire message (whole message or chunk) and the store seq it reports. */
export interface OutboundEntry {
  readonly storeSeq: number
  readonly message: SequencedMessage
}

/** A stored message not yet emitted: its parts in order (one part unless chunked). */
export interface PendingMessage {
  readonly messageId: string
  readonly parts: ReadonlyArray<{ readonly storeSeq: number; readonly payload: Uint8Array; readonly chunk?: ChunkMark | undefined }>
}

/** One message handed to the controller: its id and encoded payload. */
export interface ProduceItem {
  readonly messageId: string
  readonly payload: Uint8Array
}

/**
 * Where the one-at-a-time producer handshake stands. One grant is answered by one message on the
 * contract path; the everyday `sendAll` path answers one grant with a batch (stored and accepted
 * together, exactly as one by one would).
 */
export type Handshake =
  | { readonly _tag: "Idle" }
  | { readonly _tag: "Granted"; readonly grant: RequestNext; readonly offeredAt: number }
  | { readonly _tag: "Storing"; readonly grant: RequestNext; readonly messageIds: ReadonlyArray<string> }
  | {
    readonly _tag: "Stored"
    readonly grant: RequestNext
    readonly stored: ReadonlyArray<Stored>
    readonly messages: ReadonlyArray<PendingMessage>
    /** Per message: a resubmission of something already held or accepted, so emit nothing. */
    readonly known: ReadonlyArray<boolean>
    readonly offeredAt: number
  }
  | {
    readonly _tag: "Accepting"
    readonly grant: RequestNext
    readonly stored: ReadonlyArray<Stored>
    readonly messages: ReadonlyArray<PendingMessage>
    readonly known: ReadonlyArray<boolean>
  }

export interface Binding {
  readonly address: ControllerAddress
  readonly nonce: string
}

export interface ProducerState {
  readonly config: ProducerConfig
  readonly phase: "Loading" | "Running" | "Stopped"
  readonly binding: Binding | undefined
  /** Highest wire seq the bound consumer asked for. */
  readonly demandUpTo: number
  /** Highest wire seq the consumer confirmed. */
  readonly confirmedSeq: number
  /** Highest wire seq sent to the current binding. */
  readonly sentUpTo: number
  /** Emitted, unconfirmed entries: wire seqs confirmedSeq+1 .. confirmedSeq+length. */
  readonly unconfirmed: SeqLog<OutboundEntry>
  /** Highest store seq assigned (volatile counter, or the durable queue's cursor). */
  readonly lastStoreSeq: number
  readonly handshake: Handshake
  readonly grantCount: number
  /** The token whose handshake completed last; a repeated StoredAck for it is a no-op. */
  readonly lastCompletedToken: string | undefined
  /** Store-seq watermark already handed to the durable queue for persistence. */
  readonly persistedConfirmSeq: number
}

export type ProducerEvent =
  | { readonly _tag: "Wire"; readonly from: ControllerAddress; readonly message: ConsumerToProducer; readonly now: number }
  | { readonly _tag: "Verified"; readonly address: ControllerAddress; readonly nonce: string; readonly ok: boolean; readonly now: number }
  | { readonly _tag: "Produce"; readonly grant: RequestNext; readonly items: ReadonlyArray<ProduceItem>; readonly now: number }
  | { readonly _tag: "StoredAck"; readonly ack: StoredAck; readonly now: number }
  /** The everyday path acknowledges every message stored under its grant at once. */
  | { readonly _tag: "AckAll"; readonly token: string; readonly now: number }
  | { readonly _tag: "Tick"; readonly now: number }
  | { readonly _tag: "Loaded"; readonly state: DurableQueueState; readonly now: number }
  | { readonly _tag: "StoreCompleted"; readonly token: string; readonly results: ReadonlyArray<StoreResult>; readonly now: number }
  | { readonly _tag: "AcceptCompleted"; readonly token: string; readonly now: number }
  | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }

export type ProducerAction =
  | { readonly _tag: "Send"; readonly to: ControllerAddress; readonly message: ProducerToConsumer }
  | { readonly _tag: "Resend"; readonly to: ControllerAddress; readonly message: ProducerToConsumer }
  | { readonly _tag: "Offer"; readonly grant: RequestNext }
  | {
    readonly _tag: "Answer"
    readonly token: string
    readonly result: Either.Either<ReadonlyArray<Stored>, ProducerContractError>
  }
  | { readonly _tag: "AckRejected"; readonly token: string; readonly error: ProducerContractError }
  | { readonly _tag: "Verify"; readonly address: ControllerAddress; readonly nonce: string }
  | { readonly _tag: "Notify"; readonly confirmed: ReadonlyArray<DeliveryConfirmed> }
  /** Business messages confirmed, for counting, when nobody asked for notifications. */
  | { readonly _tag: "Confirmed"; readonly count: number }
  | { readonly _tag: "Load" }
  | {
    readonly _tag: "Store"
    readonly token: string
    readonly items: ReadonlyArray<{ readonly messageId: string; readonly chunks: ReadonlyArray<Uint8Array> }>
  }
  | { readonly _tag: "Accept"; readonly token: string; readonly messageIds: ReadonlyArray<string> }
  | { readonly _tag: "PersistConfirm"; readonly upToStoreSeq: number }
  | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }
  | { readonly _tag: "Dropped"; readonly reason: DropReason }

/** Why an input was ignored; the shell counts these. */
export type DropReason = "StaleSession" | "UnboundSender" | "UnverifiedSender" | "NotRunning"

export interface Step {
  readonly state: ProducerState
  readonly actions: ReadonlyArray<ProducerAction>
}

const idle: Handshake = { _tag: "Idle" }

/** A fresh controller: volatile ones run at once; durable ones load first. */
export const initial = (config: ProducerConfig, now: number): Step => {
  const state: ProducerState = {
    config,
    phase: config.durable ? "Loading" : "Running",
    binding: undefined,
    demandUpTo: 0,
    confirmedSeq: 0,
    sentUpTo: 0,
    unconfirmed: SeqLog.empty(),
    lastStoreSeq: 0,
    handshake: idle,
    grantCount: 0,
    lastCompletedToken: undefined,
    persistedConfirmSeq: 0
  }
  return config.durable ? { state, actions: [{ _tag: "Load" }] } : offerGrantIfDue(state, now, [])
}

export const lastSeq = (state: ProducerState): number => state.confirmedSeq + state.unconfirmed.length

export const step = (state: ProducerState, event: ProducerEvent): Step => {
  if (state.phase === "Stopped") return { state, actions: [{ _tag: "Dropped", reason: "NotRunning" }] }
  switch (event._tag) {
    case "Wire":
      return onWire(state, event.from, event.message, event.now)
    case "Verified":
      return onVerified(state, event.address, event.nonce, event.ok, event.now)
    case "Produce":
      return onProduce(state, event.grant, event.items, event.now)
    case "StoredAck":
      return onStoredAck(state, event.ack, event.now)
    case "AckAll":
      return onAckAll(state, event.token, event.now)
    case "Tick":
      return onTick(state, event.now)
    case "Loaded":
      return onLoaded(state, event.state, event.now)
    case "StoreCompleted":
      return onStoreCompleted(state, event.token, event.results, event.now)
    case "AcceptCompleted":
      return onAcceptCompleted(state, event.token, event.now)
    case "Fail":
      return fail(state, event.stage, event.cause)
  }
}

const fail = (state: ProducerState, stage: ReliableDeliveryStage, cause: unknown): Step => ({
  state: { ...state, phase: "Stopped" },
  actions: [{ _tag: "Fail", stage, cause }]
})

// ---------------------------------------------------------------------------------------------
// Consumer-side input

const onWire = (state: ProducerState, from: ControllerAddress, message: ConsumerToProducer, now: number): Step => {
  if (state.phase !== "Running") return dropped(state, "NotRunning")
  switch (message._tag) {
    case "RegisterConsumer":
      return onRegister(state, from, message.nonce, now)
    case "Request":
      return onRequest(state, from, message, now)
    case "Ack":
      return onAck(state, from, message, now)
  }
}

const dropped = (state: ProducerState, reason: DropReason): Step => ({ state, actions: [{ _tag: "Dropped", reason }] })

/** Registration grants no demand. The bound controller re-registering needs no new verification. */
const onRegister = (state: ProducerState, from: ControllerAddress, nonce: string, now: number): Step => {
  if (from.endpoint !== state.config.consumer) return dropped(state, "UnverifiedSender")
  if (state.binding !== undefined && sameAddress(state.binding.address, from)) {
    return onVerified(state, from, nonce, true, now)
  }
  return { state, actions: [{ _tag: "Verify", address: from, nonce }] }
}

/**
 * A verified registration binds the sender. The same controller keeps its demand and progress;
 * a new consumer incarnation replaces the binding and starts with no demand, from the first
 * unconfirmed seq.
 */
const onVerified = (state: ProducerState, address: ControllerAddress, nonce: string, ok: boolean, _now: number): Step => {
  if (state.phase !== "Running") return dropped(state, "NotRunning")
  if (!ok) return dropped(state, "UnverifiedSender")
  const rebinding = state.binding === undefined || !sameAddress(state.binding.address, address)
  const next: ProducerState = rebinding
    ? { ...state, binding: { address, nonce }, demandUpTo: state.confirmedSeq, sentUpTo: state.confirmedSeq }
    : { ...state, binding: { address, nonce } }
  return {
    state: next,
    actions: [{
      _tag: "Send",
      to: address,
      message: { _tag: "RegistrationAck", sessionId: state.config.sessionId, nextSeq: state.confirmedSeq + 1, nonce }
    }]
  }
}

/** Only the current registration of the current session may confirm or grant demand. */
const isCurrent = (state: ProducerState, from: ControllerAddress, sessionId: string, nonce: string): DropReason | undefined => {
  if (sessionId !== state.config.sessionId) return "StaleSession"
  if (state.binding === undefined || !sameAddress(state.binding.address, from) || state.binding.nonce !== nonce) {
    return "UnboundSender"
  }
  return undefined
}

const checkConfirmation = (state: ProducerState, confirmedSeq: number): ProtocolViolation | undefined =>
  confirmedSeq > lastSeq(state)
    ? new ProtocolViolation({
      message: `consumer ${state.config.consumer} confirmed seq ${confirmedSeq} but the last seq sent is ${lastSeq(state)}`
    })
    : undefined

const checkDemand = (state: ProducerState, request: Request): ProtocolViolation | undefined => {
  if (request.requestUpToSeq < request.confirmedSeq) {
    return new ProtocolViolation({
      message: `consumer ${state.config.consumer} requested up to seq ${request.requestUpToSeq}, below its confirmed seq ${request.confirmedSeq}`
    })
  }
  if (request.requestUpToSeq - request.confirmedSeq > MaxWindow) {
    return new ProtocolViolation({
      message: `consumer ${state.config.consumer} requested ${request.requestUpToSeq - request.confirmedSeq} messages, more than the maximum window ${MaxWindow}`
    })
  }
  return undefined
}

const onRequest = (state: ProducerState, from: ControllerAddress, request: Request, now: number): Step => {
  const stale = isCurrent(state, from, request.sessionId, request.nonce)
  if (stale !== undefined) return dropped(state, stale)
  const violation = checkConfirmation(state, request.confirmedSeq) ?? checkDemand(state, request)
  if (violation !== undefined) return fail(state, "Protocol", violation)
  const actions: Array<ProducerAction> = []
  let next = confirm(state, request.confirmedSeq, actions)
  if (request.requestUpToSeq > next.demandUpTo) next = { ...next, demandUpTo: request.requestUpToSeq }
  if (request.viaTimeout) resendUnconfirmed(next, actions)
  next = sendWithinDemand(next, actions)
  return offerGrantIfDue(next, now, actions)
}

const onAck = (state: ProducerState, from: ControllerAddress, ack: Ack, now: number): Step => {
  const stale = isCurrent(state, from, ack.sessionId, ack.nonce)
  if (stale !== undefined) return dropped(state, stale)
  const violation = checkConfirmation(state, ack.confirmedSeq)
  if (violation !== undefined) return fail(state, "Protocol", violation)
  const actions: Array<ProducerAction> = []
  return offerGrantIfDue(confirm(state, ack.confirmedSeq, actions), now, actions)
}

/** Drops the confirmed prefix, reports whole messages, and persists the store watermark. */
const confirm = (state: ProducerState, upTo: number, actions: Array<ProducerAction>): ProducerState => {
  const count = upTo - state.confirmedSeq
  if (count <= 0) return state
  const done = state.unconfirmed.slice(0, count)
  const lastEntry = done[done.length - 1]
  if (state.config.deliveryConfirmation) {
    const confirmed: Array<DeliveryConfirmed> = []
    for (const entry of done) {
      const chunk = entry.message.chunk
      if (chunk === undefined || chunk.last) {
        confirmed.push(new DeliveryConfirmed({ endpoint: state.config.endpoint, messageId: entry.message.messageId, seq: entry.storeSeq }))
      }
    }
    if (confirmed.length > 0) actions.push({ _tag: "Notify", confirmed })
  } else {
    let count = 0
    for (const entry of done) if (entry.message.chunk === undefined || entry.message.chunk.last) count++
    if (count > 0) actions.push({ _tag: "Confirmed", count })
  }
  let persistedConfirmSeq = state.persistedConfirmSeq
  if (state.config.durable && lastEntry.storeSeq > persistedConfirmSeq) {
    persistedConfirmSeq = lastEntry.storeSeq
    actions.push({ _tag: "PersistConfirm", upToStoreSeq: persistedConfirmSeq })
  }
  return {
    ...state,
    confirmedSeq: upTo,
    unconfirmed: state.unconfirmed.dropFront(count),
    sentUpTo: Math.max(state.sentUpTo, upTo),
    persistedConfirmSeq
  }
}

/** A timeout request: everything unconfirmed that was already sent goes out again. */
const resendUnconfirmed = (state: ProducerState, actions: Array<ProducerAction>): void => {
  const binding = state.binding
  if (binding === undefined) return
  const upTo = Math.min(state.sentUpTo, state.demandUpTo) - state.confirmedSeq
  for (const entry of state.unconfirmed.slice(0, upTo)) {
    actions.push({ _tag: "Resend", to: binding.address, message: entry.message })
  }
}

/** Sends emitted entries the consumer now has demand for and has not been sent yet. */
const sendWithinDemand = (state: ProducerState, actions: Array<ProducerAction>): ProducerState => {
  const binding = state.binding
  if (binding === undefined) return state
  const upTo = Math.min(lastSeq(state), state.demandUpTo)
  if (upTo <= state.sentUpTo) return state
  for (const entry of state.unconfirmed.slice(state.sentUpTo - state.confirmedSeq, upTo - state.confirmedSeq)) {
    actions.push({ _tag: "Send", to: binding.address, message: entry.message })
  }
  return { ...state, sentUpTo: upTo }
}

/** A grant opens only when the handshake is idle and the consumer has demand left. */
const offerGrantIfDue = (state: ProducerState, now: number, actions: Array<ProducerAction>): Step => {
  if (state.phase !== "Running" || state.handshake._tag !== "Idle" || lastSeq(state) >= state.demandUpTo) {
    return { state, actions }
  }
  const grantCount = state.grantCount + 1
  const grant = new RequestNext({
    endpoint: state.config.endpoint,
    controller: state.config.incarnation,
    token: `${state.config.incarnation}:${grantCount}`
  })
  actions.push({ _tag: "Offer", grant })
  return { state: { ...state, grantCount, handshake: { _tag: "Granted", grant, offeredAt: now } }, actions }
}

// ---------------------------------------------------------------------------------------------
// Producer-side input (the endpoint contract)

const contractError = (reason: ProducerContractError["reason"], message: string) =>
  new ProducerContractError({ reason, message })

/** Checks a `Produced` before its payload is encoded. Returns an error, or undefined when valid. */
export const checkProduced = (
  state: ProducerState,
  grant: RequestNext,
  messageId: string,
  payload: unknown
): ProducerContractError | undefined => {
  if (typeof messageId !== "string" || messageId.trim().length === 0) {
    return contractError("BlankMessageId", "Produced.messageId must be a non-blank string")
  }
  if (isReservedMessageId(messageId)) {
    return contractError("ReservedMessageId", `Produced.messageId must not start with the reserved prefix: ${messageId}`)
  }
  if (payload === undefined) return contractError("MissingPayload", `Produced ${messageId} carries no payload`)
  return checkGrant(state, grant.endpoint, grant.controller, "Produced")
}

const checkGrant = (
  state: ProducerState,
  endpoint: string,
  controller: string,
  what: string
): ProducerContractError | undefined => {
  if (endpoint !== state.config.endpoint) {
    return contractError("ForeignGrant", `${what} answers a grant of endpoint "${endpoint}", not "${state.config.endpoint}"`)
  }
  if (controller !== state.config.incarnation) {
    return contractError("StaleGrant", `${what} answers a grant of an earlier controller of "${endpoint}"; take a new grant`)
  }
  return undefined
}

/**
 * The answer of an already-answered token when the same single message is produced again (a
 * retried grant must receive the same `Produced`); undefined when the token is not answered yet.
 */
export const answeredBefore = (
  state: ProducerState,
  grant: RequestNext,
  messageId: string
): Either.Either<Stored, ProducerContractError> | undefined => {
  const handshake = state.handshake
  if (handshake._tag === "Idle" || handshake._tag === "Granted" || handshake.grant.token !== grant.token) return undefined
  const ids = handshake._tag === "Storing" ? handshake.messageIds : handshake.stored.map((stored) => stored.messageId)
  if (ids.length !== 1 || ids[0] !== messageId) return Either.left(tokenAnswered(grant, ids.join(", ")))
  return handshake._tag === "Storing" ? undefined : Either.right(handshake.stored[0])
}

const tokenAnswered = (grant: RequestNext, messageIds: string) =>
  contractError(
    "TokenAlreadyAnswered",
    `grant ${grant.token} was already answered with ${messageIds}; a retried grant must receive the same Produced`
  )

const onProduce = (state: ProducerState, grant: RequestNext, items: ReadonlyArray<ProduceItem>, now: number): Step => {
  const invalid = checkGrant(state, grant.endpoint, grant.controller, "Produced")
  if (invalid !== undefined) return answer(state, grant.token, Either.left(invalid))
  const handshake = state.handshake
  if (handshake._tag !== "Granted" || handshake.grant.token !== grant.token) {
    if (items.length === 1) {
      const previous = answeredBefore(state, grant, items[0].messageId)
      if (previous !== undefined) return answer(state, grant.token, Either.map(previous, (stored) => [stored]))
      if (handshake._tag === "Storing" && handshake.grant.token === grant.token) return { state, actions: [] }
    }
    return answer(state, grant.token, Either.left(contractError("StaleGrant", `grant ${grant.token} is not outstanding`)))
  }
  const chunked = items.map((item) => ({ messageId: item.messageId, chunks: split(item.payload, state.config.chunkSize) }))
  if (state.config.durable) {
    return {
      state: { ...state, handshake: { _tag: "Storing", grant, messageIds: items.map((item) => item.messageId) } },
      actions: [{ _tag: "Store", token: grant.token, items: chunked }]
    }
  }
  let storeSeq = state.lastStoreSeq
  const messages = chunked.map(({ chunks, messageId }): PendingMessage => ({
    messageId,
    parts: chunks.map((payload, index) => ({ storeSeq: ++storeSeq, payload, chunk: chunkMark(index, chunks.length) }))
  }))
  return storedHandshake({ ...state, lastStoreSeq: storeSeq }, grant, messages, [], [], now)
}

const answer = (
  state: ProducerState,
  token: string,
  result: Either.Either<ReadonlyArray<Stored>, ProducerContractError>
): Step => ({ state, actions: [{ _tag: "Answer", token, result }] })

/** Splits an encoded payload into chunks when it exceeds the chunk size. */
export const split = (payload: Uint8Array, chunkSize: number | undefined): ReadonlyArray<Uint8Array> => {
  if (chunkSize === undefined || payload.length <= chunkSize) return [payload]
  const chunks: Array<Uint8Array> = []
  for (let offset = 0; offset < payload.length; offset += chunkSize) {
    chunks.push(payload.subarray(offset, Math.min(payload.length, offset + chunkSize)))
  }
  return chunks
}

const chunkMark = (index: number, count: number): ChunkMark | undefined =>
  count === 1 ? undefined : { first: index === 0, last: index === count - 1 }

const storedHandshake = (
  state: ProducerState,
  grant: RequestNext,
  messages: ReadonlyArray<PendingMessage>,
  alreadyStored: ReadonlyArray<boolean>,
  known: ReadonlyArray<boolean>,
  now: number
): Step => {
  const stored = messages.map((message, index) =>
    new Stored({
      endpoint: state.config.endpoint,
      controller: state.config.incarnation,
      token: grant.token,
      messageId: message.messageId,
      seq: message.parts[message.parts.length - 1].storeSeq,
      alreadyStored: alreadyStored[index] ?? false
    })
  )
  return {
    state: { ...state, handshake: { _tag: "Stored", grant, stored, messages, known, offeredAt: now } },
    actions: [{ _tag: "Answer", token: grant.token, result: Either.right(stored) }]
  }
}

/**
 * The durable queue's authoritative answer. A resubmission keeps the first write's shape and
 * seqs; one that is already accepted or already emitted is not dispatched twice.
 */
const onStoreCompleted = (state: ProducerState, token: string, results: ReadonlyArray<StoreResult>, now: number): Step => {
  const handshake = state.handshake
  if (handshake._tag !== "Storing" || handshake.grant.token !== token) return { state, actions: [] }
  let lastStoreSeq = state.lastStoreSeq
  const messages = results.map((result): PendingMessage => ({
    messageId: result.messageId,
    parts: result.entries.map((entry) => {
      if (entry.seq > lastStoreSeq) lastStoreSeq = entry.seq
      return { storeSeq: entry.seq, payload: entry.payload, chunk: entry.chunk }
    })
  }))
  const known = results.map((result) => result.alreadyStored && (result.accepted || isHeld(state, result.messageId)))
  return storedHandshake(
    { ...state, lastStoreSeq },
    handshake.grant,
    messages,
    results.map((result) => result.alreadyStored),
    known,
    now
  )
}

/** True when an emitted, unconfirmed entry already carries this business id. */
const isHeld = (state: ProducerState, messageId: string): boolean => {
  for (let index = 0; index < state.unconfirmed.length; index++) {
    if (state.unconfirmed.at(index)!.message.messageId === messageId) return true
  }
  return false
}

const ackRejected = (state: ProducerState, token: string, message: string): Step => ({
  state,
  actions: [{ _tag: "AckRejected", token, error: contractError("UnknownStored", message) }]
})

const onStoredAck = (state: ProducerState, ack: StoredAck, now: number): Step => {
  const invalid = checkGrant(state, ack.endpoint, ack.controller, "StoredAck")
  if (invalid !== undefined) return { state, actions: [{ _tag: "AckRejected", token: ack.token, error: invalid }] }
  const handshake = state.handshake
  if (handshake._tag === "Accepting" && handshake.grant.token === ack.token) return { state, actions: [] }
  if (handshake._tag !== "Stored" || handshake.grant.token !== ack.token) {
    if (ack.token === state.lastCompletedToken) return { state, actions: [] }
    return ackRejected(state, ack.token, `StoredAck for ${ack.messageId} (token ${ack.token}) matches no Stored awaiting acknowledgement`)
  }
  const stored = handshake.stored
  if (stored.length !== 1 || stored[0].seq !== ack.seq || stored[0].messageId !== ack.messageId) {
    return ackRejected(state, ack.token, `StoredAck for ${ack.messageId}/${ack.seq} does not match the Stored of grant ${ack.token}`)
  }
  return acknowledge(state, handshake, now)
}

const onAckAll = (state: ProducerState, token: string, now: number): Step => {
  const handshake = state.handshake
  if (handshake._tag !== "Stored" || handshake.grant.token !== token) return { state, actions: [] }
  return acknowledge(state, handshake, now)
}

/** StoredAck: a durable controller accepts first; a volatile one emits at once. */
const acknowledge = (state: ProducerState, handshake: Extract<Handshake, { _tag: "Stored" }>, now: number): Step => {
  if (state.config.durable) {
    return {
      state: {
        ...state,
        handshake: { _tag: "Accepting", grant: handshake.grant, stored: handshake.stored, messages: handshake.messages, known: handshake.known }
      },
      actions: [{ _tag: "Accept", token: handshake.grant.token, messageIds: handshake.stored.map((stored) => stored.messageId) }]
    }
  }
  return completeHandshake(state, handshake.grant.token, handshake.messages, handshake.known, now)
}

const onAcceptCompleted = (state: ProducerState, token: string, now: number): Step => {
  const handshake = state.handshake
  if (handshake._tag !== "Accepting" || handshake.grant.token !== token) return { state, actions: [] }
  return completeHandshake(state, token, handshake.messages, handshake.known, now)
}

/** Ends the handshake: emits each message not already held, then offers the next grant. */
const completeHandshake = (
  state: ProducerState,
  token: string,
  messages: ReadonlyArray<PendingMessage>,
  known: ReadonlyArray<boolean>,
  now: number
): Step => {
  const actions: Array<ProducerAction> = []
  let next: ProducerState = { ...state, handshake: idle, lastCompletedToken: token }
  for (let index = 0; index < messages.length; index++) {
    if (known[index] !== true) next = emit(next, messages[index])
  }
  return offerGrantIfDue(sendWithinDemand(next, actions), now, actions)
}

/** Appends a message's parts to the unconfirmed log under the next wire seqs. */
const emit = (state: ProducerState, message: PendingMessage): ProducerState => {
  let unconfirmed = state.unconfirmed
  let seq = lastSeq(state)
  for (const part of message.parts) {
    seq++
    unconfirmed = unconfirmed.append({ storeSeq: part.storeSeq, message: sequenced(state, message.messageId, seq, part.payload, part.chunk) })
  }
  return { ...state, unconfirmed }
}

const sequenced = (
  state: ProducerState,
  messageId: string,
  seq: number,
  payload: Uint8Array,
  chunk: ChunkMark | undefined
): SequencedMessage =>
  chunk === undefined
    ? { _tag: "SequencedMessage", sessionId: state.config.sessionId, messageId, seq, payload }
    : { _tag: "SequencedMessage", sessionId: state.config.sessionId, messageId, seq, payload, chunk }

// ---------------------------------------------------------------------------------------------
// Timer and durable lifecycle

/** The retry timer offers an unanswered grant, or the grant of an unacknowledged Stored, again. */
const onTick = (state: ProducerState, now: number): Step => {
  const handshake = state.handshake
  if ((handshake._tag === "Granted" || handshake._tag === "Stored") && now - handshake.offeredAt >= state.config.retryIntervalMs) {
    return {
      state: { ...state, handshake: { ...handshake, offeredAt: now } },
      actions: [{ _tag: "Offer", grant: handshake.grant }]
    }
  }
  return { state, actions: [] }
}

/**
 * A durable controller starts from what the queue holds: accepted, unconfirmed entries become the
 * unconfirmed log (contiguous wire seqs from the confirmed watermark), redelivered before any new
 * grant because a grant needs demand beyond them.
 */
const onLoaded = (state: ProducerState, loaded: DurableQueueState, now: number): Step => {
  if (state.phase !== "Loading") return { state, actions: [] }
  let unconfirmed = SeqLog.empty<OutboundEntry>()
  let seq = loaded.confirmedSeq
  for (const entry of loaded.unconfirmed) {
    seq++
    unconfirmed = unconfirmed.append({ storeSeq: entry.seq, message: reloaded(state, entry, seq) })
  }
  return offerGrantIfDue({
    ...state,
    phase: "Running",
    confirmedSeq: loaded.confirmedSeq,
    sentUpTo: loaded.confirmedSeq,
    demandUpTo: loaded.confirmedSeq,
    unconfirmed,
    lastStoreSeq: loaded.currentSeq,
    persistedConfirmSeq: loaded.confirmedSeq
  }, now, [])
}

const reloaded = (state: ProducerState, entry: StoredEntry, seq: number): SequencedMessage => {
  const business = entry.chunk === undefined ? entry.messageId : (parseChunkMessageId(entry.messageId)?.messageId ?? entry.messageId)
  return sequenced(state, business, seq, entry.payload, entry.chunk)
}
