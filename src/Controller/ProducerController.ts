/**
 * The point-to-point producer controller: `ProducerMachine` in the shared producer-side shell
 * (`internal/ProducerShell`), plus what only a point-to-point producer does: it refuses messages
 * that cannot fit a remote consumer's frames, recycles the snapshots of confirmed large messages,
 * and persists through a `DurableProducerQueue` (`DurableLane`).
 */
import { Duration, Effect } from "effect"
import type { Scope } from "effect"
import type { DurableProducerQueueService } from "../DurableQueue/DurableProducerQueue.js"
import type { EndpointRecord } from "../internal/EndpointRegistry.js"
import { sameAddress } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import type { PayloadCodec } from "../Protocol/PayloadCodec.js"
import type { Envelope } from "../Protocol/WireMessage.js"
import type { SystemInternals } from "../internal/SystemInternals.js"
import * as RecyclingTransports from "../Transport/internal/RecyclingTransports.js"
import * as DurableLane from "./DurableLane.js"
import * as FrameFit from "./internal/FrameFit.js"
import type * as ProducerCalls from "./internal/ProducerCalls.js"
import * as ProducerShell from "./internal/ProducerShell.js"
import type { SeqLog } from "./internal/SeqLog.js"
import * as SnapshotPool from "./internal/SnapshotPool.js"
import type * as Metrics from "../Observability/Metrics.js"
import * as Tracing from "../Observability/Tracing.js"
import * as Machine from "./ProducerMachine.js"

export interface ProducerSettings {
  readonly endpoint: string
  readonly consumer: string
  readonly deliveryConfirmation: boolean
  readonly retryInterval: Duration.Duration
  readonly chunkSize: number | undefined
  readonly durableQueue: DurableProducerQueueService | undefined
  readonly queueRetry: DurableLane.QueueRetryPolicy
  /** How long closing waits for the durable lane (graceful shutdown). */
  readonly drainTimeout: Duration.Duration
  /** The node hosting the consumer (a remoting-only flow); absent when it is local. */
  readonly consumerNode?: string | undefined
}

/** Why a produce call can fail. */
export type ProduceError = ProducerCalls.ProduceError

export type ProducerHooks = ProducerShell.ProducerHooks

/** What one controller counted since it started. */
export interface ControllerStats {
  /** Wire messages sent the first time. */
  readonly sent: number
  /** Wire messages sent again after a timeout request. */
  readonly resent: number
  /** Business messages confirmed by the consumer. */
  readonly confirmed: number
  /** Inputs ignored as stale, unbound or unverified. */
  readonly dropped: number
  /**
   * The lag: how long ago the oldest message sent and not yet confirmed was sent or enqueued
   * (milliseconds; 0 when every message is confirmed).
   */
  readonly oldestUnconfirmedAgeMillis: number
}

export interface ProducerStats extends ControllerStats {
  /**
   * True while the durable queue does not answer and its calls are being retried: the flow
   * waits and heals by itself (see `ReliableSystem.health`).
   */
  readonly degraded: boolean
}

export interface ProducerController<A> extends ProducerShell.ProducerSide<A> {
  readonly stats: () => ControllerStats
  /** What the endpoint's gauges show (sampled). */
  readonly gauges: () => Metrics.FlowGauges
}

/** How long ago `at` was (milliseconds; 0 for nothing, and never negative across clocks). */
export const ageOf = (at: number | undefined, now: number): number => at === undefined ? 0 : Math.max(0, now - at)

/** Accepts a registering controller only if it is the live consumer controller configured for us. */
export const verifyConsumer = (record: EndpointRecord | undefined, producer: string, sender: ControllerAddress): boolean =>
  record !== undefined && record.kind === "Consumer" && record.peer === producer && sameAddress(record.address, sender)

/** A stored message too large for its frame (stored by an earlier controller without chunking). */
const unsendable = (fit: FrameFit.FrameFit, message: Envelope["message"]) =>
  message._tag === "SequencedMessage" ? fit.sequenced(message.messageId, message.payload.length) : undefined

const laneActions: ReadonlySet<string> = new Set(["Load", "Store", "Accept", "PersistConfirm", "DeadLetter"])

const machine: ProducerShell.ShellMachine<Machine.ProducerState, Machine.ProducerEvent, Machine.ProducerAction> = {
  step: Machine.step,
  nextDeadline: Machine.nextDeadline,
  handshake: (state) => state.handshake,
  freeDemand: Machine.freeMessages,
  checkProduced: Machine.checkProduced,
  answeredBefore: Machine.answeredBefore
}

/**
 * Snapshots of large payloads are recycled once confirmed, where the transport lets nothing
 * outlive that; never with a durable queue, which is handed the snapshots to store. Two idle
 * buffers cover the next message or two of a steady stream.
 */
const snapshotPool = (settings: ProducerSettings, system: SystemInternals) =>
  settings.durableQueue !== undefined || settings.chunkSize === undefined || !RecyclingTransports.recyclable(system.transport)
    ? undefined
    : SnapshotPool.make({ chunkSize: settings.chunkSize, idle: 2 })

/** Only frames to another node have a size limit (local envelopes never become frames). */
const frameFitOf = (settings: ProducerSettings, system: SystemInternals, identity: ProducerShell.Identity) =>
  settings.consumerNode === undefined || settings.consumerNode === system.transport.node || system.transport.maxFrameSize === undefined
    ? undefined
    : FrameFit.make({
      maxFrameSize: system.transport.maxFrameSize,
      from: identity.address,
      consumer: settings.consumer,
      sessionId: identity.sessionId,
      chunkSize: settings.chunkSize
    })

/** The parts of the shell the stats and gauges read. */
type Shell = Pick<ProducerShell.Shell<Machine.ProducerState, unknown>, "state" | "now" | "freeDemand">

const oldestUnconfirmedAgeMillis = (shell: Shell) => ageOf(shell.state().unconfirmed.at(0)?.at, shell.now())

const gaugesOf = (shell: Shell): Metrics.FlowGauges => {
  const state = shell.state()
  const inFlight = state.sentUpTo - state.confirmedSeq
  return {
    inFlight,
    freeDemand: shell.freeDemand(),
    // Emitted beyond the consumer's demand: stored, waiting to be sent.
    pending: state.unconfirmed.length - inFlight,
    workers: 0,
    oldestUnconfirmedAgeMillis: oldestUnconfirmedAgeMillis(shell),
    oldestPendingAgeMillis: 0
  }
}

const countsOf = (counters: ControllerCounters): ProducerShell.MetricCounts => ({
  sent: () => counters.sent,
  resent: () => counters.resent,
  confirmed: () => counters.confirmed,
  dropped: () => counters.dropped
})

const isMessageEnd = (entry: Machine.OutboundEntry) => entry.message.chunk === undefined || entry.message.chunk.last

/**
 * Observes the end-to-end latency of confirmed entries (each message's time from its send to
 * now) and, under a tracer, records their confirmations in their senders' traces.
 */
const endToEndLatencies = (metrics: Metrics.EndpointMetrics, now: () => number, spans: Tracing.ConfirmedSpans | undefined) =>
(confirmed: SeqLog<Machine.OutboundEntry>, count: number) => {
  const at = now()
  for (let index = 0; index < count; index++) {
    const entry = confirmed.at(index)!
    if (isMessageEnd(entry)) metrics.endToEndLatency.observe(Math.max(0, at - entry.at))
  }
  // Checked once per fold, not per message: untraced controllers have no `spans`.
  if (spans === undefined) return
  for (let index = 0; index < count; index++) {
    const entry = confirmed.at(index)!
    if (isMessageEnd(entry) && entry.message.trace !== undefined) spans(entry.message.trace, entry.message.messageId, entry.at)
  }
}

type ControllerCounters = { -readonly [K in keyof Omit<ControllerStats, "oldestUnconfirmedAgeMillis">]: number }

export const make = <A>(
  settings: ProducerSettings,
  codec: PayloadCodec<A>,
  system: SystemInternals,
  hooks: ProducerHooks
): Effect.Effect<ProducerController<A>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const identity = ProducerShell.identity(system, settings.endpoint)
    const config: Machine.ProducerConfig = {
      endpoint: settings.endpoint,
      consumer: settings.consumer,
      incarnation: identity.incarnation,
      sessionId: identity.sessionId,
      deliveryConfirmation: settings.deliveryConfirmation,
      retryIntervalMs: Duration.toMillis(settings.retryInterval),
      durable: settings.durableQueue !== undefined,
      chunkSize: settings.chunkSize
    }
    const frameFit = frameFitOf(settings, system, identity)
    const pool = snapshotPool(settings, system)
    // The highest wire seq sent so far: a chunk sent again (a resend, or the first sends to a new
    // binding) leaves an earlier envelope that may still be in flight when its message is confirmed.
    let highestSent = 0
    const counters = { sent: 0, resent: 0, confirmed: 0, dropped: 0 }
    const clock = yield* Effect.clock
    const observeConfirmed = endToEndLatencies(hooks.metrics, () => clock.unsafeCurrentTimeMillis(), yield* Tracing.confirmedSpans(settings.endpoint))

    /**
     * The first `count` entries were just confirmed: their messages' snapshots go back to the pool.
     * Each of their chunks went out once, to the consumer, which had to take it in to confirm it
     * and forgets it when it confirms, before it tells us: nothing outside this controller holds
     * them any longer. (A chunk that went out again was kept out of the pool when it did.)
     */
    const recycle = (pool: SnapshotPool.SnapshotPool, confirmed: SeqLog<Machine.OutboundEntry>, count: number) => {
      if (!RecyclingTransports.recyclable(system.transport)) return
      for (let index = 0; index < count; index++) {
        const message = confirmed.at(index)!.message
        if (message.chunk?.last === true) pool.release(message.payload)
      }
    }

    const send = (
      action: Extract<Machine.ProducerAction, { readonly _tag: "Send" | "Resend" }>,
      context: ProducerShell.ShellContext<Machine.ProducerEvent>
    ): boolean => {
      const refused = frameFit === undefined ? undefined : unsendable(frameFit, action.message)
      if (refused !== undefined) {
        context.stop({ _tag: "Terminal", stage: "Protocol", cause: refused })
        return false
      }
      if (action._tag === "Send") counters.sent++
      else counters.resent++
      if (pool !== undefined && action.message._tag === "SequencedMessage") {
        if (action.message.seq <= highestSent) pool.keep(action.message.payload)
        else highestSent = action.message.seq
      }
      context.post({ from: identity.address, to: action.to, message: action.message })
      return true
    }

    const shell = yield* ProducerShell.make<Machine.ProducerState, Machine.ProducerEvent, Machine.ProducerAction, A>({
      identity,
      system,
      hooks,
      codec,
      durable: config.durable,
      retryIntervalMs: config.retryIntervalMs,
      drainTimeout: settings.drainTimeout,
      counters,
      machine,
      initial: (now) => Machine.initial(config, now),
      // Asked of the configured consumer node: a flow follows one resolution authority.
      verify: (address) =>
        Effect.map(system.lookup(address.endpoint, settings.consumerNode), (record) => verifyConsumer(record, settings.endpoint, address)),
      lane: settings.durableQueue === undefined ? undefined : (context) => {
        const lane = DurableLane.make({
          queue: settings.durableQueue!,
          retry: settings.queueRetry,
          ...context.laneParts
        })
        return { drain: lane.drain, submit: (action) => lane.submit(action as DurableLane.LaneAction) }
      },
      laneActions,
      perform: (action, context) => action._tag === "Send" || action._tag === "Resend" ? send(action, context) : true,
      dropped: () => void counters.dropped++,
      metricCounts: countsOf(counters),
      afterStep: (before, after) => {
        if (after.confirmedSeq <= before.confirmedSeq) return
        const count = after.confirmedSeq - before.confirmedSeq
        observeConfirmed(before.unconfirmed, count)
        if (pool !== undefined) recycle(pool, before.unconfirmed, count)
      },
      snapshot: pool?.copy,
      refuse: frameFit?.produced
    })
    return {
      ...shell,
      stats: () => ({ ...counters, oldestUnconfirmedAgeMillis: oldestUnconfirmedAgeMillis(shell) }),
      gauges: () => gaugesOf(shell)
    }
  })
