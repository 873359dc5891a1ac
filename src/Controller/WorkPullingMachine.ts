/**
 * The work-pulling controller as a pure state machine: the unchanged producer contract on one
 * side (`ProducerHandshake`), and on the other one *binding* per worker endpoint, each a
 * point-to-point sub-flow with its own session, sequence space, demand and unconfirmed list.
 *
 * Accepted jobs enter a pending pool; the pool head goes to the next binding with free demand in
 * strict round-robin; a grant opens when the handshake is idle and the bindings' total free
 * demand exceeds the pool, and may carry the workers' whole requested windows beyond the pool
 * (`grantCapacity`): what no worker can take yet waits in the pool. A binding that ends (its worker's endpoint is gone, a new incarnation
 * replaced it, or it broke the protocol) puts its unconfirmed jobs back at the head of the pool
 * with their original id, payload and store seq, for survivors to take under fresh seqs. A
 * worker's violation ends only its binding; nothing a worker does stops the controller.
 *
 * Registration is fenced: an unbound sender is bound only after the shell verified (`Verify`)
 * that the resolver names it as the live controller of a worker endpoint configured for this
 * producer. Bound workers are re-verified on the timer (`Audit`): that is how the controller
 * learns a worker's endpoint is gone (its scope closed, its node lost), since a dead worker
 * says nothing.
 *
 * As in the point-to-point machine, `step` copies the state once into a draft that the rules
 * update, and copies a binding only the first time a step changes it; its input is never mutated.
 */
import { sameAddress } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import { DeliveryConfirmed } from "../Protocol/Contract.js"
import type { RequestNext } from "../Protocol/Contract.js"
import { ProtocolViolation } from "../Protocol/Errors.js"
import type { ReliableDeliveryStage } from "../Protocol/Failure.js"
import type { Ack, ConsumerToProducer, ProducerToConsumer, Request, SequencedMessage, Settle } from "../Protocol/WireMessage.js"
import type { WorkQueueState, WorkStoreResult } from "../DurableQueue/DurableWorkQueue.js"
import { confirmationViolation, demandViolation } from "./internal/DemandRules.js"
import * as Handshake from "./internal/ProducerHandshake.js"
import type { HandshakeAction, ProduceItem } from "./internal/ProducerHandshake.js"
import { SeqLog } from "./internal/SeqLog.js"

export interface WorkConfig {
  readonly endpoint: string
  readonly incarnation: string
  /** This controller's session; each binding's session is derived from it. */
  readonly sessionId: string
  readonly deliveryConfirmation: boolean
  readonly retryIntervalMs: number
  /** How often bound workers are re-verified through the resolver. */
  readonly auditIntervalMs: number
  readonly durable: boolean
}

/** One accepted job: its producer-visible store seq, its id and its encoded payload. */
export interface Job {
  readonly storeSeq: number
  readonly messageId: string
  readonly payload: Uint8Array
  /** Which attempt its next dispatch is (absent: the first). */
  readonly attempt?: number | undefined
  /** When it was sent or enqueued (clock millis): the pending lag counts from here. */
  readonly at: number
  /** The sender's W3C trace context, carried with every dispatch. */
  readonly trace?: string | undefined
}

/**
 * A failed job waiting for its retry time before it goes back to the pool, and (durable) for its
 * failed attempt to be written: a retry never runs before its attempt count is durable, so a
 * producer restart cannot forget an attempt that was made.
 */
export interface DelayedJob {
  readonly job: Job
  readonly dueAt: number
  /** The failed attempt is in the durable queue (always true when volatile). */
  readonly recorded: boolean
}

/** A job sent to a worker under one of its binding's seqs. */
export interface Dispatched {
  readonly job: Job
  readonly message: SequencedMessage
}

export interface WorkerBinding {
  readonly address: ControllerAddress
  /** The sub-flow's session: fresh per binding, so a rebound worker starts a new sequence space. */
  readonly sessionId: string
  readonly nonce: string
  /** Highest seq the worker asked for. */
  readonly demandUpTo: number
  /** Highest seq the worker confirmed. */
  readonly confirmedSeq: number
  /** Sent, unconfirmed jobs: seqs confirmedSeq+1 .. confirmedSeq+length. */
  readonly unconfirmed: SeqLog<Dispatched>
  /** Jobs sent to this binding so far. */
  readonly dispatched: number
  /**
   * Jobs the worker settled without confirming them (failed, handed back, dead-lettered), by seq:
   * `Recording` while a dead letter is being written, then `Done` until the worker confirms past
   * them. They are not reported as confirmed, nor requeued when the binding ends.
   */
  readonly settled: ReadonlyMap<number, "Recording" | "Done">
}

export interface WorkState {
  readonly config: WorkConfig
  readonly phase: "Loading" | "Running" | "Stopped"
  readonly handshake: Handshake.Handshake<Job>
  readonly grantCount: number
  readonly lastCompletedToken: string | undefined
  /** Highest store seq assigned (volatile counter, or the durable queue's cursor). */
  readonly lastStoreSeq: number
  /** Accepted jobs no worker holds, head first. */
  readonly pool: SeqLog<Job>
  /** Bound workers in round-robin order (registration order). */
  readonly bindings: ReadonlyArray<WorkerBinding>
  /** The binding the next dispatch tries first. */
  readonly cursor: number
  /** Bindings ever made by this controller (numbers the binding sessions). */
  readonly bindingCount: number
  /** When the bound workers are next re-verified; undefined while there are none. */
  readonly nextAuditAt: number | undefined
  /** The latest registration of each worker endpoint that arrived while loading; verified once loaded. */
  readonly registrationsWhileLoading: ReadonlyArray<PendingRegistration>
  /** Failed jobs waiting for their retry time, by due time. */
  readonly delayed: ReadonlyArray<DelayedJob>
}

export interface PendingRegistration {
  readonly address: ControllerAddress
  readonly nonce: string
}

/** How many registrations a loading controller remembers (a bound on what spoofed ones can cost). */
export const MaxRegistrationsWhileLoading = 1024

export type WorkEvent =
  | { readonly _tag: "Wire"; readonly from: ControllerAddress; readonly message: ConsumerToProducer; readonly now: number }
  | { readonly _tag: "Verified"; readonly address: ControllerAddress; readonly nonce: string; readonly ok: boolean; readonly now: number }
  /** The resolver's answer about a bound worker: still its endpoint's live controller, or not. */
  | { readonly _tag: "Audited"; readonly address: ControllerAddress; readonly live: boolean; readonly now: number }
  | Handshake.HandshakeEvent
  | { readonly _tag: "Tick"; readonly now: number }
  /** The time a `WakeAt` asked for has come: retries due go back to the pool. */
  | { readonly _tag: "RetryDue"; readonly now: number }
  | { readonly _tag: "Loaded"; readonly state: WorkQueueState; readonly now: number }
  | {
    readonly _tag: "StoreCompleted"
    readonly token: string
    readonly results: ReadonlyArray<WorkStoreResult>
    /** An earlier attempt of this store failed and may have committed (see `ProducerHandshake.acceptedBefore`). */
    readonly retried?: boolean
    readonly now: number
  }
  | { readonly _tag: "AcceptCompleted"; readonly token: string; readonly now: number }
  /** The durable queue recorded these failed attempts (`attempts`: failed attempts so far). */
  | {
    readonly _tag: "FailuresRecorded"
    readonly failures: ReadonlyArray<{ readonly messageId: string; readonly attempts: number }>
    readonly now: number
  }
  /** The durable queue recorded the dead letter of the job `seq` of `worker`'s binding `sessionId`. */
  | {
    readonly _tag: "DeadLetterRecorded"
    readonly worker: ControllerAddress
    readonly sessionId: string
    readonly seq: number
    readonly now: number
  }
  | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }

/** Why a binding ended. */
export type EndReason = "Gone" | "Replaced" | "Violation"

export type WorkAction =
  | { readonly _tag: "Send"; readonly to: ControllerAddress; readonly message: ProducerToConsumer }
  | { readonly _tag: "Resend"; readonly to: ControllerAddress; readonly message: ProducerToConsumer }
  | HandshakeAction
  | { readonly _tag: "Verify"; readonly address: ControllerAddress; readonly nonce: string }
  /**
   * The first retry whose attempt is recorded falls due at `at`: fold `RetryDue` then. The
   * controller's timer sleeps until the deadline it saw when it went to sleep (an interval away
   * while workers are bound), so a retry due sooner would wait for its next tick.
   */
  | { readonly _tag: "WakeAt"; readonly at: number }
  | { readonly _tag: "Audit"; readonly workers: ReadonlyArray<ControllerAddress> }
  | { readonly _tag: "Notify"; readonly confirmed: ReadonlyArray<DeliveryConfirmed> }
  /** Jobs confirmed, for counting, when nobody asked for notifications. */
  | { readonly _tag: "Confirmed"; readonly count: number }
  | { readonly _tag: "Load" }
  /** `accept`: accept them in the same durable step (the producer acknowledged with the produce). */
  | { readonly _tag: "Store"; readonly token: string; readonly items: ReadonlyArray<ProduceItem>; readonly accept: boolean }
  | { readonly _tag: "ConfirmJobs"; readonly messageIds: ReadonlyArray<string> }
  /** A job failed: its attempt count and retry time (durable only). */
  | { readonly _tag: "RecordFailure"; readonly messageId: string; readonly attempts: number; readonly lastError: string; readonly notBefore: number }
  /** A job is dead-lettered (durable only); `DeadLetterRecorded` follows. */
  | {
    readonly _tag: "DeadLetter"
    readonly worker: ControllerAddress
    readonly sessionId: string
    readonly seq: number
    readonly messageId: string
    readonly attempts: number
    readonly lastError: string
    readonly at: number
  }
  | {
    readonly _tag: "BindingEnded"
    readonly worker: ControllerAddress
    readonly reason: EndReason
    readonly requeued: number
    readonly cause: ProtocolViolation | undefined
  }
  | { readonly _tag: "Fail"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }
  | { readonly _tag: "Dropped"; readonly reason: DropReason }

/**
 * Why an input was ignored; the shell counts these. `UnverifiedSender` is a registration the
 * resolver did not vouch for (spoofed, stale incarnation, not a worker of this producer).
 */
export type DropReason = "StaleSession" | "UnboundSender" | "UnverifiedSender" | "NotRunning"

export interface Step {
  readonly state: WorkState
  readonly actions: ReadonlyArray<WorkAction>
}

type Out = Array<WorkAction>
type Mutable<T> = { -readonly [K in keyof T]: T[K] }

class BindingDraft implements Mutable<WorkerBinding> {
  address: ControllerAddress
  sessionId: string
  nonce: string
  demandUpTo: number
  confirmedSeq: number
  unconfirmed: SeqLog<Dispatched>
  dispatched: number
  settled: ReadonlyMap<number, "Recording" | "Done">
  constructor(from: WorkerBinding) {
    this.address = from.address
    this.sessionId = from.sessionId
    this.nonce = from.nonce
    this.demandUpTo = from.demandUpTo
    this.confirmedSeq = from.confirmedSeq
    this.unconfirmed = from.unconfirmed
    this.dispatched = from.dispatched
    this.settled = from.settled
  }
}

/** One fixed-shape copy per step; bindings are copied only when a step changes them. */
class StateDraft implements Mutable<WorkState> {
  config: WorkConfig
  phase: WorkState["phase"]
  handshake: Handshake.Handshake<Job>
  grantCount: number
  lastCompletedToken: string | undefined
  lastStoreSeq: number
  pool: SeqLog<Job>
  bindings: ReadonlyArray<WorkerBinding>
  cursor: number
  bindingCount: number
  nextAuditAt: number | undefined
  registrationsWhileLoading: ReadonlyArray<PendingRegistration>
  delayed: ReadonlyArray<DelayedJob>
  /** Bindings this step copied (so it may change them in place); cleared before the step returns. */
  owned: Array<BindingDraft> | undefined
  constructor(from: WorkState) {
    this.config = from.config
    this.phase = from.phase
    this.handshake = from.handshake
    this.grantCount = from.grantCount
    this.lastCompletedToken = from.lastCompletedToken
    this.lastStoreSeq = from.lastStoreSeq
    this.pool = from.pool
    this.bindings = from.bindings
    this.cursor = from.cursor
    this.bindingCount = from.bindingCount
    this.nextAuditAt = from.nextAuditAt
    this.registrationsWhileLoading = from.registrationsWhileLoading
    this.delayed = from.delayed
    this.owned = undefined
  }
}

type Draft = StateDraft

const jobView: Handshake.MessageView<Job> = { messageId: (job) => job.messageId, storeSeq: (job) => job.storeSeq }

/** A fresh controller: volatile ones run at once; durable ones load first. */
export const initial = (config: WorkConfig): Step => {
  const state = new StateDraft({
    config,
    phase: config.durable ? "Loading" : "Running",
    handshake: Handshake.idle,
    grantCount: 0,
    lastCompletedToken: undefined,
    lastStoreSeq: 0,
    pool: SeqLog.empty(),
    bindings: [],
    cursor: 0,
    bindingCount: 0,
    nextAuditAt: undefined,
    registrationsWhileLoading: [],
    delayed: []
  })
  return { state, actions: config.durable ? [{ _tag: "Load" }] : [] }
}

export const step = (state: WorkState, event: WorkEvent): Step => {
  if (state.phase === "Stopped") return { state, actions: [{ _tag: "Dropped", reason: "NotRunning" }] }
  const s = new StateDraft(state)
  const out: Out = []
  switch (event._tag) {
    case "Wire":
      onWire(s, event.from, event.message, event.now, out)
      break
    case "Verified":
      onVerified(s, event.address, event.nonce, event.ok, event.now, out)
      break
    case "Audited":
      onAudited(s, event.address, event.live, event.now, out)
      break
    case "Produce":
      onProduce(s, event.grant, event.items, false, event.now, out)
      break
    case "ProduceAcked":
      // Durable: one store-and-accept step; volatile: stored in this fold, acknowledged at once.
      onProduce(s, event.grant, event.items, true, event.now, out)
      if (!s.config.durable) completeHandshake(s, Handshake.ackAll(s, event.grant.token, out), event.now, out)
      break
    case "StoredAck":
      completeHandshake(s, Handshake.storedAck(s, event.ack, out), event.now, out)
      break
    case "AckAll":
      completeHandshake(s, Handshake.ackAll(s, event.token, out), event.now, out)
      break
    case "Tick":
      onTick(s, event.now, out)
      break
    case "RetryDue":
      releaseDue(s, event.now, out)
      wakeForRetries(s, out)
      break
    case "Loaded":
      onLoaded(s, event.state, event.now, out)
      break
    case "StoreCompleted":
      onStoreCompleted(s, event.token, event.results, event.retried === true, event.now, out)
      break
    case "StoreRejected":
      Handshake.storeRejected(s, event.token, event.messageId, event.cause, event.now, out)
      break
    case "AcceptCompleted":
      completeHandshake(s, Handshake.acceptCompleted(s, event.token), event.now, out)
      break
    case "DeadLetterRecorded":
      onDeadLetterRecorded(s, event, out)
      break
    case "FailuresRecorded":
      onFailuresRecorded(s, event.failures, event.now, out)
      break
    case "Fail":
      fail(s, event.stage, event.cause, out)
      break
  }
  s.owned = undefined
  return { state: s, actions: out }
}

const fail = (s: Draft, stage: ReliableDeliveryStage, cause: unknown, out: Out): void => {
  s.phase = "Stopped"
  out.push({ _tag: "Fail", stage, cause })
}

const dropped = (reason: DropReason, out: Out): void => void out.push({ _tag: "Dropped", reason })

// ---------------------------------------------------------------------------------------------
// Bindings

/** Jobs a binding may still receive. */
export const freeDemand = (binding: WorkerBinding): number => binding.demandUpTo - binding.confirmedSeq - binding.unconfirmed.length

/** What a grant may fill: the bindings' free demand beyond what the pool already holds. */
export const openDemand = (state: WorkState): number => {
  let free = 0
  for (const binding of state.bindings) free += freeDemand(binding)
  return free - state.pool.length
}

/**
 * How many jobs an open grant may carry: the bindings' requested windows, the jobs they hold
 * included, beyond what the pool holds. Sized by what is free, a grant shrank whenever one
 * worker was still busy with jobs it held (a retried job, a slow one): a durable queue then
 * stored 750 and 250 jobs by turns instead of 1,000, twice the store round trips for the same
 * jobs. The extra jobs wait in the pool for the first worker with demand, and a grant opens
 * only when free demand exceeds the pool (`openDemand`), so jobs accepted and not yet taken by
 * a worker stay within the requested windows.
 */
export const grantCapacity = (state: WorkState): number => {
  let requested = 0
  for (const binding of state.bindings) requested += binding.demandUpTo - binding.confirmedSeq
  return requested - state.pool.length
}

/** The binding of a worker endpoint (one per endpoint name), or -1. */
const indexOf = (s: Draft, worker: ControllerAddress): number => {
  const bindings = s.bindings
  for (let index = 0; index < bindings.length; index++) {
    if (bindings[index].address.endpoint === worker.endpoint) return index
  }
  return -1
}

/** The binding at `index`, copied the first time this step changes it. */
const own = (s: Draft, index: number): BindingDraft => {
  const binding = s.bindings[index]
  const owned = s.owned
  if (owned !== undefined) {
    for (let i = 0; i < owned.length; i++) if (owned[i] === binding) return binding as BindingDraft
  }
  const copy = new BindingDraft(binding)
  const bindings = owned === undefined ? s.bindings.slice() : (s.bindings as Array<WorkerBinding>)
  bindings[index] = copy
  s.bindings = bindings
  ;(s.owned ??= []).push(copy)
  return copy
}

const registrationAck = (binding: WorkerBinding, nonce: string): ProducerToConsumer => ({
  _tag: "RegistrationAck",
  sessionId: binding.sessionId,
  nextSeq: binding.confirmedSeq + 1,
  nonce
})

/** A fresh binding: a new session and sequence space, no demand until the worker asks. */
const bind = (s: Draft, address: ControllerAddress, nonce: string, now: number, out: Out): void => {
  s.bindingCount++
  const binding: WorkerBinding = {
    address,
    sessionId: `${s.config.sessionId}:${s.bindingCount}`,
    nonce,
    demandUpTo: 0,
    confirmedSeq: 0,
    unconfirmed: SeqLog.empty(),
    dispatched: 0,
    settled: new Map()
  }
  s.bindings = [...s.bindings, binding]
  if (s.nextAuditAt === undefined) s.nextAuditAt = now + s.config.auditIntervalMs
  out.push({ _tag: "Send", to: address, message: registrationAck(binding, nonce) })
}

/** The bound controller registered again: it keeps its session, progress and demand. */
const rebind = (s: Draft, index: number, nonce: string, out: Out): void => {
  const binding = own(s, index)
  binding.nonce = nonce
  out.push({ _tag: "Send", to: binding.address, message: registrationAck(binding, nonce) })
}

/**
 * Ends a binding: its unconfirmed jobs go back to the head of the pool, in their order, with
 * their original id, payload and store seq.
 */
const endBinding = (s: Draft, index: number, reason: EndReason, cause: ProtocolViolation | undefined, out: Out): void => {
  const binding = s.bindings[index]
  const jobs: Array<Job> = []
  for (let i = 0; i < binding.unconfirmed.length; i++) {
    const dispatched = binding.unconfirmed.at(i)!
    // A job the worker settled is taken care of already (retried, handed back, dead-lettered).
    if (!binding.settled.has(dispatched.message.seq)) jobs.push(dispatched.job)
  }
  const requeued = jobs.length
  if (requeued > 0) {
    for (let i = 0; i < s.pool.length; i++) jobs.push(s.pool.at(i)!)
    s.pool = SeqLog.from(jobs)
  }
  s.bindings = [...s.bindings.slice(0, index), ...s.bindings.slice(index + 1)]
  if (s.owned !== undefined) s.owned = s.owned.filter((owned) => owned !== binding)
  if (index < s.cursor) s.cursor--
  if (s.cursor >= s.bindings.length) s.cursor = 0
  if (s.bindings.length === 0) s.nextAuditAt = undefined
  out.push({ _tag: "BindingEnded", worker: binding.address, reason, requeued, cause })
}

// ---------------------------------------------------------------------------------------------
// Worker input

const onWire = (s: Draft, from: ControllerAddress, message: ConsumerToProducer, now: number, out: Out): void => {
  if (s.phase === "Loading" && message._tag === "RegisterConsumer") return rememberRegistration(s, from, message.nonce, out)
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

/**
 * A registration while loading is verified once loaded, so workers do not wait a whole tick for
 * a restarting producer. Only each endpoint's latest one is kept, and only so many.
 */
const rememberRegistration = (s: Draft, from: ControllerAddress, nonce: string, out: Out): void => {
  const others = s.registrationsWhileLoading.filter((pending) => pending.address.endpoint !== from.endpoint)
  if (others.length >= MaxRegistrationsWhileLoading) return dropped("NotRunning", out)
  s.registrationsWhileLoading = [...others, { address: from, nonce }]
}

/** Registration grants no demand. The bound controller re-registering needs no new verification. */
const onRegister = (s: Draft, from: ControllerAddress, nonce: string, out: Out): void => {
  const index = indexOf(s, from)
  if (index >= 0 && sameAddress(s.bindings[index].address, from)) return rebind(s, index, nonce, out)
  out.push({ _tag: "Verify", address: from, nonce })
}

/**
 * The resolver vouched for a registering controller (or not). A new incarnation of a bound
 * worker endpoint replaces the old binding; anything unverified is dropped without an answer.
 */
const onVerified = (s: Draft, address: ControllerAddress, nonce: string, ok: boolean, now: number, out: Out): void => {
  if (s.phase !== "Running") return dropped("NotRunning", out)
  if (!ok) return dropped("UnverifiedSender", out)
  const index = indexOf(s, address)
  if (index >= 0 && sameAddress(s.bindings[index].address, address)) return rebind(s, index, nonce, out)
  if (index >= 0) endBinding(s, index, "Replaced", undefined, out)
  bind(s, address, nonce, now, out)
  dispatchPool(s, out)
}

/** A bound worker the resolver no longer knows as live: its binding ends. */
const onAudited = (s: Draft, address: ControllerAddress, live: boolean, now: number, out: Out): void => {
  if (live || s.phase !== "Running") return
  const index = indexOf(s, address)
  if (index < 0 || !sameAddress(s.bindings[index].address, address)) return
  endBinding(s, index, "Gone", undefined, out)
  dispatchPool(s, out)
  offerGrantIfDue(s, now, out)
}

/** The binding a Request or Ack may act on: the current registration of the current sub-flow. */
const boundIndex = (s: Draft, from: ControllerAddress, sessionId: string, out: Out): number => {
  const index = indexOf(s, from)
  if (index < 0 || !sameAddress(s.bindings[index].address, from)) {
    dropped("UnboundSender", out)
    return -1
  }
  const binding = s.bindings[index]
  // Any of the bound controller's registrations (nonces) will do, as for point-to-point.
  if (binding.sessionId !== sessionId) {
    dropped("StaleSession", out)
    return -1
  }
  return index
}

const lastSeqOf = (binding: WorkerBinding): number => binding.confirmedSeq + binding.unconfirmed.length

/** A worker broke the protocol: only its binding ends, and its jobs go to the others. */
const violated = (s: Draft, index: number, violation: ProtocolViolation, now: number, out: Out): void => {
  endBinding(s, index, "Violation", violation, out)
  dispatchPool(s, out)
  offerGrantIfDue(s, now, out)
}

const onRequest = (s: Draft, from: ControllerAddress, request: Request, now: number, out: Out): void => {
  const index = boundIndex(s, from, request.sessionId, out)
  if (index < 0) return
  const worker = `worker ${from.endpoint}`
  const violation = confirmationViolation(worker, request.confirmedSeq, lastSeqOf(s.bindings[index])) ??
    demandViolation(worker, request)
  if (violation !== undefined) return violated(s, index, violation, now, out)
  const binding = own(s, index)
  confirm(s, binding, request.confirmedSeq, out)
  if (request.requestUpToSeq > binding.demandUpTo) binding.demandUpTo = request.requestUpToSeq
  if (request.viaTimeout) resend(binding, out)
  dispatchPool(s, out)
  offerGrantIfDue(s, now, out)
}

/** An Ack confirms without new demand, so nothing can be dispatched or granted because of it. */
const onAck = (s: Draft, from: ControllerAddress, ack: Ack, now: number, out: Out): void => {
  const index = boundIndex(s, from, ack.sessionId, out)
  if (index < 0) return
  const violation = confirmationViolation(`worker ${from.endpoint}`, ack.confirmedSeq, lastSeqOf(s.bindings[index]))
  if (violation !== undefined) return violated(s, index, violation, now, out)
  if (ack.confirmedSeq > s.bindings[index].confirmedSeq) confirm(s, own(s, index), ack.confirmedSeq, out)
}

/** Drops a binding's confirmed prefix; reports each job (with its store seq) and persists it. */
const confirm = (s: Draft, binding: BindingDraft, upTo: number, out: Out): void => {
  const count = upTo - binding.confirmedSeq
  if (count <= 0) return
  // Jobs the worker settled without doing them are not confirmations.
  let jobs: Array<Job> | undefined
  if (binding.settled.size > 0) {
    const settled = new Map(binding.settled)
    jobs = []
    for (let i = 0; i < count; i++) {
      const dispatched = binding.unconfirmed.at(i)!
      if (!settled.delete(dispatched.message.seq)) jobs.push(dispatched.job)
    }
    binding.settled = settled
  }
  const done = jobs?.length ?? count
  const jobAt = (i: number): Job => jobs === undefined ? binding.unconfirmed.at(i)!.job : jobs[i]
  if (s.config.deliveryConfirmation) {
    const confirmed: Array<DeliveryConfirmed> = []
    for (let i = 0; i < done; i++) {
      const job = jobAt(i)
      confirmed.push(new DeliveryConfirmed({ endpoint: s.config.endpoint, messageId: job.messageId, seq: job.storeSeq }))
    }
    if (done > 0) out.push({ _tag: "Notify", confirmed })
  } else if (done > 0) {
    out.push({ _tag: "Confirmed", count: done })
  }
  if (s.config.durable && done > 0) {
    const messageIds: Array<string> = []
    for (let i = 0; i < done; i++) messageIds.push(jobAt(i).messageId)
    out.push({ _tag: "ConfirmJobs", messageIds })
  }
  binding.confirmedSeq = upTo
  binding.unconfirmed = binding.unconfirmed.dropFront(count)
}

/** A timeout request: everything the worker holds unconfirmed goes out again. */
const resend = (binding: WorkerBinding, out: Out): void => {
  for (let i = 0; i < binding.unconfirmed.length; i++) {
    out.push({ _tag: "Resend", to: binding.address, message: binding.unconfirmed.at(i)!.message })
  }
}

// ---------------------------------------------------------------------------------------------
// Dispatch

/** The first binding with free demand at or after the cursor, or -1. */
const nextWithDemand = (s: Draft): number => {
  const count = s.bindings.length
  for (let k = 0; k < count; k++) {
    const index = (s.cursor + k) % count
    if (freeDemand(s.bindings[index]) > 0) return index
  }
  return -1
}

/** Hands pool jobs, head first, to bindings with free demand in strict round-robin. */
const dispatchPool = (s: Draft, out: Out): void => {
  const pool = s.pool
  let taken = 0
  while (taken < pool.length) {
    const index = nextWithDemand(s)
    if (index < 0) break
    send(own(s, index), pool.at(taken)!, out)
    taken++
    s.cursor = (index + 1) % s.bindings.length
  }
  if (taken > 0) s.pool = pool.dropFront(taken)
}

const send = (binding: BindingDraft, job: Job, out: Out): void => {
  const seq = lastSeqOf(binding) + 1
  const first: SequencedMessage = job.attempt === undefined || job.attempt <= 1
    ? { _tag: "SequencedMessage", sessionId: binding.sessionId, messageId: job.messageId, seq, payload: job.payload }
    : { _tag: "SequencedMessage", sessionId: binding.sessionId, messageId: job.messageId, seq, payload: job.payload, attempt: job.attempt }
  // Only a sampled sender's jobs carry a trace; the others keep their usual shape.
  const message: SequencedMessage = job.trace === undefined ? first : { ...first, trace: job.trace }
  binding.unconfirmed = binding.unconfirmed.append({ job, message })
  binding.dispatched++
  out.push({ _tag: "Send", to: binding.address, message })
}

/** A grant opens only when the handshake is idle and the workers' free demand exceeds the pool. */
const offerGrantIfDue = (s: Draft, now: number, out: Out): void => {
  if (s.phase !== "Running" || s.handshake._tag !== "Idle" || openDemand(s) <= 0) return
  Handshake.offerGrant(s, now, out)
}

// ---------------------------------------------------------------------------------------------
// Producer-side input (the endpoint contract)

/** Checks a `Produced` before its payload is encoded. Returns an error, or undefined when valid. */
export const checkProduced = (state: WorkState, grant: RequestNext, messageId: string, payload: unknown) =>
  Handshake.checkProduced(state.config, grant, messageId, payload)

/** The answer of an already-answered token for the same single message (see `ProducerHandshake`). */
export const answeredBefore = (state: WorkState, grant: RequestNext, messageId: string) =>
  Handshake.answeredBefore(state.handshake, grant, messageId)

const onProduce = (
  s: Draft,
  grant: RequestNext,
  items: ReadonlyArray<ProduceItem>,
  acknowledged: boolean,
  now: number,
  out: Out
): void => {
  if (!Handshake.admitProduce(s, grant, items, out)) return
  if (s.config.durable) {
    Handshake.startStoring(s, grant, items, acknowledged)
    out.push({ _tag: "Store", token: grant.token, items, accept: acknowledged })
    return
  }
  const jobs = items.map((item): Job => ({
    storeSeq: ++s.lastStoreSeq,
    messageId: item.messageId,
    payload: item.payload,
    at: item.at ?? now,
    trace: item.trace
  }))
  Handshake.stored(s, jobView, grant, jobs, undefined, undefined, now, out)
}

/**
 * The durable queue's authoritative answer. A resubmission keeps the first write's seq and
 * payload; one already accepted (so held here, or confirmed) is not dispatched twice, and neither
 * is a second copy of an id within one batch. A store that accepted too settles the handshake at
 * once.
 */
const onStoreCompleted = (
  s: Draft,
  token: string,
  results: ReadonlyArray<WorkStoreResult>,
  retried: boolean,
  now: number,
  out: Out
): void => {
  const storing = Handshake.storing(s, token)
  if (storing === undefined) return
  const jobs: Array<Job> = []
  const known: Array<boolean> = []
  for (let index = 0; index < results.length; index++) {
    const { entry, alreadyStored, accepted, confirmed } = results[index]
    if (entry.seq > s.lastStoreSeq) s.lastStoreSeq = entry.seq
    jobs.push({ storeSeq: entry.seq, messageId: entry.messageId, payload: entry.payload, at: entry.at ?? now, trace: entry.trace })
    known.push(
      alreadyStored && (
        confirmed || results[index].deadLettered === true || Handshake.acceptedBefore(storing, retried, accepted) || isHeld(s, entry.messageId) ||
        jobs.some((job, other) => other < index && job.messageId === entry.messageId)
      )
    )
  }
  const alreadyStored = results.map((result) => result.alreadyStored)
  const settled = Handshake.storeCompleted(s, jobView, storing, jobs, alreadyStored, known, now, out)
  completeHandshake(s, settled, now, out)
}

/** True when the pool, a retry waiting for its time, or a worker holds a job with this id. */
const isHeld = (s: Draft, messageId: string): boolean => {
  for (let i = 0; i < s.pool.length; i++) if (s.pool.at(i)!.messageId === messageId) return true
  for (const delayed of s.delayed) if (delayed.job.messageId === messageId) return true
  for (const binding of s.bindings) {
    for (let i = 0; i < binding.unconfirmed.length; i++) if (binding.unconfirmed.at(i)!.job.messageId === messageId) return true
  }
  return false
}

/** Ends a settled handshake (none: nothing to do): new jobs join the pool's tail and go out at once where there is demand. */
const completeHandshake = (s: Draft, settled: Handshake.Settled<Job> | undefined, now: number, out: Out): void => {
  if (settled === undefined) return
  Handshake.complete(s, settled, out)
  let pool = s.pool
  for (let index = 0; index < settled.messages.length; index++) {
    if (settled.known[index] !== true) pool = pool.append(settled.messages[index])
  }
  s.pool = pool
  dispatchPool(s, out)
  offerGrantIfDue(s, now, out)
}

// ---------------------------------------------------------------------------------------------
// Timer and durable lifecycle

/**
 * When the timer must next run: the handshake's retry deadline, the next audit, or the first
 * retry whose attempt is recorded (one still being written is released by `FailuresRecorded`).
 */
export const nextDeadline = (state: WorkState): number | undefined => {
  let next: number | undefined = Handshake.nextDeadline(state.handshake, state.config.retryIntervalMs)
  for (const due of [state.nextAuditAt, state.delayed.find((delayed) => delayed.recorded)?.dueAt]) {
    if (due !== undefined && (next === undefined || due < next)) next = due
  }
  return next
}

/** The timer: re-offer an unanswered grant; ask the resolver whether bound workers still live. */
const onTick = (s: Draft, now: number, out: Out): void => {
  Handshake.retry(s, now, out)
  releaseDue(s, now, out)
  if (s.nextAuditAt !== undefined && now >= s.nextAuditAt && s.bindings.length > 0) {
    out.push({ _tag: "Audit", workers: s.bindings.map((binding) => binding.address) })
    s.nextAuditAt = now + s.config.auditIntervalMs
  }
}

/**
 * A durable controller starts from what the queue holds: accepted, unconfirmed jobs become the
 * pool in store order, and the append cursor continues from the queue's.
 */
const onLoaded = (s: Draft, loaded: WorkQueueState, now: number, out: Out): void => {
  if (s.phase !== "Loading") return
  s.phase = "Running"
  s.lastStoreSeq = loaded.currentSeq
  // A job that failed before keeps its attempt count, and waits for its retry time if it has one.
  const ready: Array<Job> = []
  for (const entry of loaded.pending) {
    const job: Job = {
      storeSeq: entry.seq,
      messageId: entry.messageId,
      payload: entry.payload,
      attempt: (entry.attempts ?? 0) + 1,
      at: entry.at ?? now,
      trace: entry.trace
    }
    if (entry.notBefore !== undefined && entry.notBefore > now) retryLater(s, job, entry.notBefore, true)
    else ready.push(job)
  }
  s.pool = SeqLog.from(ready)
  wakeForRetries(s, out)
  for (const pending of s.registrationsWhileLoading) onRegister(s, pending.address, pending.nonce, out)
  s.registrationsWhileLoading = []
  offerGrantIfDue(s, now, out)
}

// ---------------------------------------------------------------------------------------------
// Settles: failed, handed-back and dead-lettered jobs

/**
 * A worker settles a job without confirming it as done. Failed: the job waits for its retry time
 * (and, when durable, for its failed attempt to be recorded, so a restart keeps the count), then
 * goes back to the pool for any worker, as its next attempt. The worker is answered at once: it
 * holds no window slot while the job waits. Handed back (its worker is stuck): the job goes back to the head of
 * the pool at once. Dead-lettered: a durable producer records it before answering `Settled`.
 * The worker confirms past a settled job only once answered, and repeats its settle until then.
 */
const onSettle = (s: Draft, from: ControllerAddress, settle: Settle, now: number, out: Out): void => {
  const index = boundIndex(s, from, settle.sessionId, out)
  if (index < 0) return
  const binding = s.bindings[index]
  if (settle.seq <= binding.confirmedSeq) return settledTo(binding, settle.seq, out)
  const dispatched = binding.unconfirmed.at(settle.seq - binding.confirmedSeq - 1)
  if (dispatched === undefined) return violated(s, index, protocolViolation(`worker ${from.endpoint} settled seq ${settle.seq} it was never sent`), now, out)
  const known = binding.settled.get(settle.seq)
  if (known === "Recording") return
  if (known === "Done") return settledTo(binding, settle.seq, out)
  const owned = own(s, index)
  const outcome = settle.outcome
  const durableDeadLetter = outcome._tag === "DeadLettered" && s.config.durable
  owned.settled = new Map(owned.settled).set(settle.seq, durableDeadLetter ? "Recording" : "Done")
  const job = dispatched.job
  switch (outcome._tag) {
    case "Failed": {
      const dueAt = now + outcome.retryAfterMs
      retryLater(s, { ...job, attempt: outcome.attempt + 1 }, dueAt, !s.config.durable)
      if (s.config.durable) {
        out.push({ _tag: "RecordFailure", messageId: job.messageId, attempts: outcome.attempt, lastError: outcome.error, notBefore: dueAt })
      } else {
        wakeForRetries(s, out)
      }
      break
    }
    case "Released":
      s.pool = SeqLog.from([job, ...poolJobs(s)])
      break
    case "DeadLettered":
      if (durableDeadLetter) {
        return void out.push({
          _tag: "DeadLetter",
          worker: owned.address,
          sessionId: owned.sessionId,
          seq: settle.seq,
          messageId: job.messageId,
          attempts: outcome.attempts,
          lastError: outcome.error,
          at: now
        })
      }
      break
  }
  settledTo(owned, settle.seq, out)
  dispatchPool(s, out)
  offerGrantIfDue(s, now, out)
}

const onDeadLetterRecorded = (s: Draft, event: Extract<WorkEvent, { readonly _tag: "DeadLetterRecorded" }>, out: Out): void => {
  const index = indexOf(s, event.worker)
  if (index < 0 || !sameAddress(s.bindings[index].address, event.worker) || s.bindings[index].sessionId !== event.sessionId) return
  if (s.bindings[index].settled.get(event.seq) !== "Recording") return
  const binding = own(s, index)
  binding.settled = new Map(binding.settled).set(event.seq, "Done")
  settledTo(binding, event.seq, out)
}

const protocolViolation = (message: string) => new ProtocolViolation({ message })

const settledTo = (binding: WorkerBinding, seq: number, out: Out): void =>
  void out.push({ _tag: "Send", to: binding.address, message: { _tag: "Settled", sessionId: binding.sessionId, seq } })

const poolJobs = (s: Draft): Array<Job> => {
  const jobs: Array<Job> = []
  for (let i = 0; i < s.pool.length; i++) jobs.push(s.pool.at(i)!)
  return jobs
}

/** A job waits until `dueAt` before it goes back to the pool (the list stays ordered by due time). */
const retryLater = (s: Draft, job: Job, dueAt: number, recorded: boolean): void => {
  const delayed = s.delayed.slice()
  let index = delayed.length
  while (index > 0 && delayed[index - 1].dueAt > dueAt) index--
  delayed.splice(index, 0, { job, dueAt, recorded })
  s.delayed = delayed
}

/**
 * The queue wrote these failed attempts: their retries may go once due. A report matches the
 * waiting retry of the attempt after it, so a late answer never releases a later attempt.
 */
const onFailuresRecorded = (s: Draft, failures: ReadonlyArray<{ readonly messageId: string; readonly attempts: number }>, now: number, out: Out): void => {
  const written = new Map<string, number>()
  for (const failure of failures) written.set(failure.messageId, failure.attempts + 1)
  let changed = false
  const delayed = s.delayed.map((entry) => {
    if (entry.recorded || written.get(entry.job.messageId) !== entry.job.attempt) return entry
    changed = true
    return { ...entry, recorded: true }
  })
  if (!changed) return
  s.delayed = delayed
  releaseDue(s, now, out)
  wakeForRetries(s, out)
}

/** Asks to be woken when the first retry whose attempt is recorded falls due (none: nothing). */
const wakeForRetries = (s: Draft, out: Out): void => {
  const next = s.delayed.find((delayed) => delayed.recorded)
  if (next !== undefined) out.push({ _tag: "WakeAt", at: next.dueAt })
}

/** Retries whose time has come, and whose attempt is recorded, join the pool's tail. */
const releaseDue = (s: Draft, now: number, out: Out): void => {
  let due = 0
  let pool = s.pool
  const writing: Array<DelayedJob> = []
  for (; due < s.delayed.length && s.delayed[due].dueAt <= now; due++) {
    const delayed = s.delayed[due]
    if (delayed.recorded) pool = pool.append(delayed.job)
    else writing.push(delayed)
  }
  if (pool === s.pool) return
  s.pool = pool
  // The retries still being written stay first: they are due before the rest.
  s.delayed = writing.length === 0 ? s.delayed.slice(due) : [...writing, ...s.delayed.slice(due)]
  dispatchPool(s, out)
  offerGrantIfDue(s, now, out)
}
