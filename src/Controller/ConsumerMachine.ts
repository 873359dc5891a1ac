/**
 * The consumer controller as a pure state machine. It registers with the producer controller,
 * asks for demand one window at a time, buffers what arrives out of order, gathers chunk runs,
 * and hands exactly one unconfirmed delivery at a time to the endpoint, which holds it until it
 * confirms it or gives it back (its handler was interrupted: the delivery is handed out again at
 * once). On each tick of a silent flow it looks its producer up (registering again only when the
 * producer's controller changed) and asks again for what it may have lost; it re-requests gaps.
 *
 * Like the producer machine, `step` copies the state once into a draft that the rules update;
 * its input is never mutated.
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

/**
 * The delivery the endpoint holds: its id, how many seqs (chunks) it covers, when it was handed
 * out. Its bytes stay in `received` until it is confirmed.
 */
export interface InFlight {
  readonly id: number
  readonly messageId: string
  readonly seq: number
  readonly count: number
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
  /** Entries at the head of `received` already checked as an incomplete chunk run. */
  readonly runChecked: number
  readonly deliveries: number
  /** Valid producer traffic arrived since the last tick. */
  readonly heard: boolean
  readonly lastGapRequestAt: number
  /** Shutting down: the delivery in flight may finish, nothing more is handed out. */
  readonly draining: boolean
  /** The confirmed seq the producer was last told (in a Request or an Ack). */
  readonly reportedSeq: number
}

export type ConsumerEvent =
  | { readonly _tag: "Wire"; readonly from: ControllerAddress; readonly message: ProducerToConsumer; readonly now: number }
  | { readonly _tag: "Resolved"; readonly producer: ControllerAddress | undefined; readonly now: number }
  | { readonly _tag: "Confirm"; readonly id: number; readonly now: number }
  /** The endpoint gives a delivery back unconfirmed (its handler was interrupted). */
  | { readonly _tag: "Release"; readonly id: number; readonly now: number }
  /** Graceful shutdown: hand nothing more out. */
  | { readonly _tag: "Drain" }
  | { readonly _tag: "Tick"; readonly now: number }
  | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }

export type ConsumerAction =
  | { readonly _tag: "Send"; readonly to: ControllerAddress; readonly message: ConsumerToProducer }
  | { readonly _tag: "Resolve" }
  /**
   * `payload` is a whole message's received wire payload, or a chunked message's received
   * chunks in order, which the shell joins (see `Reassembly`).
   */
  | {
    readonly _tag: "Deliver"
    readonly delivery: InFlight
    readonly payload: Uint8Array | ReadonlyArray<Uint8Array>
    readonly redelivery: boolean
  }
  | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }
  | { readonly _tag: "Dropped"; readonly reason: "StaleSession" | "UnknownSender" | "BeyondDemand" | "NotRunning" }

export interface Step {
  readonly state: ConsumerState
  readonly actions: ReadonlyArray<ConsumerAction>
}

type Draft = { -readonly [K in keyof ConsumerState]: ConsumerState[K] }
type Out = Array<ConsumerAction>

class StateDraft implements Draft {
  config: ConsumerConfig
  phase: ConsumerState["phase"]
  registration: ConsumerState["registration"]
  registrations: number
  session: Session | undefined
  confirmedSeq: number
  requestedUpTo: number
  received: SeqLog<SequencedMessage>
  parked: ReadonlyArray<SequencedMessage>
  inFlight: InFlight | undefined
  runChecked: number
  deliveries: number
  heard: boolean
  lastGapRequestAt: number
  draining: boolean
  reportedSeq: number
  constructor(from: ConsumerState) {
    this.config = from.config
    this.phase = from.phase
    this.registration = from.registration
    this.registrations = from.registrations
    this.session = from.session
    this.confirmedSeq = from.confirmedSeq
    this.requestedUpTo = from.requestedUpTo
    this.received = from.received
    this.parked = from.parked
    this.inFlight = from.inFlight
    this.runChecked = from.runChecked
    this.deliveries = from.deliveries
    this.heard = from.heard
    this.lastGapRequestAt = from.lastGapRequestAt
    this.draining = from.draining
    this.reportedSeq = from.reportedSeq
  }
}

/** A fresh controller looks its producer up at once. */
export const initial = (config: ConsumerConfig): Step => ({
  state: new StateDraft({
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
    runChecked: 0,
    deliveries: 0,
    heard: false,
    lastGapRequestAt: Number.NEGATIVE_INFINITY,
    draining: false,
    reportedSeq: 0
  }),
  actions: [{ _tag: "Resolve" }]
})

export const step = (state: ConsumerState, event: ConsumerEvent): Step => {
  if (state.phase === "Stopped") return { state, actions: [{ _tag: "Dropped", reason: "NotRunning" }] }
  const s = new StateDraft(state)
  const out: Out = []
  switch (event._tag) {
    case "Wire":
      if (event.message._tag === "RegistrationAck") onRegistrationAck(s, event.from, event.message, out)
      else onSequenced(s, event.from, event.message, event.now, out)
      break
    case "Resolved":
      onResolved(s, event.producer, out)
      break
    case "Confirm":
      onConfirm(s, event.id, event.now, out)
      break
    case "Release":
      onRelease(s, event.id, event.now, out)
      break
    case "Drain":
      s.draining = true
      break
    case "Tick":
      onTick(s, event.now, out)
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

const violation = (s: Draft, message: string, out: Out): void =>
  fail(s, "Protocol", new ProtocolViolation({ message: `consumer ${s.config.endpoint}: ${message}` }), out)

/**
 * Registers with the resolved producer controller under a fresh nonce, unless that controller
 * is the one this consumer's session is with already (a quiet producer that still lives).
 */
const onResolved = (s: Draft, producer: ControllerAddress | undefined, out: Out): void => {
  if (producer === undefined) return
  if (s.session !== undefined && sameAddress(s.session.producer, producer)) return
  s.registrations++
  const nonce = `${s.config.incarnation}.${s.registrations}`
  s.registration = { producer, nonce }
  out.push({ _tag: "Send", to: producer, message: { _tag: "RegisterConsumer", nonce } })
}

/**
 * The answer to our latest registration. The same session keeps its progress; a new session
 * (a new producer controller) starts from its `nextSeq` with an empty buffer. Either way the
 * consumer asks for a window of demand and for a resend of anything unconfirmed.
 */
const onRegistrationAck = (s: Draft, from: ControllerAddress, ack: RegistrationAck, out: Out): void => {
  const registration = s.registration
  if (registration === undefined || registration.nonce !== ack.nonce || !sameAddress(registration.producer, from)) {
    return void out.push({ _tag: "Dropped", reason: "StaleSession" })
  }
  const sameSession = s.session !== undefined && s.session.sessionId === ack.sessionId && sameAddress(s.session.producer, from)
  if (!sameSession) {
    s.confirmedSeq = ack.nextSeq - 1
    s.received = SeqLog.empty()
    s.parked = []
    s.inFlight = undefined
    s.runChecked = 0
  }
  const session: Session = { sessionId: ack.sessionId, producer: from, nonce: ack.nonce }
  s.session = session
  s.registration = undefined
  s.heard = true
  s.requestedUpTo = s.confirmedSeq + s.config.window
  out.push({ _tag: "Send", to: from, message: request(s, session, s.requestedUpTo, true) })
}

/** A Request to send now (it tells the producer the confirmed seq). */
const request = (s: Draft, session: Session, upTo: number, viaTimeout: boolean): ConsumerToProducer => {
  s.reportedSeq = s.confirmedSeq
  return {
    _tag: "Request",
    sessionId: session.sessionId,
    nonce: session.nonce,
    confirmedSeq: s.confirmedSeq,
    requestUpToSeq: upTo,
    viaTimeout
  }
}

/** An Ack to send now. */
const ack = (s: Draft, session: Session): ConsumerToProducer => {
  s.reportedSeq = s.confirmedSeq
  return {
    _tag: "Ack",
    sessionId: session.sessionId,
    nonce: session.nonce,
    confirmedSeq: s.confirmedSeq
  }
}

const onSequenced = (s: Draft, from: ControllerAddress, message: SequencedMessage, now: number, out: Out): void => {
  const session = s.session
  if (session === undefined || session.sessionId !== message.sessionId) {
    return void out.push({ _tag: "Dropped", reason: "StaleSession" })
  }
  if (!sameAddress(session.producer, from)) return void out.push({ _tag: "Dropped", reason: "UnknownSender" })
  s.heard = true
  // A duplicate of something confirmed: our confirmation was lost, so say it again.
  if (message.seq <= s.confirmedSeq) return void out.push({ _tag: "Send", to: from, message: ack(s, session) })
  if (message.seq > s.requestedUpTo) return void out.push({ _tag: "Dropped", reason: "BeyondDemand" })
  insert(s, message)
  if (s.parked.length > 0) requestGap(s, session, now, out)
  deliverNext(s, now, out)
}

/** Places a message in the contiguous run or among the parked ones; duplicates change nothing. */
const insert = (s: Draft, message: SequencedMessage): void => {
  const position = message.seq - s.confirmedSeq - 1
  if (position < s.received.length) return
  if (position > s.received.length) {
    const parked = s.parked
    let index = parked.length
    while (index > 0 && parked[index - 1].seq > message.seq) index--
    if (index > 0 && parked[index - 1].seq === message.seq) return
    s.parked = [...parked.slice(0, index), message, ...parked.slice(index)]
    return
  }
  let received = s.received.append(message)
  let nextSeq = message.seq + 1
  let taken = 0
  while (taken < s.parked.length && s.parked[taken].seq === nextSeq) {
    received = received.append(s.parked[taken])
    nextSeq++
    taken++
  }
  if (taken > 0) s.parked = s.parked.slice(taken)
  s.received = received
}

/** A gap asks the producer to resend, at most once per resend interval. */
const requestGap = (s: Draft, session: Session, now: number, out: Out): void => {
  if (now - s.lastGapRequestAt < s.config.resendIntervalMs) return
  out.push({ _tag: "Send", to: session.producer, message: request(s, session, s.requestedUpTo, true) })
  s.lastGapRequestAt = now
}

/**
 * Hands out the next message when nothing is in flight: a whole message at the head, or a chunk
 * run from a first to a last chunk. A run that cannot complete within the window, or that breaks
 * the chunk structure, stops the flow. An incomplete run at the head tops demand up to a full
 * window: nothing is confirmed mid-message, so the usual top-up on confirmation never comes and
 * the rest of the message could otherwise wait forever.
 */
const deliverNext = (s: Draft, now: number, out: Out): void => {
  if (s.inFlight !== undefined || s.draining) return
  const head = s.received.first
  if (head === undefined) return
  if (head.chunk === undefined) return handOut(s, head.messageId, head.seq, 1, now, out)
  if (!head.chunk.first) return violation(s, `message ${head.messageId} seq ${head.seq} continues a chunk run that never started`, out)
  if (head.chunk.last) return handOut(s, head.messageId, head.seq, 1, now, out)
  // Chunks already checked by an earlier call are not walked again: a run of n chunks costs O(n).
  let index = Math.max(1, s.runChecked)
  let last = false
  while (index < s.received.length) {
    const part = s.received.at(index)!
    if (part.chunk === undefined || part.chunk.first || part.messageId !== head.messageId) {
      return violation(s, `chunk run of message ${head.messageId} broken at seq ${part.seq} (message ${part.messageId})`, out)
    }
    index++
    if (part.chunk.last) {
      last = true
      break
    }
  }
  if (last) return handOut(s, head.messageId, head.seq + index - 1, index, now, out)
  s.runChecked = index
  const windowEnd = s.confirmedSeq + s.config.window
  if (head.seq + index - 1 >= windowEnd) {
    return violation(
      s,
      `message ${head.messageId} needs more chunks than the window of ${s.config.window} can hold; ` +
        "raise the consumer window or the producer's chunk size",
      out
    )
  }
  const session = s.session
  if (session !== undefined && s.requestedUpTo < windowEnd) {
    s.requestedUpTo = windowEnd
    out.push({ _tag: "Send", to: session.producer, message: request(s, session, windowEnd, false) })
  }
}

const handOut = (s: Draft, messageId: string, seq: number, count: number, now: number, out: Out): void => {
  s.deliveries++
  s.runChecked = 0
  const inFlight: InFlight = { id: s.deliveries, messageId, seq, count, deliveredAt: now }
  s.inFlight = inFlight
  out.push(deliver(s, inFlight, false))
}

/** A hand-out of the delivery in flight: a chunked message's chunks are joined for every hand-out. */
const deliver = (s: Draft, inFlight: InFlight, redelivery: boolean): ConsumerAction =>
  inFlight.count === 1
    ? { _tag: "Deliver", delivery: inFlight, payload: s.received.first!.payload, redelivery }
    : { _tag: "Deliver", delivery: inFlight, payload: chunksOf(s.received, inFlight.count), redelivery }

const chunksOf = (received: SeqLog<SequencedMessage>, count: number): ReadonlyArray<Uint8Array> => {
  const chunks = new Array<Uint8Array>(count)
  for (let index = 0; index < count; index++) chunks[index] = received.at(index)!.payload
  return chunks
}

/**
 * The endpoint confirmed the delivery in flight. Demand is topped up once half the window is
 * used; otherwise an idle consumer acknowledges so the producer can drop what is confirmed.
 */
const onConfirm = (s: Draft, id: number, now: number, out: Out): void => {
  const inFlight = s.inFlight
  if (inFlight === undefined || inFlight.id !== id) return
  s.inFlight = undefined
  s.confirmedSeq += inFlight.count
  s.received = s.received.dropFront(inFlight.count)
  const session = s.session
  if (session !== undefined) {
    if (s.requestedUpTo - s.confirmedSeq <= Math.floor(s.config.window / 2)) {
      s.requestedUpTo = s.confirmedSeq + s.config.window
      out.push({ _tag: "Send", to: session.producer, message: request(s, session, s.requestedUpTo, false) })
    } else if (s.received.isEmpty) {
      out.push({ _tag: "Send", to: session.producer, message: ack(s, session) })
    }
  }
  deliverNext(s, now, out)
}

/** The endpoint gave the delivery in flight back: it is handed out again at once (a redelivery). */
const onRelease = (s: Draft, id: number, now: number, out: Out): void => {
  const inFlight = s.inFlight
  if (inFlight === undefined || inFlight.id !== id || s.draining) return
  s.inFlight = { ...inFlight, deliveredAt: now }
  out.push(deliver(s, s.inFlight, true))
}

/**
 * The tick: with no session, look the producer up to register. When the producer was silent
 * since the previous tick, look it up again (a new controller means registering anew) and, unless
 * this consumer holds a delivery with more complete messages behind it to work through, ask again
 * for everything it requested: what was lost in flight is resent. Confirmations the producer was
 * not told of yet are reported. A delivery the endpoint holds is never handed out again here,
 * however long its handler takes. An open gap is re-requested.
 */
const onTick = (s: Draft, now: number, out: Out): void => {
  const session = s.session
  if (session === undefined || !s.heard) out.push({ _tag: "Resolve" })
  if (session !== undefined && !s.heard && s.parked.length === 0 && (s.inFlight === undefined || s.received.length <= s.inFlight.count)) {
    out.push({ _tag: "Send", to: session.producer, message: request(s, session, s.requestedUpTo, true) })
  } else if (session !== undefined && s.confirmedSeq > s.reportedSeq) {
    // Confirmations made while working through a backlog are not sent one by one: the tick
    // reports them, so the producer learns of them (and drops what is done) within an interval.
    out.push({ _tag: "Send", to: session.producer, message: ack(s, session) })
  }
  s.heard = false
  if (session !== undefined && s.parked.length > 0) requestGap(s, session, now, out)
}
