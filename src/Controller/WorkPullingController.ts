/**
 * The work-pulling producer controller: `WorkPullingMachine` in the shared producer-side shell
 * (`internal/ProducerShell`), plus what only work-pulling does: audits of bound workers through
 * the resolver (a dead worker says nothing), binding counters, and persistence through a
 * `DurableWorkQueue` (`WorkLane`).
 */
import { Duration, Effect } from "effect"
import type { Clock, Scope } from "effect"
import type { EndpointRecord } from "../internal/EndpointRegistry.js"
import { sameAddress } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import type { PayloadCodec } from "../Protocol/PayloadCodec.js"
import type { SystemInternals } from "../internal/SystemInternals.js"
import type { DurableWorkQueueService } from "../DurableQueue/DurableWorkQueue.js"
import type { QueueRetryPolicy } from "./internal/LaneRunner.js"
import * as ProducerShell from "./internal/ProducerShell.js"
import { ageOf } from "./ProducerController.js"
import type { ProducerController, ProducerHooks } from "./ProducerController.js"
import type * as Metrics from "../Observability/Metrics.js"
import * as Tracing from "../Observability/Tracing.js"
import * as WorkLane from "./WorkLane.js"
import type { WorkPullingStats } from "./WorkPullingStats.js"
import * as Machine from "./WorkPullingMachine.js"

export interface WorkPullingSettings {
  readonly endpoint: string
  readonly deliveryConfirmation: boolean
  /** Grant retry cadence; bound workers are re-verified at the same cadence. */
  readonly retryInterval: Duration.Duration
  readonly durableQueue: DurableWorkQueueService | undefined
  readonly queueRetry: QueueRetryPolicy
  /** How long closing waits for the durable lane (graceful shutdown). */
  readonly drainTimeout: Duration.Duration
}

export type { WorkerStats, WorkPullingStats } from "./WorkPullingStats.js"

export interface WorkPullingController<A> extends ProducerController<A> {
  readonly workStats: () => WorkPullingStats
}

/** Accepts a controller only if the resolver names it as the live controller of a worker configured for us. */
export const verifyWorker = (record: EndpointRecord | undefined, producer: string, sender: ControllerAddress): boolean =>
  record !== undefined && record.kind === "Worker" && record.peer === producer && sameAddress(record.address, sender)

const laneActions: ReadonlySet<string> = new Set(["Load", "Store", "Accept", "ConfirmJobs", "RecordFailure", "DeadLetter"])

const machine: ProducerShell.ShellMachine<Machine.WorkState, Machine.WorkEvent, Machine.WorkAction> = {
  step: Machine.step,
  nextDeadline: Machine.nextDeadline,
  handshake: (state) => state.handshake,
  // What an open grant may carry (the ingress batches up to it).
  freeDemand: Machine.grantCapacity,
  checkProduced: Machine.checkProduced,
  answeredBefore: Machine.answeredBefore
}

const newCounters = () => ({
  sent: 0,
  dispatched: 0,
  resent: 0,
  confirmed: 0,
  dropped: 0,
  requeued: 0,
  fenced: 0,
  workersGone: 0,
  workersReplaced: 0,
  violations: 0
})

type Counters = ReturnType<typeof newCounters>

/** The earliest send time of the jobs in the pool, and of the jobs workers hold (undefined: none). */
export const oldestTimes = (state: Machine.WorkState): { readonly pending: number | undefined; readonly unconfirmed: number | undefined } => {
  // The pool is in dispatch order, not age order (a requeued job goes back to its head).
  let pending: number | undefined
  for (let index = 0; index < state.pool.length; index++) {
    const at = state.pool.at(index)!.at
    if (pending === undefined || at < pending) pending = at
  }
  let unconfirmed: number | undefined
  for (const binding of state.bindings) {
    const at = binding.unconfirmed.at(0)?.job.at
    if (at !== undefined && (unconfirmed === undefined || at < unconfirmed)) unconfirmed = at
  }
  return { pending, unconfirmed }
}

/**
 * Observes the end-to-end latency of the jobs each binding's worker just confirmed (not those it
 * settled another way): each job's time from its send to now; under a tracer, records their
 * confirmations in their senders' traces too.
 */
const endToEndLatencies = (metrics: Metrics.EndpointMetrics, clock: Clock.Clock, spans: Tracing.ConfirmedSpans | undefined) =>
(before: Machine.WorkState, after: Machine.WorkState) => {
  if (before.bindings === after.bindings) return
  for (const binding of after.bindings) {
    const earlier = before.bindings.find((candidate) => candidate.sessionId === binding.sessionId)
    if (earlier === undefined || binding.confirmedSeq <= earlier.confirmedSeq) continue
    const at = clock.unsafeCurrentTimeMillis()
    for (let seq = earlier.confirmedSeq + 1; seq <= binding.confirmedSeq; seq++) {
      const sent = earlier.unconfirmed.at(seq - earlier.confirmedSeq - 1)
      if (sent !== undefined && !earlier.settled.has(seq)) metrics.endToEndLatency.observe(Math.max(0, at - sent.job.at))
    }
    // Checked once per binding's batch, not per job: untraced controllers have no `spans`.
    if (spans !== undefined) confirmedSpans(spans, earlier, binding.confirmedSeq)
  }
}

/** Records the confirmed jobs' spans in their senders' traces. */
const confirmedSpans = (spans: Tracing.ConfirmedSpans, earlier: Machine.WorkState["bindings"][number], upTo: number) => {
  for (let seq = earlier.confirmedSeq + 1; seq <= upTo; seq++) {
    const job = earlier.unconfirmed.at(seq - earlier.confirmedSeq - 1)?.job
    if (job !== undefined && job.trace !== undefined && !earlier.settled.has(seq)) spans(job.trace, job.messageId, job.at)
  }
}

/** The counts the endpoint's counter metrics take, as `stats` reports them. */
const metricCountsOf = (counters: Counters): ProducerShell.MetricCounts => ({
  sent: () => counters.sent + counters.dispatched,
  resent: () => counters.resent,
  confirmed: () => counters.confirmed,
  dropped: () => counters.dropped + counters.fenced
})

/** What the endpoint's gauges show: the pool's totals over its bound workers. */
const gaugesOf = (state: Machine.WorkState, now: number): Metrics.FlowGauges => {
  let inFlight = 0
  let freeDemand = 0
  for (const binding of state.bindings) {
    inFlight += binding.unconfirmed.length - binding.settled.size
    freeDemand += Machine.freeDemand(binding)
  }
  const oldest = oldestTimes(state)
  return {
    inFlight,
    freeDemand,
    pending: state.pool.length,
    workers: state.bindings.length,
    oldestUnconfirmedAgeMillis: ageOf(oldest.unconfirmed, now),
    oldestPendingAgeMillis: ageOf(oldest.pending, now)
  }
}

const statsOf = (state: Machine.WorkState, counters: Counters, now: number): WorkPullingStats => {
  const oldest = oldestTimes(state)
  return {
    ...countsOf(state, counters),
    oldestPendingAgeMillis: ageOf(oldest.pending, now),
    oldestUnconfirmedAgeMillis: ageOf(oldest.unconfirmed, now)
  }
}

const countsOf = (state: Machine.WorkState, counters: Counters) => ({
  workers: state.bindings.length,
  pending: state.pool.length,
  perWorker: state.bindings.map((binding) => ({
    worker: binding.address.endpoint,
    // Jobs it settled (failed, handed back, dead-lettered) are in its window but no longer its work.
    inFlight: binding.unconfirmed.length - binding.settled.size,
    freeDemand: Machine.freeDemand(binding),
    dispatched: binding.dispatched
  })),
  dispatched: counters.dispatched,
  confirmed: counters.confirmed,
  requeued: counters.requeued,
  fenced: counters.fenced,
  workersGone: counters.workersGone,
  workersReplaced: counters.workersReplaced,
  violations: counters.violations,
  dropped: counters.dropped,
  degraded: false
})

/** Counts a binding that ended; a protocol violation is logged too. */
const ended = (
  counters: Counters,
  endpoint: string,
  action: Extract<Machine.WorkAction, { readonly _tag: "BindingEnded" }>,
  context: ProducerShell.ShellContext<Machine.WorkEvent>
) => {
  counters.requeued += action.requeued
  if (action.reason === "Gone") counters.workersGone++
  else if (action.reason === "Replaced") counters.workersReplaced++
  else {
    counters.violations++
    context.runFork(Effect.logWarning(
      `work-pulling producer "${endpoint}": worker ${action.worker.endpoint} broke the protocol; ` +
        `its binding ended and ${action.requeued} job(s) went back to the pool`,
      action.cause
    ))
  }
}

/**
 * Folds `RetryDue` when a retry falls due (`WakeAt`), in a fiber that sleeps until then (the
 * `Clock`, so `TestClock` drives it). One sleeps for the earliest time asked; a later time is
 * asked again by the machine once that one has come.
 */
const retryWaker = () => {
  let armedFor: number | undefined
  return (at: number, context: ProducerShell.ShellContext<Machine.WorkEvent>): void => {
    if (armedFor !== undefined && armedFor <= at) return
    armedFor = at
    context.runFork(Effect.zipRight(
      Effect.sleep(Duration.millis(Math.max(0, at - context.now()))),
      Effect.sync(() => {
        if (armedFor === at) armedFor = undefined
        context.dispatch({ _tag: "RetryDue", now: context.now() })
      })
    ))
  }
}

export const make = <A>(
  settings: WorkPullingSettings,
  codec: PayloadCodec<A>,
  system: SystemInternals,
  hooks: ProducerHooks
): Effect.Effect<WorkPullingController<A>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const identity = ProducerShell.identity(system, settings.endpoint)
    const retryIntervalMs = Duration.toMillis(settings.retryInterval)
    const config: Machine.WorkConfig = {
      endpoint: settings.endpoint,
      incarnation: identity.incarnation,
      sessionId: identity.sessionId,
      deliveryConfirmation: settings.deliveryConfirmation,
      retryIntervalMs,
      auditIntervalMs: retryIntervalMs,
      durable: settings.durableQueue !== undefined
    }
    const counters = newCounters()
    const observeConfirmed = endToEndLatencies(hooks.metrics, yield* Effect.clock, yield* Tracing.confirmedSpans(settings.endpoint))

    const verify = (worker: ControllerAddress) =>
      Effect.map(system.lookup(worker.endpoint), (record) => verifyWorker(record, settings.endpoint, worker))

    const wakeAt = retryWaker()

    const perform = (action: Machine.WorkAction, context: ProducerShell.ShellContext<Machine.WorkEvent>): boolean => {
      switch (action._tag) {
        case "Send":
        case "Resend":
          if (action._tag === "Resend") counters.resent++
          else if (action.message._tag === "SequencedMessage") counters.dispatched++
          else counters.sent++
          context.post({ from: identity.address, to: action.to, message: action.message })
          break
        case "Audit":
          context.runFork(Effect.forEach(action.workers, (worker) =>
            Effect.flatMap(verify(worker), (live) =>
              Effect.sync(() => context.dispatch({ _tag: "Audited", address: worker, live, now: context.now() }))), { discard: true }))
          break
        case "BindingEnded":
          ended(counters, settings.endpoint, action, context)
          break
        case "WakeAt":
          wakeAt(action.at, context)
          break
      }
      return true
    }

    const shell: ProducerShell.Shell<Machine.WorkState, A> = yield* ProducerShell.make<Machine.WorkState, Machine.WorkEvent, Machine.WorkAction, A>({
      identity,
      system,
      hooks,
      codec,
      durable: config.durable,
      retryIntervalMs,
      drainTimeout: settings.drainTimeout,
      counters,
      machine,
      initial: () => Machine.initial(config),
      verify,
      lane: settings.durableQueue === undefined ? undefined : (context) => {
        const lane = WorkLane.make({
          queue: settings.durableQueue!,
          retry: settings.queueRetry,
          ...context.laneParts
        })
        return { drain: lane.drain, submit: (action) => lane.submit(action as WorkLane.LaneAction) }
      },
      laneActions,
      perform,
      metricCounts: metricCountsOf(counters),
      dropped: (reason) => {
        if (reason === "UnverifiedSender") counters.fenced++
        else counters.dropped++
      },
      // A first binding sets an audit deadline the idle timer must learn about.
      afterStep: (before, after) => {
        if (after.nextAuditAt !== undefined) shell.wakeTimer()
        observeConfirmed(before, after)
      }
    })

    return {
      ...shell,
      stats: () => ({
        sent: counters.sent + counters.dispatched,
        resent: counters.resent,
        confirmed: counters.confirmed,
        dropped: counters.dropped + counters.fenced,
        oldestUnconfirmedAgeMillis: ageOf(oldestTimes(shell.state()).unconfirmed, shell.now())
      }),
      workStats: () => statsOf(shell.state(), counters, shell.now()),
      gauges: () => gaugesOf(shell.state(), shell.now())
    }
  })
