/**
 * The fiber shell around `WorkPullingMachine`: it owns the controller's inbox, its timer (grant
 * retries and worker audits), the resolver lookups that fence registrations and audit bindings,
 * and (when durable) the work-queue lane. Endpoint calls fold in the caller's fiber
 * (`internal/ProducerCalls`), exactly as for a point-to-point producer.
 */
import { Duration, Effect, FiberSet } from "effect"
import type { Scope } from "effect"
import type { EndpointRecord } from "../internal/EndpointRegistry.js"
import type { StopOutcome } from "../internal/StopOutcome.js"
import { sameAddress } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import type { PayloadCodec } from "../Protocol/PayloadCodec.js"
import type { Envelope } from "../Protocol/WireMessage.js"
import type { SystemInternals } from "../internal/SystemInternals.js"
import type { DurableWorkQueueService } from "../DurableQueue/DurableWorkQueue.js"
import * as DeadlineTimer from "./internal/DeadlineTimer.js"
import type { QueueRetryPolicy } from "./internal/LaneRunner.js"
import * as ProducerCalls from "./internal/ProducerCalls.js"
import * as WireInput from "./internal/WireInput.js"
import type { ProducerController, ProducerHooks } from "./ProducerController.js"
import * as WorkLane from "./WorkLane.js"
import * as Machine from "./WorkPullingMachine.js"

export interface WorkPullingSettings {
  readonly endpoint: string
  readonly deliveryConfirmation: boolean
  /** Grant retry cadence; bound workers are re-verified at the same cadence. */
  readonly retryInterval: Duration.Duration
  readonly durableQueue: DurableWorkQueueService | undefined
  readonly queueRetry: QueueRetryPolicy
}

/** One bound worker as the controller sees it. */
export interface WorkerStats {
  /** The worker endpoint's name. */
  readonly worker: string
  /** Jobs sent to the worker and not confirmed yet. */
  readonly inFlight: number
  /** Jobs the worker asked for beyond those it holds. */
  readonly freeDemand: number
  /** Jobs sent to this binding since it was made. */
  readonly dispatched: number
}

export interface WorkPullingStats {
  /** Workers bound now. */
  readonly workers: number
  /** Accepted jobs no worker holds. */
  readonly pending: number
  /** Each bound worker, in round-robin order. */
  readonly perWorker: ReadonlyArray<WorkerStats>
  /** Jobs sent to workers (a requeued job counts again). */
  readonly dispatched: number
  /** Jobs confirmed by workers (a job confirmed again after a reload counts again). */
  readonly confirmed: number
  /** Jobs put back into the pool because their binding ended. */
  readonly requeued: number
  /** Registrations the resolver did not vouch for, dropped without an answer. */
  readonly fenced: number
  /** Bindings ended because their worker's endpoint was gone. */
  readonly workersGone: number
  /** Bindings ended because a new incarnation of the worker registered. */
  readonly workersReplaced: number
  /** Bindings ended because their worker broke the protocol. */
  readonly violations: number
  /** Other inputs ignored as stale or unbound. */
  readonly dropped: number
}

export interface WorkPullingController<A> extends ProducerController<A> {
  readonly workStats: () => WorkPullingStats
}

/** Accepts a controller only if the resolver names it as the live controller of a worker configured for us. */
export const verifyWorker = (record: EndpointRecord | undefined, producer: string, sender: ControllerAddress): boolean =>
  record !== undefined && record.kind === "Worker" && record.peer === producer && sameAddress(record.address, sender)

export const make = <A>(
  settings: WorkPullingSettings,
  codec: PayloadCodec<A>,
  system: SystemInternals,
  hooks: ProducerHooks
): Effect.Effect<WorkPullingController<A>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const incarnation = system.newId()
    const address: ControllerAddress = { node: system.transport.node, endpoint: settings.endpoint, incarnation }
    const clock = yield* Effect.clock
    const runFork = yield* FiberSet.makeRuntime<never>()
    const retryIntervalMs = Duration.toMillis(settings.retryInterval)
    const config: Machine.WorkConfig = {
      endpoint: settings.endpoint,
      incarnation,
      sessionId: system.newId(),
      deliveryConfirmation: settings.deliveryConfirmation,
      retryIntervalMs,
      auditIntervalMs: retryIntervalMs,
      durable: settings.durableQueue !== undefined
    }
    const counters = {
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
    }
    const now = () => clock.unsafeCurrentTimeMillis()
    const timer = DeadlineTimer.make()
    let state: Machine.WorkState
    let stoppedWith: StopOutcome | undefined
    // Set when the controller's scope closes (a respawn, or the endpoint's end): from then on it
    // takes no call and folds no event, like a stopped one, though nobody is told it stopped.
    let closed = false
    const finished = () => closed || stoppedWith !== undefined

    const stop = (outcome: StopOutcome) => {
      if (finished()) return
      stoppedWith = outcome
      calls.abandon()
      hooks.stopped(outcome)
    }

    const lane = settings.durableQueue === undefined ? undefined : WorkLane.make({
      queue: settings.durableQueue,
      retry: settings.queueRetry,
      runFork,
      completed: (event) => void dispatch(event(now())),
      failed: (stage, cause, terminal) => {
        if (terminal) dispatch({ _tag: "Fail", stage, cause })
        else stop({ _tag: "Restart", cause })
      }
    })

    const verify = (worker: ControllerAddress) =>
      Effect.map(system.lookup(worker.endpoint), (record) => verifyWorker(record, settings.endpoint, worker))

    const ended = (action: Extract<Machine.WorkAction, { readonly _tag: "BindingEnded" }>) => {
      counters.requeued += action.requeued
      if (action.reason === "Gone") counters.workersGone++
      else if (action.reason === "Replaced") counters.workersReplaced++
      else {
        counters.violations++
        runFork(Effect.logWarning(
          `work-pulling producer "${settings.endpoint}": worker ${action.worker.endpoint} broke the protocol; ` +
            `its binding ended and ${action.requeued} job(s) went back to the pool`,
          action.cause
        ))
      }
    }

    const perform = (actions: ReadonlyArray<Machine.WorkAction>) => {
      let envelopes: Array<Envelope> | undefined
      for (const action of actions) {
        switch (action._tag) {
          case "Send":
          case "Resend":
            if (action._tag === "Resend") counters.resent++
            else if (action.message._tag === "SequencedMessage") counters.dispatched++
            else counters.sent++
            ;(envelopes ??= []).push({ from: address, to: action.to, message: action.message })
            break
          case "Offer":
            hooks.offerGrant(action.grant)
            timer.wake()
            break
          case "Answer":
            calls.settle(action)
            break
          case "Completed":
          case "AckRejected":
            break
          case "Verify":
            runFork(Effect.flatMap(verify(action.address), (ok) =>
              Effect.sync(() => dispatch({ _tag: "Verified", address: action.address, nonce: action.nonce, ok, now: now() }))))
            break
          case "Audit":
            runFork(Effect.forEach(action.workers, (worker) =>
              Effect.flatMap(verify(worker), (live) =>
                Effect.sync(() => dispatch({ _tag: "Audited", address: worker, live, now: now() }))), { discard: true }))
            break
          case "Notify":
            counters.confirmed += action.confirmed.length
            hooks.notify(action.confirmed)
            break
          case "Confirmed":
            counters.confirmed += action.count
            break
          case "Load":
          case "Store":
          case "Accept":
          case "ConfirmJobs":
            lane?.submit(action)
            break
          case "BindingEnded":
            ended(action)
            break
          case "Fail":
            stop({ _tag: "Terminal", stage: action.stage, cause: action.cause })
            break
          case "Dropped":
            if (action.reason === "UnverifiedSender") counters.fenced++
            else counters.dropped++
            break
        }
      }
      if (envelopes !== undefined) system.transport.post(envelopes)
    }

    const dispatch = (event: Machine.WorkEvent): ReadonlyArray<Machine.WorkAction> => {
      if (finished()) return []
      const next = Machine.step(state, event)
      state = next.state
      perform(next.actions)
      // A first binding sets an audit deadline the idle timer must learn about.
      if (state.nextAuditAt !== undefined) timer.wake()
      return next.actions
    }

    const calls: ProducerCalls.Calls<A> = ProducerCalls.make({
      endpoint: settings.endpoint,
      codec,
      durable: config.durable,
      now,
      stopped: finished,
      check: (grant, messageId, payload) => Machine.checkProduced(state, grant, messageId, payload),
      answeredBefore: (grant, messageId) => Machine.answeredBefore(state, grant, messageId),
      dispatch
    })
    // Closing the scope ends the controller and releases every waiting caller. A call made after
    // that (a fiber that took this controller's grant just before the respawn) must be refused at
    // once: folded, it would start a store no fiber runs any more and wait for it forever.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
        calls.abandon()
      })
    )

    const started = Machine.initial(config)
    state = started.state
    perform(started.actions)

    yield* WireInput.attach(system.transport, address, WireInput.fromConsumer, dispatch, counters, now)
    yield* timer.run({ tick: () => void dispatch({ _tag: "Tick", now: now() }), deadline: () => Machine.nextDeadline(state), now, recheckMs: retryIntervalMs })

    const workStats = (): WorkPullingStats => ({
      workers: state.bindings.length,
      pending: state.pool.length,
      perWorker: state.bindings.map((binding) => ({
        worker: binding.address.endpoint,
        inFlight: binding.unconfirmed.length,
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
      dropped: counters.dropped
    })

    return {
      address,
      running: () => !finished(),
      produce: calls.produce,
      produceAll: calls.produceAll,
      storedAck: calls.storedAck,
      ackAll: calls.ackAll,
      sendNow: calls.sendNow,
      handshake: () => state.handshake,
      freeDemand: () => Machine.openDemand(state),
      stats: () => ({ sent: counters.sent + counters.dispatched, resent: counters.resent, confirmed: counters.confirmed, dropped: counters.dropped + counters.fenced }),
      workStats
    }
  })
