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
 *
 * The endpoint contract (grants, `Produced`, `Stored`, `StoredAck`, the durable Storing and
 * Accepting states, the retry deadline) is `internal/ProducerHandshake`, shared with the
 * work-pulling machine; this module adds the consumer side and what a message is here.
 *
 * `step` never mutates its input: it copies the state once into a draft (a fast, fixed-shape
 * copy) that the rule functions below update, and returns the draft as the next state.
 */
import { sameAddress } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import { parseChunkMessageId } from "../Protocol/ChunkId.js"
import { DeliveryConfirmed } from "../Protocol/Contract.js"
import type { RequestNext } from "../Protocol/Contract.js"
import { ProtocolViolation } from "../Protocol/Errors.js"
import type { ReliableDeliveryStage } from "../Protocol/Failure.js"
import type { Ack, ChunkMark, ConsumerToProducer, ProducerToConsumer, Request, SequencedMessage, Settle } from "../Protocol/WireMessage.js"
import type { DurableQueueState, StoreResult } from "../DurableQueue/DurableProducerQueue.js"
import { confirmationViolation, demandViolation } from "./internal/DemandRules.js"
import * as ProducerHandshake from "./internal/ProducerHandshake.js"
import type { HandshakeAction, HandshakeEvent, ProduceItem } from "./internal/ProducerHandshake.js"
import { SeqLog } from "./internal/SeqLog.js"

export type { ProduceItem } from "./internal/ProducerHandshake.js"

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
  /** When the message was sent or enqueued (clock millis): its lag and end-to-end latency count from here. */
  readonly at: number
}

/** A stored message not yet emitted: its parts in order (one part unless chunked). */
export interface PendingMessage {
  readonly messageId: string
  /** When it was sent or enqueued (clock millis). */
  readonly at: number
  /** The sender's W3C trace context, carried with every part. */
  readonly trace?: string | undefined
  readonly parts: ReadonlyArray<{ readonly storeSeq: number; readonly payload: Uint8Array; readonly chunk?: ChunkMark | undefined }>
}

/** Where the one-at-a-time producer handshake stands (see `internal/ProducerHandshake`). */
export type Handshake = ProducerHandshake.Handshake<PendingMessage>

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
  /** The highest store seq the consumer confirmed (the watermark follows once nothing below is open). */
  readonly confirmedStoreSeq: number
  /** The latest registration that arrived while loading; answered once loaded. */
  readonly registrationWhileLoading: Binding | undefined
  /** Wire seqs the latest emitted message took (0 before the first one). */
  readonly lastParts: number
  /**
   * Messages the consumer dead-lettered, by the wire seq their last part ends at: `Recording`
   * while the durable queue records them, then `Recorded` (answered `Settled`) until the
   * consumer confirms past them. They are not reported as confirmed.
   */
  readonly deadLettered: ReadonlyMap<number, "Recording" | "Recorded">
}

export type ProducerEvent =
  | { readonly _tag: "Wire"; readonly from: ControllerAddress; readonly message: ConsumerToProducer; readonly now: number }
  | { readonly _tag: "Verified"; readonly address: ControllerAddress; readonly nonce: string; readonly ok: boolean; readonly now: number }
  | HandshakeEvent
  | { readonly _tag: "Tick"; readonly now: number }
  | { readonly _tag: "Loaded"; readonly state: DurableQueueState; readonly now: number }
  | {
    readonly _tag: "StoreCompleted"
    readonly token: string
    readonly results: ReadonlyArray<StoreResult>
    /** An earlier attempt of this store failed and may have committed (see `ProducerHandshake.acceptedBefore`). */
    readonly retried?: boolean
    readonly now: number
  }
  | { readonly _tag: "AcceptCompleted"; readonly token: string; readonly now: number }
  /** The durable queue recorded the dead letter of the message ending at `seq`. */
  | { readonly _tag: "DeadLetterRecorded"; readonly seq: number; readonly now: number }
  | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }

export type ProducerAction =
  | { readonly _tag: "Send"; readonly to: ControllerAddress; readonly message: ProducerToConsumer }
  | { readonly _tag: "Resend"; readonly to: ControllerAddress; readonly message: ProducerToConsumer }
  | HandshakeAction
  | { readonly _tag: "Verify"; readonly address: ControllerAddress; readonly nonce: string }
  | { readonly _tag: "Notify"; readonly confirmed: ReadonlyArray<DeliveryConfirmed> }
  /** Business messages confirmed, for counting, when nobody asked for notifications. */
  | { readonly _tag: "Confirmed"; readonly count: number }
  | { readonly _tag: "Load" }
  | {
    readonly _tag: "Store"
    readonly token: string
    readonly items: ReadonlyArray<StoreItem>
    /** Accept them in the same durable step (the producer acknowledged with the produce). */
    readonly accept: boolean
  }
  | { readonly _tag: "PersistConfirm"; readonly upToStoreSeq: number }
  /** Record the message ending at wire seq `seq` as dead-lettered (durable only). */
  | {
    readonly _tag: "DeadLetter"
    readonly seq: number
    readonly messageId: string
    readonly attempts: number
    readonly lastError: string
    readonly at: number
  }
  | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }
  | { readonly _tag: "Dropped"; readonly reason: DropReason }

/** A message to store: its parts (one unless chunked) and what comes with it. */
export interface StoreItem {
  readonly messageId: string
  readonly chunks: ReadonlyArray<Uint8Array>
  readonly fromBacklog?: boolean | undefined
  readonly at?: number | undefined
  readonly trace?: string | undefined
}

/** Why an input was ignored; the shell counts these. */
export type DropReason = "StaleSession" | "UnboundSender" | "UnverifiedSender" | "NotRunning"

export interface Step {
  readonly state: ProducerState
  readonly actions: ReadonlyArray<ProducerAction>
}

type Draft = { -readonly [K in keyof ProducerState]: ProducerState[K] }
type Out = Array<ProducerAction>

/** One fixed-shape copy per step: much cheaper than several object spreads. */
class StateDraft implements Draft {
  config: ProducerConfig
  phase: ProducerState["phase"]
  binding: Binding | undefined
  demandUpTo: number
  confirmedSeq: number
  sentUpTo: number
  unconfirmed: SeqLog<OutboundEntry>
  lastStoreSeq: number
  handshake: Handshake
  grantCount: number
  lastCompletedToken: string | undefined
  persistedConfirmSeq: number
  confirmedStoreSeq: number
  registrationWhileLoading: Binding | undefined
  lastParts: number
  deadLettered: ReadonlyMap<number, "Recording" | "Recorded">
  constructor(from: ProducerState) {
    this.config = from.config
    this.phase = from.phase
    this.binding = from.binding
    this.demandUpTo = from.demandUpTo
    this.confirmedSeq = from.confirmedSeq
    this.sentUpTo = from.sentUpTo
    this.unconfirmed = from.unconfirmed
    this.lastStoreSeq = from.lastStoreSeq
    this.handshake = from.handshake
    this.grantCount = from.grantCount
    this.lastCompletedToken = from.lastCompletedToken
    this.persistedConfirmSeq = from.persistedConfirmSeq
    this.confirmedStoreSeq = from.confirmedStoreSeq
    this.registrationWhileLoading = from.registrationWhileLoading
    this.lastParts = from.lastParts
    this.deadLettered = from.deadLettered
  }
}

/** A fresh controller: volatile ones run at once; durable ones load first. */
export const initial = (config: ProducerConfig, now: number): Step => {
  const state = new StateDraft({
    config,
    phase: config.durable ? "Loading" : "Running",
    binding: undefined,
    demandUpTo: 0,
    confirmedSeq: 0,
    sentUpTo: 0,
    unconfirmed: SeqLog.empty(),
    lastStoreSeq: 0,
    handshake: ProducerHandshake.idle,
    grantCount: 0,
    lastCompletedToken: undefined,
    persistedConfirmSeq: 0,
    confirmedStoreSeq: 0,
    registrationWhileLoading: undefined,
    lastParts: 0,
    deadLettered: new Map()
  })
  const actions: Out = []
  if (config.durable) actions.push({ _tag: "Load" })
  else offerGrantIfDue(state, now, actions)
  return { state, actions }
}

export const lastSeq = (state: ProducerState): number => state.confirmedSeq + state.unconfirmed.length

/**
 * How many messages the free demand is worth: wire seqs when messages are never chunked; with
 * chunking, an estimate from the latest message's chunk count (one message until there is one),
 * so a batch of large messages does not encode far more than the consumer can take.
 */
export const freeMessages = (state: ProducerState): number => {
  const free = state.demandUpTo - lastSeq(state)
  if (free <= 0) return 0
  if (state.config.chunkSize === undefined) return free
  return state.lastParts === 0 ? 1 : Math.max(1, Math.floor(free / state.lastParts))
}

export const step = (state: ProducerState, event: ProducerEvent): Step => {
  if (state.phase === "Stopped") return { state, actions: [{ _tag: "Dropped", reason: "NotRunning" }] }
  const s = new StateDraft(state)
  const out: Out = []
  switch (event._tag) {
    case "Wire":
      onWire(s, event.from, event.message, event.now, out)
      break
    case "Verified":
      onVerified(s, event.address, event.nonce, event.ok, out)
      break
    case "Produce":
      onProduce(s, event.grant, event.items, false, event.now, out)
      break
    case "StoredAck":
      completeHandshake(s, ProducerHandshake.storedAck(s, event.ack, out), event.now, out)
      break
    case "ProduceAcked":
      // Volatile, unchunked: stored and acknowledged in this fold, with nothing in between.
      if (!s.config.durable && unchunked(s, event.items)) {
        onProduceAckedVolatile(s, event.grant, event.items, event.now, out)
        break
      }
      // Durable: one store-and-accept step; volatile: stored in this fold, acknowledged at once.
      onProduce(s, event.grant, event.items, true, event.now, out)
      if (!s.config.durable) completeHandshake(s, ProducerHandshake.ackAll(s, event.grant.token, out), event.now, out)
      break
    case "AckAll":
      completeHandshake(s, ProducerHandshake.ackAll(s, event.token, out), event.now, out)
      break
    case "Tick":
      onTick(s, event.now, out)
      break
    case "Loaded":
      onLoaded(s, event.state, event.now, out)
      break
    case "StoreCompleted":
      onStoreCompleted(s, event.token, event.results, event.retried === true, event.now, out)
      break
    case "StoreRejected":
      ProducerHandshake.storeRejected(s, event.token, event.messageId, event.cause, event.now, out)
      break
    case "AcceptCompleted":
      completeHandshake(s, ProducerHandshake.acceptCompleted(s, event.token), event.now, out)
      break
    case "DeadLetterRecorded":
      onDeadLetterRecorded(s, event.seq, out)
      break
    case "Fail":
      fail(s, event.stage, event.cause, out)
      break
  }
  return { state: s, actions: out }
}

const fail = (s: Draft, stage: ReliableDeliveryStage, cause: unknown, out: Out): void => {
  s.phase = "Stopped"
  out.push({ _tag: "Fail", stage, cause })
}

const dropped = (reason: DropReason, out: Out): void => void out.push({ _tag: "Dropped", reason })

// ---------------------------------------------------------------------------------------------
// Consumer-side input

const onWire = (s: Draft, from: ControllerAddress, message: ConsumerToProducer, now: number, out: Out): void => {
  if (s.phase === "Loading" && message._tag === "RegisterConsumer") {
    // Answered once loaded, so a consumer does not wait a whole tick for a restarting producer.
    s.registrationWhileLoading = { address: from, nonce: message.nonce }
    return
  }
  if (s.phase !== "Running") return dropped("NotRunning", out)
  switch (message._tag) {
    case "RegisterConsumer":
      return onRegister(s, from, message.nonce, out)
    case "Request":
      return onRequest(s, from, message, now, out)
    case "Ack":
      return onAck(s, from, message, now, out)
    case "Settle":
      return onSettle(s, from, message, now, out)
  }
}

/** Registration grants no demand. The bound controller re-registering needs no new verification. */
const onRegister = (s: Draft, from: ControllerAddress, nonce: string, out: Out): void => {
  if (from.endpoint !== s.config.consumer) return dropped("UnverifiedSender", out)
  if (s.binding !== undefined && sameAddress(s.binding.address, from)) return onVerified(s, from, nonce, true, out)
  out.push({ _tag: "Verify", address: from, nonce })
}

/**
 * A verified registration binds the sender. The same controller keeps its demand and progress;
 * a new consumer incarnation replaces the binding and starts with no demand, from the first
 * unconfirmed seq.
 */
const onVerified = (s: Draft, address: ControllerAddress, nonce: string, ok: boolean, out: Out): void => {
  if (s.phase !== "Running") return dropped("NotRunning", out)
  if (!ok) return dropped("UnverifiedSender", out)
  if (s.binding === undefined || !sameAddress(s.binding.address, address)) {
    s.demandUpTo = s.confirmedSeq
    s.sentUpTo = s.confirmedSeq
  }
  s.binding = { address, nonce }
  out.push({
    _tag: "Send",
    to: address,
    message: { _tag: "RegistrationAck", sessionId: s.config.sessionId, nextSeq: s.confirmedSeq + 1, nonce }
  })
}

/**
 * Only the bound consumer controller, in the current session, may confirm or grant demand. Which
 * of its registrations (nonce) a message names does not matter: it is the same verified
 * controller, and confirmations and demand only ever grow, so an older message changes nothing.
 * (A registration duplicated or delayed in flight can rebind to an older nonce; requiring the
 * nonce would then drop every later message of the consumer.)
 */
const staleReason = (s: Draft, from: ControllerAddress, sessionId: string): DropReason | undefined => {
  if (sessionId !== s.config.sessionId) return "StaleSession"
  if (s.binding === undefined || !sameAddress(s.binding.address, from)) return "UnboundSender"
  return undefined
}

const checkConfirmation = (s: Draft, confirmedSeq: number) =>
  confirmationViolation(`consumer ${s.config.consumer}`, confirmedSeq, lastSeq(s)) ?? midMessage(s, confirmedSeq)

/**
 * A consumer confirms whole messages only. A watermark inside a chunk run would be persisted
 * and reloaded as a run without its first chunk, which no consumer could ever deliver.
 */
const midMessage = (s: Draft, confirmedSeq: number): ProtocolViolation | undefined => {
  if (confirmedSeq <= s.confirmedSeq) return undefined
  const entry = s.unconfirmed.at(confirmedSeq - s.confirmedSeq - 1)
  if (entry === undefined || isMessageEnd(entry)) return undefined
  return new ProtocolViolation({
    message: `consumer ${s.config.consumer} confirmed seq ${confirmedSeq}, inside the chunks of message ${entry.message.messageId}`
  })
}

const checkDemand = (s: Draft, request: Request) => demandViolation(`consumer ${s.config.consumer}`, request)

const onRequest = (s: Draft, from: ControllerAddress, request: Request, now: number, out: Out): void => {
  const stale = staleReason(s, from, request.sessionId)
  if (stale !== undefined) return dropped(stale, out)
  const violation = checkConfirmation(s, request.confirmedSeq) ?? checkDemand(s, request)
  if (violation !== undefined) return fail(s, "Protocol", violation, out)
  confirm(s, request.confirmedSeq, out)
  if (request.requestUpToSeq > s.demandUpTo) s.demandUpTo = request.requestUpToSeq
  if (request.viaTimeout) resendUnconfirmed(s, out)
  sendWithinDemand(s, out)
  offerGrantIfDue(s, now, out)
}

const onAck = (s: Draft, from: ControllerAddress, ack: Ack, now: number, out: Out): void => {
  const stale = staleReason(s, from, ack.sessionId)
  if (stale !== undefined) return dropped(stale, out)
  const violation = checkConfirmation(s, ack.confirmedSeq)
  if (violation !== undefined) return fail(s, "Protocol", violation, out)
  confirm(s, ack.confirmedSeq, out)
  offerGrantIfDue(s, now, out)
}

/**
 * The consumer settles a message without confirming it as processed. A point-to-point consumer
 * only dead-letters (its attempts are exhausted, or its payload cannot be decoded): a durable
 * producer records the dead letter with its payload before answering `Settled`, so a crash after
 * the consumer confirms past it keeps it; a volatile one answers at once. A repeat is answered
 * again (or, while recording, when the record is written).
 */
const onSettle = (s: Draft, from: ControllerAddress, settle: Settle, now: number, out: Out): void => {
  const stale = staleReason(s, from, settle.sessionId)
  if (stale !== undefined) return dropped(stale, out)
  if (settle.outcome._tag !== "DeadLettered") return dropped("UnverifiedSender", out)
  if (settle.seq <= s.confirmedSeq) return settledTo(s, settle.seq, out)
  const entry = s.unconfirmed.at(settle.seq - s.confirmedSeq - 1)
  if (entry === undefined || !isMessageEnd(entry)) return dropped("UnboundSender", out)
  const known = s.deadLettered.get(settle.seq)
  if (known === "Recording") return
  if (known === undefined) {
    const deadLettered = new Map(s.deadLettered)
    deadLettered.set(settle.seq, s.config.durable ? "Recording" : "Recorded")
    s.deadLettered = deadLettered
    if (s.config.durable) {
      return void out.push({
        _tag: "DeadLetter",
        seq: settle.seq,
        messageId: entry.message.messageId,
        attempts: settle.outcome.attempts,
        lastError: settle.outcome.error,
        at: now
      })
    }
  }
  settledTo(s, settle.seq, out)
}

const onDeadLetterRecorded = (s: Draft, seq: number, out: Out): void => {
  if (s.deadLettered.get(seq) !== "Recording") return
  const deadLettered = new Map(s.deadLettered)
  deadLettered.set(seq, "Recorded")
  s.deadLettered = deadLettered
  settledTo(s, seq, out)
}

const settledTo = (s: Draft, seq: number, out: Out): void => {
  const binding = s.binding
  if (binding === undefined) return
  out.push({ _tag: "Send", to: binding.address, message: { _tag: "Settled", sessionId: s.config.sessionId, seq } })
}

/** Drops the confirmed prefix, reports whole messages, and persists the store watermark. */
const confirm = (s: Draft, upTo: number, out: Out): void => {
  const count = upTo - s.confirmedSeq
  if (count <= 0) return
  const done = s.unconfirmed.slice(0, count)
  const deadLettered = s.deadLettered.size === 0 ? undefined : new Map(s.deadLettered)
  const reported = (entry: OutboundEntry, seq: number) => isMessageEnd(entry) && deadLettered?.delete(seq) !== true
  if (s.config.deliveryConfirmation) {
    const confirmed: Array<DeliveryConfirmed> = []
    for (let index = 0; index < done.length; index++) {
      const entry = done[index]
      if (reported(entry, s.confirmedSeq + index + 1)) {
        confirmed.push(new DeliveryConfirmed({ endpoint: s.config.endpoint, messageId: entry.message.messageId, seq: entry.storeSeq }))
      }
    }
    if (confirmed.length > 0) out.push({ _tag: "Notify", confirmed })
  } else {
    let messages = 0
    for (let index = 0; index < done.length; index++) if (reported(done[index], s.confirmedSeq + index + 1)) messages++
    if (messages > 0) out.push({ _tag: "Confirmed", count: messages })
  }
  if (deadLettered !== undefined) s.deadLettered = deadLettered
  s.confirmedSeq = upTo
  s.unconfirmed = s.unconfirmed.dropFront(count)
  if (upTo > s.sentUpTo) s.sentUpTo = upTo
  if (s.config.durable) {
    for (const entry of done) if (entry.storeSeq > s.confirmedStoreSeq) s.confirmedStoreSeq = entry.storeSeq
    persistWatermark(s, out)
  }
}

/**
 * Persists the store-seq watermark the confirmations allow. The queue confirms every accepted
 * entry at or below it, so it must stay below every emitted entry still unconfirmed: store and
 * emission order differ when a message stored by an earlier controller is accepted late (a
 * resubmission), and confirming up to a later message must not confirm it before its delivery.
 */
const persistWatermark = (s: Draft, out: Out): void => {
  let watermark = s.confirmedStoreSeq
  for (let index = 0; index < s.unconfirmed.length; index++) {
    const storeSeq = s.unconfirmed.at(index)!.storeSeq
    if (storeSeq <= watermark) watermark = storeSeq - 1
  }
  if (watermark <= s.persistedConfirmSeq) return
  s.persistedConfirmSeq = watermark
  out.push({ _tag: "PersistConfirm", upToStoreSeq: watermark })
}

const isMessageEnd = (entry: OutboundEntry): boolean => entry.message.chunk === undefined || entry.message.chunk.last

/** A timeout request: everything unconfirmed that was already sent goes out again. */
const resendUnconfirmed = (s: Draft, out: Out): void => {
  const binding = s.binding
  if (binding === undefined) return
  for (const entry of s.unconfirmed.slice(0, Math.min(s.sentUpTo, s.demandUpTo) - s.confirmedSeq)) {
    out.push({ _tag: "Resend", to: binding.address, message: entry.message })
  }
}

/** Sends emitted entries the consumer now has demand for and has not been sent yet. */
const sendWithinDemand = (s: Draft, out: Out): void => {
  const binding = s.binding
  if (binding === undefined) return
  const upTo = Math.min(lastSeq(s), s.demandUpTo)
  for (let seq = s.sentUpTo + 1; seq <= upTo; seq++) {
    out.push({ _tag: "Send", to: binding.address, message: s.unconfirmed.at(seq - s.confirmedSeq - 1)!.message })
  }
  if (upTo > s.sentUpTo) s.sentUpTo = upTo
}

/** A grant opens only when the handshake is idle and the consumer has demand left. */
const offerGrantIfDue = (s: Draft, now: number, out: Out): void => {
  if (s.phase !== "Running" || s.handshake._tag !== "Idle" || lastSeq(s) >= s.demandUpTo) return
  ProducerHandshake.offerGrant(s, now, out)
}

// ---------------------------------------------------------------------------------------------
// Producer-side input (the endpoint contract)

/** Checks a `Produced` before its payload is encoded. Returns an error, or undefined when valid. */
export const checkProduced = (state: ProducerState, grant: RequestNext, messageId: string, payload: unknown) =>
  ProducerHandshake.checkProduced(state.config, grant, messageId, payload)

/**
 * The answer of an already-answered token when the same single message is produced again (a
 * retried grant must receive the same `Produced`); undefined when the token is not answered yet.
 */
export const answeredBefore = (state: ProducerState, grant: RequestNext, messageId: string) =>
  ProducerHandshake.answeredBefore(state.handshake, grant, messageId)

/** `Stored` reports a message's id and the store seq of its last part. */
const messageView: ProducerHandshake.MessageView<PendingMessage> = {
  messageId: (message) => message.messageId,
  storeSeq: (message) => message.parts[message.parts.length - 1].storeSeq
}

const onProduce = (
  s: Draft,
  grant: RequestNext,
  items: ReadonlyArray<ProduceItem>,
  acknowledged: boolean,
  now: number,
  out: Out
): void => {
  if (!ProducerHandshake.admitProduce(s, grant, items, out)) return
  if (s.config.durable) {
    ProducerHandshake.startStoring(s, grant, items, acknowledged)
    out.push({
      _tag: "Store",
      token: grant.token,
      items: items.map((item): StoreItem => ({
        messageId: item.messageId,
        chunks: split(item.payload, s.config.chunkSize),
        fromBacklog: item.fromBacklog,
        at: item.at,
        trace: item.trace
      })),
      accept: acknowledged
    })
    return
  }
  const messages: Array<PendingMessage> = new Array(items.length)
  const chunkSize = s.config.chunkSize
  for (let index = 0; index < items.length; index++) {
    const item = items[index]
    if (chunkSize === undefined || item.payload.length <= chunkSize) {
      // The usual case, one part: no chunk arrays.
      messages[index] = {
        messageId: item.messageId,
        at: item.at ?? now,
        trace: item.trace,
        parts: [{ storeSeq: ++s.lastStoreSeq, payload: item.payload, chunk: undefined }]
      }
      continue
    }
    const chunks = split(item.payload, chunkSize)
    const parts = chunks.map((payload, part) => ({ storeSeq: ++s.lastStoreSeq, payload, chunk: chunkMark(part, chunks.length) }))
    messages[index] = { messageId: item.messageId, at: item.at ?? now, trace: item.trace, parts }
  }
  ProducerHandshake.stored(s, messageView, grant, messages, undefined, undefined, now, out)
}

/** True when no item needs chunks (each is one part, one wire seq). */
const unchunked = (s: Draft, items: ReadonlyArray<ProduceItem>): boolean => {
  const chunkSize = s.config.chunkSize
  if (chunkSize === undefined) return true
  for (const item of items) if (item.payload.length > chunkSize) return false
  return true
}

/**
 * The everyday volatile path (`ProduceAcked`, no chunks): the same answer, state and actions as
 * `onProduce` followed by `AckAll`, without the stored-message values and the `Stored` handshake
 * that would only live until the end of this fold.
 */
const onProduceAckedVolatile = (
  s: Draft,
  grant: RequestNext,
  items: ReadonlyArray<ProduceItem>,
  now: number,
  out: Out
): void => {
  if (!ProducerHandshake.admitProduce(s, grant, items, out)) {
    // Not this grant's first answer: acknowledge the handshake it names, as `AckAll` does.
    return completeHandshake(s, ProducerHandshake.ackAll(s, grant.token, out), now, out)
  }
  const seqs: Array<number> = new Array(items.length)
  for (let index = 0; index < items.length; index++) seqs[index] = ++s.lastStoreSeq
  ProducerHandshake.storedAndCompleted(s, grant, items, seqs, out)
  let seq = lastSeq(s)
  let unconfirmed = s.unconfirmed
  for (let index = 0; index < items.length; index++) {
    const item = items[index]
    seq++
    unconfirmed = unconfirmed.append({
      storeSeq: seqs[index],
      message: sequenced(s, item.messageId, seq, item.payload, undefined, item.trace),
      at: item.at ?? now
    })
  }
  s.unconfirmed = unconfirmed
  if (items.length > 0) s.lastParts = 1
  sendWithinDemand(s, out)
  offerGrantIfDue(s, now, out)
}

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

/**
 * The durable queue's authoritative answer. A resubmission keeps the first write's shape and
 * seqs; one that is already accepted or already emitted, or repeats an earlier id of the same
 * batch, is not dispatched twice. A store that accepted too settles the handshake at once.
 */
const onStoreCompleted = (
  s: Draft,
  token: string,
  results: ReadonlyArray<StoreResult>,
  retried: boolean,
  now: number,
  out: Out
): void => {
  const storing = ProducerHandshake.storing(s, token)
  if (storing === undefined) return
  const messages = results.map((result): PendingMessage => ({
    messageId: result.messageId,
    at: result.entries[0]?.at ?? now,
    trace: result.entries[0]?.trace,
    parts: result.entries.map((entry) => {
      if (entry.seq > s.lastStoreSeq) s.lastStoreSeq = entry.seq
      return { storeSeq: entry.seq, payload: entry.payload, chunk: entry.chunk }
    })
  }))
  const known = results.map((result, index) =>
    result.alreadyStored && (
      result.deadLettered === true || ProducerHandshake.acceptedBefore(storing, retried, result.accepted) || isHeld(s, result.messageId) ||
      (result.accepted && isConfirmed(s, result)) || repeatsEarlier(results, index)
    )
  )
  const alreadyStored = results.map((result) => result.alreadyStored)
  const settled = ProducerHandshake.storeCompleted(s, messageView, storing, messages, alreadyStored, known, now, out)
  completeHandshake(s, settled, now, out)
}

/**
 * True when the stored message lies at or below the confirmed watermark. One that was accepted
 * before was delivered and confirmed already (and its payload compacted away): a retried
 * store-and-accept answered for it must not emit it again, since its `accepted` is then not this
 * handshake's own but an earlier controller's, whose message this one reloaded, emitted and saw
 * confirmed while the resubmission was being retried.
 */
const isConfirmed = (s: Draft, result: StoreResult): boolean => {
  for (const entry of result.entries) if (entry.seq > s.persistedConfirmSeq) return false
  return result.entries.length > 0
}

/** True when an earlier result of the same batch carries the same business id. */
const repeatsEarlier = (results: ReadonlyArray<StoreResult>, index: number): boolean => {
  for (let other = 0; other < index; other++) if (results[other].messageId === results[index].messageId) return true
  return false
}

/** True when an emitted, unconfirmed entry already carries this business id. */
const isHeld = (s: Draft, messageId: string): boolean => {
  for (let index = 0; index < s.unconfirmed.length; index++) {
    if (s.unconfirmed.at(index)!.message.messageId === messageId) return true
  }
  return false
}

/** Ends a settled handshake (none: nothing to do): emits each message not already held, then offers the next grant. */
const completeHandshake = (s: Draft, settled: ProducerHandshake.Settled<PendingMessage> | undefined, now: number, out: Out): void => {
  if (settled === undefined) return
  ProducerHandshake.complete(s, settled, out)
  for (let index = 0; index < settled.messages.length; index++) {
    if (settled.known[index] !== true) emit(s, settled.messages[index])
  }
  sendWithinDemand(s, out)
  offerGrantIfDue(s, now, out)
}

/** Appends a message's parts to the unconfirmed log under the next wire seqs. */
const emit = (s: Draft, message: PendingMessage): void => {
  let seq = lastSeq(s)
  let unconfirmed = s.unconfirmed
  for (const part of message.parts) {
    seq++
    unconfirmed = unconfirmed.append({
      storeSeq: part.storeSeq,
      message: sequenced(s, message.messageId, seq, part.payload, part.chunk, message.trace),
      at: message.at
    })
  }
  s.unconfirmed = unconfirmed
  s.lastParts = message.parts.length
}

const sequenced = (
  s: Draft,
  messageId: string,
  seq: number,
  payload: Uint8Array,
  chunk: ChunkMark | undefined,
  trace: string | undefined
): SequencedMessage => {
  const message: SequencedMessage = chunk === undefined
    ? { _tag: "SequencedMessage", sessionId: s.config.sessionId, messageId, seq, payload }
    : { _tag: "SequencedMessage", sessionId: s.config.sessionId, messageId, seq, payload, chunk }
  // Only a sampled sender's messages carry a trace; the others keep their usual shape.
  return trace === undefined ? message : { ...message, trace }
}

// ---------------------------------------------------------------------------------------------
// Timer and durable lifecycle

/** When the retry timer must next look at the handshake; undefined when nothing waits on it. */
export const nextDeadline = (state: ProducerState): number | undefined =>
  ProducerHandshake.nextDeadline(state.handshake, state.config.retryIntervalMs)

/** The retry timer offers an unanswered grant, or the grant of an unacknowledged Stored, again. */
const onTick = (s: Draft, now: number, out: Out): void => ProducerHandshake.retry(s, now, out)

/**
 * A durable controller starts from what the queue holds: accepted, unconfirmed entries become the
 * unconfirmed log (contiguous wire seqs from the confirmed watermark), redelivered before any new
 * grant because a grant needs demand beyond them.
 */
const onLoaded = (s: Draft, loaded: DurableQueueState, now: number, out: Out): void => {
  if (s.phase !== "Loading") return
  s.phase = "Running"
  s.confirmedSeq = loaded.confirmedSeq
  s.sentUpTo = loaded.confirmedSeq
  s.demandUpTo = loaded.confirmedSeq
  s.lastStoreSeq = loaded.currentSeq
  s.persistedConfirmSeq = loaded.confirmedSeq
  s.confirmedStoreSeq = loaded.confirmedSeq
  let unconfirmed = SeqLog.empty<OutboundEntry>()
  let seq = loaded.confirmedSeq
  for (const entry of loaded.unconfirmed) {
    seq++
    const business = entry.chunk === undefined ? entry.messageId : (parseChunkMessageId(entry.messageId)?.messageId ?? entry.messageId)
    unconfirmed = unconfirmed.append({
      storeSeq: entry.seq,
      message: sequenced(s, business, seq, entry.payload, entry.chunk, entry.trace),
      at: entry.at ?? now
    })
  }
  s.unconfirmed = unconfirmed
  const waiting = s.registrationWhileLoading
  s.registrationWhileLoading = undefined
  if (waiting !== undefined) onRegister(s, waiting.address, waiting.nonce, out)
  offerGrantIfDue(s, now, out)
}
