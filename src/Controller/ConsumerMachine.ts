/**
 * The consumer controller as a pure state machine. It registers with the producer controller,
 * asks for demand one window at a time, buffers what arrives out of order, reassembles chunks,
 * hands exactly one unconfirmed delivery at a time to the endpoint, and on each tick
 * re-registers, re-delivers or re-requests as needed.
 */
import { sameAddress } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import { ProtocolViolation } from "../Protocol/Errors.js"
import type { ReliableDeliveryStage } from "../Protocol/Failure.js"
import type { ConsumerToProducer, ProducerToConsumer, RegistrationAck, SequencedMessage } from "../Protocol/WireMessage.js"
import { SeqLog } from "./internal/SeqLog.js"

export interface ConsumerConfig {
  readonly endpoint: string
  readonly incarnation: string
  readonly window: number
  readonly resendIntervalMs: number
}

export interface Session {
  readonly sessionId: string
  readonly producer: ControllerAddress
  readonly nonce: string
}

/** The delivery the endpoint holds: its id, how many seqs (chunks) it covers, when it was handed out. */
export interface InFlight {
  readonly id: number
  readonly messageId: string
  readonly seq: number
  readonly count: number
  readonly payload: Uint8Array
  readonly deliveredAt: number
}

export interface ConsumerState {
  readonly config: ConsumerConfig
  readonly phase: "Running" | "Stopped"
  /** The producer controller address the last registration went to, and its nonce. */
  readonly registration: { readonly producer: ControllerAddress; readonly nonce: string } | undefined
  readonly registrations: number
  readonly session: Session | undefined
  readonly confirmedSeq: number
  readonly requestedUpTo: number
  /** Received messages with contiguous seqs from confirmedSeq + 1 (the head may be in flight). */
  readonly received: SeqLog<SequencedMessage>
  /** Received messages beyond a gap, ascending by seq. */
  readonly parked: ReadonlyArray<SequencedMessage>
  readonly inFlight: InFlight | undefined
  readonly deliveries: number
  /** Valid producer traffic arrived since the last tick. */
  readonly heard: boolean
  readonly lastGapRequestAt: number
}

export type ConsumerEvent =
  | { readonly _tag: "Wire"; readonly from: ControllerAddress; readonly message: ProducerToConsumer; readonly now: number }
  | { readonly _tag: "Resolved"; readonly producer: ControllerAddress | undefined; readonly now: number }
  | { readonly _tag: "Confirm"; readonly id: number; readonly now: number }
  | { readonly _tag: "Tick"; readonly now: number; readonly handlerBusy: boolean }
  | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }

export type ConsumerAction =
  | { readonly _tag: "Send"; readonly to: ControllerAddress; readonly message: ConsumerToProducer }
  | { readonly _tag: "Resolve" }
  | { readonly _tag: "Deliver"; readonly delivery: InFlight; readonly redelivery: boolean }
  | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }
  | { readonly _tag: "Dropped"; readonly reason: "StaleSession" | "UnknownSender" | "BeyondDemand" | "NotRunning" }

export interface Step {
  readonly state: ConsumerState
  readonly actions: ReadonlyArray<ConsumerAction>
}

/** A fresh controller looks its producer up at once. */
export const initial = (config: ConsumerConfig): Step => ({
  state: {
    config,
    phase: "Running",
    registration: undefined,
    registrations: 0,
    session: undefined,
    confirmedSeq: 0,
    requestedUpTo: 0,
    received: SeqLog.empty(),
    parked: [],
    inFlight: undefined,
    deliveries: 0,
    heard: false,
    lastGapRequestAt: Number.NEGATIVE_INFINITY
  },
  actions: [{ _tag: "Resolve" }]
})

export const step = (state: ConsumerState, event: ConsumerEvent): Step => {
  if (state.phase === "Stopped") return { state, actions: [{ _tag: "Dropped", reason: "NotRunning" }] }
  switch (event._tag) {
    case "Wire":
      return event.message._tag === "RegistrationAck"
        ? onRegistrationAck(state, event.from, event.message)
        : onSequenced(state, event.from, event.message, event.now)
    case "Resolved":
      return onResolved(state, event.producer)
    case "Confirm":
      return onConfirm(state, event.id, event.now)
    case "Tick":
      return onTick(state, event.now, event.handlerBusy)
    case "Fail":
      return fail(state, event.stage, event.cause)
  }
}

const fail = (state: ConsumerState, stage: ReliableDeliveryStage, cause: unknown): Step => ({
  state: { ...state, phase: "Stopped" },
  actions: [{ _tag: "Fail", stage, cause }]
})

const violation = (state: ConsumerState, message: string): Step =>
  fail(state, "Protocol", new ProtocolViolation({ message: `consumer ${state.config.endpoint}: ${message}` }))

/** Registers with the resolved producer controller under a fresh nonce. */
const onResolved = (state: ConsumerState, producer: ControllerAddress | undefined): Step => {
  if (producer === undefined) return { state, actions: [] }
  const registrations = state.registrations + 1
  const nonce = `${state.config.incarnation}.${registrations}`
  return {
    state: { ...state, registrations, registration: { producer, nonce } },
    actions: [{ _tag: "Send", to: producer, message: { _tag: "RegisterConsumer", nonce } }]
  }
}

/**
 * The answer to our latest registration. The same session keeps its progress; a new session
 * (a new producer controller) starts from its `nextSeq` with an empty buffer. Either way the
 * consumer asks for a window of demand and for a resend of anything unconfirmed.
 */
const onRegistrationAck = (state: ConsumerState, from: ControllerAddress, ack: RegistrationAck): Step => {
  const registration = state.registration
  if (registration === undefined || registration.nonce !== ack.nonce || !sameAddress(registration.producer, from)) {
    return { state, actions: [{ _tag: "Dropped", reason: "StaleSession" }] }
  }
  const sameSession = state.session !== undefined && state.session.sessionId === ack.sessionId &&
    sameAddress(state.session.producer, from)
  const session: Session = { sessionId: ack.sessionId, producer: from, nonce: ack.nonce }
  const base: ConsumerState = sameSession
    ? { ...state, session, registration: undefined, heard: true }
    : {
      ...state,
      session,
      registration: undefined,
      heard: true,
      confirmedSeq: ack.nextSeq - 1,
      received: SeqLog.empty(),
      parked: [],
      inFlight: undefined
    }
  const upTo = base.confirmedSeq + base.config.window
  return {
    state: { ...base, requestedUpTo: upTo },
    actions: [{ _tag: "Send", to: from, message: request(base, session, upTo, true) }]
  }
}

const request = (state: ConsumerState, session: Session, upTo: number, viaTimeout: boolean): ConsumerToProducer => ({
  _tag: "Request",
  sessionId: session.sessionId,
  nonce: session.nonce,
  confirmedSeq: state.confirmedSeq,
  requestUpToSeq: upTo,
  viaTimeout
})

const ack = (state: ConsumerState, session: Session): ConsumerToProducer => ({
  _tag: "Ack",
  sessionId: session.sessionId,
  nonce: session.nonce,
  confirmedSeq: state.confirmedSeq
})

const onSequenced = (state: ConsumerState, from: ControllerAddress, message: SequencedMessage, now: number): Step => {
  const session = state.session
  if (session === undefined || session.sessionId !== message.sessionId) {
    return { state, actions: [{ _tag: "Dropped", reason: "StaleSession" }] }
  }
  if (!sameAddress(session.producer, from)) return { state, actions: [{ _tag: "Dropped", reason: "UnknownSender" }] }
  const heard: ConsumerState = state.heard ? state : { ...state, heard: true }
  if (message.seq <= heard.confirmedSeq) {
    // A duplicate of something confirmed: our confirmation was lost, so say it again.
    return { state: heard, actions: [{ _tag: "Send", to: from, message: ack(heard, session) }] }
  }
  if (message.seq > heard.requestedUpTo) return { state: heard, actions: [{ _tag: "Dropped", reason: "BeyondDemand" }] }
  const actions: Array<ConsumerAction> = []
  let next = insert(heard, message)
  if (next.parked.length > 0) next = requestGap(next, session, now, actions)
  return deliverNext(next, now, actions)
}

/** Places a message in the contiguous run or among the parked ones; duplicates change nothing. */
const insert = (state: ConsumerState, message: SequencedMessage): ConsumerState => {
  const position = message.seq - state.confirmedSeq - 1
  if (position < state.received.length) return state
  if (position > state.received.length) {
    const parked = state.parked
    let index = parked.length
    while (index > 0 && parked[index - 1].seq > message.seq) index--
    if (index > 0 && parked[index - 1].seq === message.seq) return state
    return { ...state, parked: [...parked.slice(0, index), message, ...parked.slice(index)] }
  }
  let received = state.received.append(message)
  let parked = state.parked
  let nextSeq = message.seq + 1
  let taken = 0
  while (taken < parked.length && parked[taken].seq === nextSeq) {
    received = received.append(parked[taken])
    nextSeq++
    taken++
  }
  if (taken > 0) parked = parked.slice(taken)
  return { ...state, received, parked }
}

/** A gap asks the producer to resend, at most once per resend interval. */
const requestGap = (state: ConsumerState, session: Session, now: number, actions: Array<ConsumerAction>): ConsumerState => {
  if (now - state.lastGapRequestAt < state.config.resendIntervalMs) return state
  actions.push({ _tag: "Send", to: session.producer, message: request(state, session, state.requestedUpTo, true) })
  return { ...state, lastGapRequestAt: now }
}

/**
 * Hands out the next message when nothing is in flight: a whole message at the head, or a chunk
 * run from a first to a last chunk. A run that cannot complete within the window, or that breaks
 * the chunk structure, stops the flow.
 */
const deliverNext = (state: ConsumerState, now: number, actions: Array<ConsumerAction>): Step => {
  if (state.inFlight !== undefined) return { state, actions }
  const head = state.received.first
  if (head === undefined) return { state, actions }
  if (head.chunk === undefined) return handOut(state, head.messageId, head.seq, 1, head.payload, now, actions)
  if (!head.chunk.first) return violation(state, `message ${head.messageId} seq ${head.seq} continues a chunk run that never started`)
  const parts: Array<Uint8Array> = [head.payload]
  let last = head.chunk.last
  let index = 1
  while (!last && index < state.received.length) {
    const part = state.received.at(index)!
    if (part.chunk === undefined || part.chunk.first || part.messageId !== head.messageId) {
      return violation(state, `chunk run of message ${head.messageId} broken at seq ${part.seq} (message ${part.messageId})`)
    }
    parts.push(part.payload)
    last = part.chunk.last
    index++
  }
  if (!last) {
    if (head.seq + index - 1 >= state.confirmedSeq + state.config.window) {
      return violation(
        state,
        `message ${head.messageId} needs more chunks than the window of ${state.config.window} can hold; ` +
          "raise the consumer window or the producer's chunk size"
      )
    }
    return { state, actions }
  }
  return handOut(state, head.messageId, head.seq + index - 1, index, concat(parts), now, actions)
}

const handOut = (
  state: ConsumerState,
  messageId: string,
  seq: number,
  count: number,
  payload: Uint8Array,
  now: number,
  actions: Array<ConsumerAction>
): Step => {
  const deliveries = state.deliveries + 1
  const inFlight: InFlight = { id: deliveries, messageId, seq, count, payload, deliveredAt: now }
  actions.push({ _tag: "Deliver", delivery: inFlight, redelivery: false })
  return { state: { ...state, deliveries, inFlight }, actions }
}

const concat = (parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  let length = 0
  for (const part of parts) length += part.length
  const whole = new Uint8Array(length)
  let offset = 0
  for (const part of parts) {
    whole.set(part, offset)
    offset += part.length
  }
  return whole
}

/**
 * The endpoint confirmed the delivery in flight. Demand is topped up once half the window is
 * used; otherwise an idle consumer acknowledges so the producer can drop what is confirmed.
 */
const onConfirm = (state: ConsumerState, id: number, now: number): Step => {
  const inFlight = state.inFlight
  if (inFlight === undefined || inFlight.id !== id) return { state, actions: [] }
  const next: ConsumerState = {
    ...state,
    inFlight: undefined,
    confirmedSeq: state.confirmedSeq + inFlight.count,
    received: state.received.dropFront(inFlight.count)
  }
  const actions: Array<ConsumerAction> = []
  const session = next.session
  let topped = next
  if (session !== undefined) {
    if (next.requestedUpTo - next.confirmedSeq <= Math.floor(next.config.window / 2)) {
      const upTo = next.confirmedSeq + next.config.window
      actions.push({ _tag: "Send", to: session.producer, message: request(next, session, upTo, false) })
      topped = { ...next, requestedUpTo: upTo }
    } else if (next.received.isEmpty) {
      actions.push({ _tag: "Send", to: session.producer, message: ack(next, session) })
    }
  }
  return deliverNext(topped, now, actions)
}

/**
 * The tick: re-register when there is no session or the producer went silent; re-deliver a
 * delivery unconfirmed for a whole interval (unless the handler is still working on it);
 * re-request an open gap.
 */
const onTick = (state: ConsumerState, now: number, handlerBusy: boolean): Step => {
  const actions: Array<ConsumerAction> = []
  let next: ConsumerState = { ...state, heard: false }
  if (state.session === undefined || !state.heard) actions.push({ _tag: "Resolve" })
  const inFlight = state.inFlight
  if (inFlight !== undefined && !handlerBusy && now - inFlight.deliveredAt >= state.config.resendIntervalMs) {
    const again = { ...inFlight, deliveredAt: now }
    actions.push({ _tag: "Deliver", delivery: again, redelivery: true })
    next = { ...next, inFlight: again }
  }
  if (state.session !== undefined && state.parked.length > 0) next = requestGap(next, state.session, now, actions)
  return { state: next, actions }
}
