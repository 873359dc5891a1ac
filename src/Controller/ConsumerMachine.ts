/**
 * The consumer controller as a pure state machine. It registers with the producer controller,
 * asks for demand one window at a time, buffers what arrives out of order, gathers chunk runs,
 * and hands deliveries to the endpoint in seq order: one at a time for a point-to-point consumer,
 * up to `concurrency` at once for a worker. The endpoint holds each until it confirms it, gives
 * it back (its handler was interrupted: it is handed out again at once), or settles it another
 * way (`Settle`: a failed job goes back to the producer, a message is dead-lettered). A settle
 * reaches the producer before the consumer confirms past it: the producer answers `Settled`.
 * Confirmations are cumulative, so a delivery done early waits for the earlier ones.
 *
 * On each tick of a silent flow it looks its producer up (registering again only when the
 * producer's controller changed) and asks again for what it may have lost; it repeats unanswered
 * settles, re-requests gaps, and, on a worker whose every handler has been busy for a whole
 * interval, hands the messages it has not started back to the producer for other workers.
 *
 * Like the producer machine, `step` copies the state once into a draft that the rules update;
 * its input is never mutated.
 */
import { sameAddress } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import { ProtocolViolation } from "../Protocol/Errors.js"
import type { ReliableDeliveryStage } from "../Protocol/Failure.js"
import type { ConsumerToProducer, ProducerToConsumer, RegistrationAck, SequencedMessage, SettleOutcome } from "../Protocol/WireMessage.js"
import { SeqLog } from "./internal/SeqLog.js"

export interface ConsumerConfig {
  readonly endpoint: string
  readonly incarnation: string
  readonly window: number
  readonly resendIntervalMs: number
  /** Deliveries handed out at once (1 keeps point-to-point order). */
  readonly concurrency?: number
  /**
   * Workers: when every handler has been busy this long, messages not started yet are handed
   * back to the producer (undefined: never, as for point-to-point).
   */
  readonly releaseStuckAfterMs?: number | undefined
}

export interface Session {
  readonly sessionId: string
  readonly producer: ControllerAddress
  readonly nonce: string
}

/**
 * A message handed out (or handed back): its id, the last seq it covers and how many seqs
 * (chunks), which attempt it is, when it was handed out, and where it stands. Its bytes stay in
 * `received` until it is confirmed.
 */
export interface HandOut {
  readonly id: number
  readonly messageId: string
  readonly seq: number
  readonly count: number
  readonly attempt: number
  readonly deliveredAt: number
  /** The sender's W3C trace context (from the message's last part), when it sent one. */
  readonly trace?: string | undefined
  /** Out: the endpoint holds it. Settling: a settle waits for `Settled`. Done: confirmed or settled. */
  readonly status: "Out" | "Settling" | "Done"
  /** The settle sent (while Settling). */
  readonly outcome?: SettleOutcome | undefined
}

/** The hand-out whose handler works on it (the first one Out), as the single-delivery view. */
export const inFlight = (state: ConsumerState): HandOut | undefined => state.handedOut.find((handOut) => handOut.status === "Out")

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
  /** Handed out (or handed back), in seq order from confirmedSeq + 1; confirmed in that order. */
  readonly handedOut: ReadonlyArray<HandOut>
  /** Hand-outs `Out` (handlers at work), kept with `handedOut` so a step need not count them. */
  readonly busy: number
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
  /** `now` times the next hand-out for `releaseStuckAfterMs`, and is read for nothing else. */
  | { readonly _tag: "Confirm"; readonly id: number; readonly now: number }
  /** The endpoint settles a delivery without processing it (a failure the producer retries, a dead letter). */
  | { readonly _tag: "Settle"; readonly id: number; readonly outcome: SettleOutcome; readonly now: number }
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
    readonly delivery: HandOut
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
  handedOut: ReadonlyArray<HandOut>
  busy: number
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
    this.handedOut = from.handedOut
    this.busy = from.busy
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
    handedOut: [],
    busy: 0,
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
      else if (event.message._tag === "Settled") onSettled(s, event.from, event.message.sessionId, event.message.seq, event.now, out)
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
    case "Settle":
      onSettle(s, event.id, event.outcome, event.now, out)
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
    s.handedOut = []
    s.busy = 0
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

/** Received entries the hand-outs cover (from the head of `received`). */
/**
 * Entries of `received` the hand-outs cover: they run in seq order from confirmedSeq + 1, so up
 * to the last one's seq. (Summing them cost a step O(window) whenever a settled job at the head
 * held the window: a worker's whole window of deliveries waits behind a failed job's `Settled`.)
 */
const covered = (s: Draft): number => s.handedOut.length === 0 ? 0 : s.handedOut[s.handedOut.length - 1].seq - s.confirmedSeq

/** Hands out the next messages while handlers are free (one at a time for point-to-point). */
const deliverNext = (s: Draft, now: number, out: Out): void => {
  if (s.draining) return
  const concurrency = s.config.concurrency ?? 1
  let busy = s.busy
  let from = covered(s)
  while (busy < concurrency) {
    const count = nextMessage(s, from, out)
    if (count === undefined) return
    handOut(s, from, count, now, out)
    from += count
    busy++
  }
}

/**
 * The next complete message at `from` in `received`: how many entries it takes (1 unless it is a
 * chunk run from a first to a last chunk), or undefined when none is complete yet. A run that
 * cannot complete within the window, or that breaks the chunk structure, stops the flow. An
 * incomplete run at the head tops demand up to a full window: nothing is confirmed mid-message,
 * so the usual top-up on confirmation never comes and the rest could otherwise wait forever.
 */
const nextMessage = (s: Draft, from: number, out: Out): number | undefined => {
  const head = s.received.at(from)
  if (head === undefined || s.phase !== "Running") return undefined
  if (head.chunk === undefined || head.chunk.last && head.chunk.first) return 1
  if (!head.chunk.first) return void violation(s, `message ${head.messageId} seq ${head.seq} continues a chunk run that never started`, out)
  // Chunks already checked by an earlier call are not walked again: a run of n chunks costs O(n).
  let index = Math.max(1, from === 0 ? s.runChecked : 1)
  while (from + index < s.received.length) {
    const part = s.received.at(from + index)!
    if (part.chunk === undefined || part.chunk.first || part.messageId !== head.messageId) {
      return void violation(s, `chunk run of message ${head.messageId} broken at seq ${part.seq} (message ${part.messageId})`, out)
    }
    index++
    if (part.chunk.last) return index
  }
  if (from === 0) s.runChecked = index
  const windowEnd = s.confirmedSeq + s.config.window
  if (head.seq + index - 1 >= windowEnd) {
    return void violation(
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
  return undefined
}

const handOut = (s: Draft, from: number, count: number, now: number, out: Out): void => {
  s.deliveries++
  if (from === 0) s.runChecked = 0
  const last = s.received.at(from + count - 1)!
  const first = s.received.at(from)!
  const handed: HandOut = {
    id: s.deliveries,
    messageId: last.messageId,
    seq: last.seq,
    count,
    attempt: first.attempt ?? 1,
    deliveredAt: now,
    trace: last.trace,
    status: "Out"
  }
  s.handedOut = s.handedOut.length === 0 ? [handed] : [...s.handedOut, handed]
  s.busy++
  out.push(deliver(s, handed, from, false))
}

/** A hand-out of `handed`, whose entries start at `from` in `received`: a chunked message's chunks are handed over for every hand-out. */
const deliver = (s: Draft, handed: HandOut, from: number, redelivery: boolean): ConsumerAction =>
  handed.count === 1
    ? { _tag: "Deliver", delivery: handed, payload: s.received.at(from)!.payload, redelivery }
    : { _tag: "Deliver", delivery: handed, payload: chunksOf(s.received, from, handed.count), redelivery }

const chunksOf = (received: SeqLog<SequencedMessage>, from: number, count: number): ReadonlyArray<Uint8Array> => {
  const chunks = new Array<Uint8Array>(count)
  for (let index = 0; index < count; index++) chunks[index] = received.at(from + index)!.payload
  return chunks
}

/** The hand-out with `id`, its position and where its entries start in `received`. */
const find = (s: Draft, matches: (handed: HandOut) => boolean): { readonly index: number; readonly from: number } | undefined => {
  let from = 0
  for (let index = 0; index < s.handedOut.length; index++) {
    const handed = s.handedOut[index]
    if (matches(handed)) return { index, from }
    from += handed.count
  }
  return undefined
}

/** Where the hand-out `id` is, still `Out`, searched from the newest; -1 when it is not. */
const lastIndexOf = (s: Draft, id: number): number => {
  for (let index = s.handedOut.length - 1; index >= 0; index--) {
    const handed = s.handedOut[index]
    if (handed.id === id) return handed.status === "Out" ? index : -1
  }
  return -1
}

const replace = (s: Draft, index: number, handed: HandOut): void => {
  const next = s.handedOut.slice()
  next[index] = handed
  s.handedOut = next
}

/** The endpoint confirmed a delivery: it is done, and confirmed as soon as the earlier ones are. */
const onConfirm = (s: Draft, id: number, now: number, out: Out): void => {
  const head = s.handedOut[0]
  // The usual case (always, for point-to-point): the oldest hand-out is confirmed; it need not be marked done first.
  if (head !== undefined && head.id === id && head.status === "Out") {
    s.busy--
    return advance(s, now, out, 1)
  }
  // Newest first: behind a settled head, the confirmed hand-out is one of the last.
  const index = lastIndexOf(s, id)
  if (index < 0) return
  s.busy--
  replace(s, index, { ...s.handedOut[index], status: "Done" })
  advance(s, now, out)
}

/** No hand-outs: shared, as the state's arrays are never changed in place (the usual point-to-point state between messages). */
const noHandOuts: ReadonlyArray<HandOut> = []

/**
 * Confirms the done prefix of the hand-outs. Demand is topped up to a whole window once half the
 * window is used, and whenever the consumer has nothing left to work on (the Request confirms
 * too, so the producer can drop what is done). Only acknowledging an idle consumer's work would
 * leave it advertising part of its window until it next used half of it: a producer sizes its
 * grants, and a durable one its stores, by that demand, so a flow once off its rhythm (a failed
 * job retried on another worker, say) would go on with smaller stores. Then it hands out what
 * it can. `confirmedHead` is 1 when the oldest hand-out was just confirmed without being marked
 * done.
 */
const advance = (s: Draft, now: number, out: Out, confirmedHead = 0): void => {
  let done = confirmedHead
  let seqs = confirmedHead === 1 ? s.handedOut[0].count : 0
  while (done < s.handedOut.length && s.handedOut[done].status === "Done") seqs += s.handedOut[done++].count
  if (done > 0) {
    s.handedOut = done === s.handedOut.length ? noHandOuts : s.handedOut.slice(done)
    s.confirmedSeq += seqs
    s.received = s.received.dropFront(seqs)
    const session = s.session
    if (session !== undefined) {
      if (s.received.isEmpty || s.requestedUpTo - s.confirmedSeq <= Math.floor(s.config.window / 2)) {
        s.requestedUpTo = s.confirmedSeq + s.config.window
        out.push({ _tag: "Send", to: session.producer, message: request(s, session, s.requestedUpTo, false) })
      }
    }
  }
  deliverNext(s, now, out)
}

/** The endpoint gave a delivery back: it is handed out again at once (a redelivery). */
const onRelease = (s: Draft, id: number, now: number, out: Out): void => {
  const found = find(s, (handed) => handed.id === id && handed.status === "Out")
  if (found === undefined || s.draining) return
  const handed = { ...s.handedOut[found.index], deliveredAt: now }
  replace(s, found.index, handed)
  out.push(deliver(s, handed, found.from, true))
}

/** The endpoint settles a delivery another way: the producer is told, and answers `Settled`. */
const onSettle = (s: Draft, id: number, outcome: SettleOutcome, now: number, out: Out): void => {
  const found = find(s, (handed) => handed.id === id && handed.status === "Out")
  if (found === undefined) return
  const handed: HandOut = { ...s.handedOut[found.index], status: "Settling", outcome }
  s.busy--
  replace(s, found.index, handed)
  sendSettle(s, handed, out)
  deliverNext(s, now, out)
}

const sendSettle = (s: Draft, handed: HandOut, out: Out): void => {
  const session = s.session
  if (session === undefined || handed.outcome === undefined) return
  out.push({
    _tag: "Send",
    to: session.producer,
    message: { _tag: "Settle", sessionId: session.sessionId, nonce: session.nonce, seq: handed.seq, outcome: handed.outcome }
  })
}

/** The producer took care of a settle: the message is done. */
const onSettled = (s: Draft, from: ControllerAddress, sessionId: string, seq: number, now: number, out: Out): void => {
  const session = s.session
  if (session === undefined || session.sessionId !== sessionId || !sameAddress(session.producer, from)) {
    return void out.push({ _tag: "Dropped", reason: "StaleSession" })
  }
  s.heard = true
  const found = find(s, (handed) => handed.seq === seq && handed.status === "Settling")
  if (found === undefined) return
  replace(s, found.index, { ...s.handedOut[found.index], status: "Done", outcome: undefined })
  advance(s, now, out)
}

/**
 * A worker whose every handler has been busy for a whole `releaseStuckAfterMs` hands the complete
 * messages it has not started back to the producer, which gives them to other workers.
 */
const releaseStuck = (s: Draft, now: number, out: Out): void => {
  const after = s.config.releaseStuckAfterMs
  if (after === undefined || s.draining) return
  const busy = s.handedOut.filter((handed) => handed.status === "Out")
  if (busy.length < (s.config.concurrency ?? 1) || busy.some((handed) => now - handed.deliveredAt < after)) return
  let from = covered(s)
  for (let count = nextMessage(s, from, out); count !== undefined; count = nextMessage(s, from, out)) {
    s.deliveries++
    const last = s.received.at(from + count - 1)!
    const handed: HandOut = {
      id: s.deliveries,
      messageId: last.messageId,
      seq: last.seq,
      count,
      attempt: s.received.at(from)!.attempt ?? 1,
      deliveredAt: now,
      status: "Settling",
      outcome: { _tag: "Released" }
    }
    s.handedOut = [...s.handedOut, handed]
    sendSettle(s, handed, out)
    from += count
  }
}

/**
 * The tick: with no session, look the producer up to register. When the producer was silent
 * since the previous tick, look it up again (a new controller means registering anew) and, unless
 * this consumer still has messages to work through, ask again for everything it requested: what
 * was lost in flight is resent. Confirmations the producer was not told of yet are reported, and
 * settles it has not answered are sent again. A delivery the endpoint holds is never handed out
 * again here, however long its handler takes. An open gap is re-requested; a stuck worker hands
 * back what it has not started.
 */
const onTick = (s: Draft, now: number, out: Out): void => {
  const session = s.session
  if (session === undefined || !s.heard) out.push({ _tag: "Resolve" })
  const working = s.handedOut.length > 0 && s.received.length > covered(s)
  if (session !== undefined && !s.heard && s.parked.length === 0 && !working) {
    out.push({ _tag: "Send", to: session.producer, message: request(s, session, s.requestedUpTo, true) })
  } else if (session !== undefined && s.confirmedSeq > s.reportedSeq) {
    // Confirmations made while working through a backlog are not sent one by one: the tick
    // reports them, so the producer learns of them (and drops what is done) within an interval.
    out.push({ _tag: "Send", to: session.producer, message: ack(s, session) })
  }
  s.heard = false
  for (const handed of s.handedOut) if (handed.status === "Settling") sendSettle(s, handed, out)
  if (session !== undefined && s.parked.length > 0) requestGap(s, session, now, out)
  releaseStuck(s, now, out)
}
