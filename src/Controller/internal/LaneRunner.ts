/**
 * The one-at-a-time runner under every durable lane (producer queue and work queue): handshake
 * operations (load, store, accept) run one at a time in submission order, and the lane's deferred
 * work (coalesced confirmations) either after them or, with `concurrentDeferred`, beside them;
 * every queue call has a timeout and is retried under the queue retry policy; `QueueFenced` and
 * `QueueConflict` are terminal.
 *
 * Backend trouble never makes a flow terminal. A call that still fails after its retries makes
 * the endpoint degraded (one event) and asks the controller to restart; the new controller's
 * load is retried for as long as it takes, under an exponential backoff with a cap, so the flow
 * resumes by itself within about one backoff step of the backend answering again. The first
 * call that succeeds makes the endpoint healthy again (one event). After a failure the lane runs
 * nothing more: its controller is being replaced.
 */
import { Duration, Effect, Schedule } from "effect"
import type { Fiber } from "effect"
import * as EndpointHealth from "../../internal/EndpointHealth.js"
import * as CallTimeouts from "./CallTimeouts.js"
import { Signal } from "../../internal/Signal.js"
import type { QueueMetrics } from "../../Observability/Metrics.js"
import * as Tracing from "../../Observability/Tracing.js"
import type { HealthReporter } from "../../internal/EndpointHealth.js"
import { DefaultQueueBackoff, DefaultQueueTimeout } from "../../Protocol/Config.js"
import type { ReliableDeliveryStage } from "../../Protocol/Failure.js"
import { isTerminal, QueueBackendError } from "../../DurableQueue/QueueErrors.js"
import type { DurableQueueError, QueueRejected } from "../../DurableQueue/QueueErrors.js"

export interface QueueRetryPolicy {
  /** Attempts of one call before the controller restarts (a load goes on retrying instead). */
  readonly attempts: number
  /** The pause between those attempts. */
  readonly interval: Duration.Duration
  /** A call not answered within this long counts as backend trouble (default 5 seconds). */
  readonly timeout?: Duration.Duration | undefined
  /** A load still failing after its attempts is retried from `initial`, doubling up to `max`. */
  readonly backoff?: { readonly initial: Duration.Duration; readonly max: Duration.Duration } | undefined
}

/**
 * Runs one queue call under the retry policy; `onDone` gets its result. `messages` are those the
 * call stores, when it stores any: its span goes into their senders' traces.
 */
export type Guard = <A>(
  stage: ReliableDeliveryStage,
  effect: Effect.Effect<A, DurableQueueError>,
  onDone: (value: A) => void,
  messages?: ReadonlyArray<{ readonly trace?: string | undefined }>
) => Effect.Effect<void>

export interface RunnerOptions<Op> {
  readonly retry: QueueRetryPolicy
  readonly runFork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>
  /** A durable operation failed for good: terminal, or to be healed by a controller restart. */
  readonly failed: (stage: ReliableDeliveryStage, cause: unknown, terminal: boolean) => void
  /** Told when the backend stops and starts answering (default: nobody). */
  readonly health?: HealthReporter | undefined
  /** Counts every queue call's attempts and failures (default: nothing counted). */
  readonly metrics?: QueueMetrics | undefined
  /** Performs one operation; every queue call in it goes through `guard`. */
  readonly run: (op: Op, guard: Guard) => Effect.Effect<void>
  /** Takes the lane's deferred work when no handshake operation waits (undefined: none). */
  readonly takeDeferred: () => Op | undefined
  /**
   * Deferred work waits until the lane has been idle this long (default 0: at once), but never
   * longer than `deferredMaxWaitMs` in all. A producer's next store follows its accept within
   * microseconds; without the pause the watermark write slips in between, a third transaction
   * per message.
   */
  readonly deferredIdleMs?: number
  readonly deferredMaxWaitMs?: number
  /** Whether deferred work is pending (required with `deferredIdleMs`, and for `drain`). */
  readonly hasDeferred?: () => boolean
  /** The controller's clock, for `deferredMaxWaitMs`. */
  readonly now?: () => number
  /**
   * Deferred work runs beside the handshake operations (still one deferred operation at a time)
   * instead of waiting for the lane to be free; default false. For work no handshake operation
   * waits on, such as confirmations, on a queue whose writes may overlap. It keeps the pace that
   * `deferredIdleMs` and `deferredMaxWaitMs` set.
   */
  readonly concurrentDeferred?: boolean
}

export interface Runner<Op> {
  /** Queues a handshake operation. */
  readonly enqueue: (op: Op) => void
  /** Deferred work was added: run it if the lane is free. */
  readonly kick: () => void
  /**
   * Graceful shutdown: runs deferred work at once (no waiting for a pause) and completes when
   * nothing is queued or running any more (or the lane has failed). Bound it with a timeout.
   */
  readonly drain: Effect.Effect<void>
}

const retriable = (error: DurableQueueError) => !isTerminal(error) && error._tag !== "QueueChunkedBatch" && error._tag !== "QueueRejected"

/**
 * Retries backend errors under the policy; terminal errors, refusals and chunked-batch answers
 * pass at once. The first attempt runs bare: the retry schedule is set up only after a failure.
 */
export const retrying = <A, E extends DurableQueueError>(retry: QueueRetryPolicy, effect: Effect.Effect<A, E>): Effect.Effect<A, E> => {
  if (retry.attempts <= 1) return effect
  // Built only after a failure: making the Schedule and the retry costs every call otherwise.
  return Effect.catchIf(effect, (error: E) => retriable(error), () =>
    Effect.zipRight(
      Effect.sleep(retry.interval),
      Effect.retry(effect, { schedule: Schedule.spaced(retry.interval), times: retry.attempts - 2, while: retriable })
    ))
}

/** A store the queue refused for its content (`QueueRejected`): an answer, not a failure. */
export class Refusal {
  constructor(readonly cause: QueueRejected) {}
}

/** Turns a refusal into a value, so the lane answers the store instead of retrying it. */
export const refusable = <A, E extends DurableQueueError>(effect: Effect.Effect<A, E>): Effect.Effect<A | Refusal, Exclude<E, QueueRejected>> =>
  Effect.catchIf(
    effect,
    (error): error is Extract<E, QueueRejected> => error._tag === "QueueRejected",
    (error) => Effect.succeed(new Refusal(error as QueueRejected))
  ) as unknown as Effect.Effect<A | Refusal, Exclude<E, QueueRejected>>

/** Exponential from `initial`, never more than `max` apart. */
export const backoffSchedule = (backoff: NonNullable<QueueRetryPolicy["backoff"]>): Schedule.Schedule<unknown> =>
  Schedule.exponential(backoff.initial).pipe(Schedule.union(Schedule.spaced(backoff.max)))

/** A queue call without an answer in time: backend trouble, like a refused connection. */
export const timeoutError = (timeout: Duration.Duration, stage: ReliableDeliveryStage) =>
  new QueueBackendError({ operation: stage.toLowerCase(), cause: new Error(`no answer within ${Duration.format(timeout)}`) })

/**
 * Runs one durable operation under the lane's rules: a timeout on every call, retries (a load is
 * retried for as long as it takes, degraded meanwhile), and on a final failure `gaveUp` then
 * `failed`.
 */
const makeGuard = <Op>(options: RunnerOptions<Op>, gaveUp: () => void): Guard => {
  const health = options.health ?? EndpointHealth.silent
  const timeout = options.retry.timeout ?? DefaultQueueTimeout
  const backoff = backoffSchedule(options.retry.backoff ?? DefaultQueueBackoff)

  /** After its attempts, under the backoff, degraded meanwhile. */
  const healing = <A>(stage: ReliableDeliveryStage, attempt: Effect.Effect<A, DurableQueueError>) =>
    Effect.catchIf(retrying(options.retry, attempt), retriable, (error) =>
      Effect.zipRight(
        Effect.sync(() => health.degraded(stage, error)),
        Effect.retry(attempt, { schedule: backoff, while: retriable })
      ))

  const timeouts = CallTimeouts.make(timeout, options.runFork)
  const timedOut = (stage: ReliableDeliveryStage) => () => timeoutError(timeout, stage)
  /**
   * A call without an answer in time is backend trouble: the endpoint is degraded at its deadline,
   * not once the driver lets go of it (`CallTimeouts`), which can take seconds more.
   */
  const overdue = (stage: ReliableDeliveryStage) => () => health.degraded(stage, timeoutError(timeout, stage))

  const metrics = options.metrics
  /** One attempt of a queue call, counted. */
  const counted = <A>(stage: ReliableDeliveryStage, effect: Effect.Effect<A, DurableQueueError>) => {
    if (metrics === undefined) return effect
    const operation = stage.toLowerCase()
    return Effect.zipRight(
      Effect.sync(() => metrics.attempt(operation)),
      Effect.tapError(effect, () => Effect.sync(() => metrics.failure(operation)))
    )
  }

  return (stage, effect, onDone, messages) => {
    // A backend silent for a whole timeout is an outage already: the endpoint is degraded from
    // the first timeout, not only once the call's retries (each as long again) are spent.
    const attempt = counted(stage, timeouts.timed(effect, timedOut(stage), overdue(stage)))
    const guarded = Effect.matchEffect(stage === "Load" ? healing(stage, attempt) : retrying(options.retry, attempt), {
      onSuccess: (value) =>
        Effect.sync(() => {
          health.healthy()
          onDone(value)
        }),
      onFailure: (error) =>
        Effect.sync(() => {
          gaveUp()
          const terminal = isTerminal(error)
          if (!terminal) health.degraded(stage, error)
          options.failed(stage, error, terminal)
        })
    })
    // One span per call, its retries included: in the trace of the sends it stores, else a root.
    return Tracing.withQueueSpan(stage.toLowerCase(), messages, guarded)
  }
}

/** Runs operations one at a time; `ended` is called when one has ended, however it ended. */
interface Worker<Op> {
  readonly give: (op: Op, ended: () => void) => void
}

interface Job<Op> {
  readonly op: Op
  readonly ended: () => void
}

/**
 * One long-lived fiber that runs a lane's operations, one at a time: a fiber forked per operation
 * cost a one-at-a-time durable `send` about 15 µs of CPU. The lane gives it an operation only
 * when the previous one has ended, so it holds at most one. It is forked with `runFork` at the
 * first operation, so the controller's scope owns it: closing the scope interrupts it, and with
 * it the running operation (whose `ended` still runs), as it interrupted the operation's own
 * fiber before.
 *
 * An operation starts on a later turn than the one that gave it: `give` may run inside a machine
 * fold, and a queue that answers synchronously (the memory queues) must not fold its completion
 * into that same fold. A waiting worker is resumed on a later turn; one given its next operation
 * while it runs (from `ended`) yields first.
 *
 * Once the fiber has ended (its scope closed, or closed before it was forked), an operation given
 * to it never runs: its `ended` is called at once, so the lane does not count it as running and a
 * drain does not wait for it.
 */
const makeWorker = <Op>(
  runFork: RunnerOptions<Op>["runFork"],
  perform: (op: Op) => Effect.Effect<void>
): Worker<Op> => {
  let pending: Job<Op> | undefined
  let waiting: ((job: Effect.Effect<Job<Op>>) => void) | undefined
  let started = false
  let gone = false

  const fiberEnded = () => {
    gone = true
    const job = pending
    pending = undefined
    job?.ended()
  }

  // A defect ends the operation, not the lane: it is logged at the level Effect logs an
  // operation fiber's unhandled error (Debug), and the next operation runs.
  const runJob = (job: Job<Op>, yieldFirst: boolean): Effect.Effect<void> => {
    const performed = Effect.catchAllCause(perform(job.op), (cause) => Effect.logDebug("A durable lane operation died", cause))
    return Effect.ensuring(yieldFirst ? Effect.zipRight(Effect.yieldNow(), performed) : performed, Effect.sync(job.ended))
  }

  const awaitJob = Effect.async<Job<Op>>((resume) => {
    waiting = resume
    return Effect.sync(() => {
      waiting = undefined
    })
  })

  const loop: Effect.Effect<void> = Effect.zipRight(
    Effect.suspend(() => {
      const job = pending
      if (job === undefined) return Effect.flatMap(awaitJob, (given) => runJob(given, false))
      pending = undefined
      return runJob(job, true)
    }),
    Effect.suspend(() => loop)
  )

  return {
    give: (op, ended) => {
      if (gone) return ended()
      const resume = waiting
      if (resume !== undefined) {
        waiting = undefined
        return resume(Effect.succeed({ op, ended }))
      }
      pending = { op, ended }
      if (started) return
      started = true
      runFork(loop).addObserver(fiberEnded)
    }
  }
}

export const make = <Op>(options: RunnerOptions<Op>): Runner<Op> => {
  const ops: Array<Op> = []
  let busy = false
  let deferredBusy = false
  let dead = false
  const guard = makeGuard(options, () => {
    dead = true
  })

  const idleMs = options.deferredIdleMs ?? 0
  const maxWaitMs = options.deferredMaxWaitMs ?? 1000
  const now = options.now ?? Date.now
  let deferredSince: number | undefined
  /** When an operation last started or ended: the lane has paused since then. */
  let lastActive = 0
  /** When the earliest sleeping fiber wakes to look at deferred work again (never interrupted). */
  let wakeDue: number | undefined
  /** Shutting down: deferred work runs at once. */
  let draining = false
  const quiet = new Signal()
  const isQuiet = () => dead || (!busy && !deferredBusy && ops.length === 0 && options.hasDeferred?.() !== true)

  const perform = (op: Op) => options.run(op, guard)
  const worker = makeWorker(options.runFork, perform)
  // Deferred work beside the handshake operations has a worker of its own.
  const besideWorker = options.concurrentDeferred === true ? makeWorker(options.runFork, perform) : worker

  const run = (op: Op): void => {
    busy = true
    if (idleMs > 0) lastActive = now()
    worker.give(op, () => {
      busy = false
      if (idleMs > 0) lastActive = now()
      next()
    })
  }

  const runBeside = (): void => {
    deferredSince = undefined
    const op = options.takeDeferred()
    if (op === undefined) return
    deferredBusy = true
    besideWorker.give(op, () => {
      deferredBusy = false
      next()
    })
  }

  const runDeferred = (): void => {
    deferredSince = undefined
    const op = options.takeDeferred()
    if (op !== undefined) run(op)
  }

  const next = (): void => {
    advance()
    if (isQuiet()) quiet.fire()
  }

  /**
   * Looks again at `due`: one sleeping fiber per pause, not one per operation (a fiber asleep
   * until then or earlier will do; one that would wake later does not).
   */
  const wakeAt = (due: number, time: number): void => {
    if (wakeDue !== undefined && wakeDue <= due) return
    wakeDue = due
    options.runFork(Effect.flatMap(Effect.sleep(Duration.millis(due - time)), () =>
      Effect.sync(() => {
        if (wakeDue === due) wakeDue = undefined
        next()
      })))
  }

  /**
   * Beside the handshake operations, deferred work keeps the same pace as on a one-at-a-time
   * lane (a pause of `idleMs`, at most `maxWaitMs`), only it no longer waits for the running
   * operation to end.
   */
  const advanceConcurrent = (): void => {
    if (!busy && ops.length > 0) run(ops.shift()!)
    if (deferredBusy) return
    if (idleMs <= 0 || draining) return runBeside()
    if (options.hasDeferred?.() !== true) return
    const time = now()
    deferredSince ??= time
    // A running operation is no pause: only the longest wait can make the work due meanwhile.
    const due = busy ? deferredSince + maxWaitMs : Math.min(lastActive + idleMs, deferredSince + maxWaitMs)
    if (time >= due) return runBeside()
    wakeAt(due, time)
  }

  const advance = (): void => {
    if (dead) return
    if (options.concurrentDeferred === true) return advanceConcurrent()
    if (busy) return
    if (idleMs <= 0 || draining) return ops.length > 0 ? run(ops.shift()!) : runDeferred()
    if (options.hasDeferred?.() !== true) return ops.length > 0 ? run(ops.shift()!) : undefined
    // Deferred work waits for the lane to pause for `idleMs`, but never longer than `maxWaitMs`:
    // a lane whose next operation is always queued (a sendAll of many grants) still gets to it.
    const time = now()
    deferredSince ??= time
    if (ops.length > 0) return time >= deferredSince + maxWaitMs ? runDeferred() : run(ops.shift()!)
    const due = Math.min(lastActive + idleMs, deferredSince + maxWaitMs)
    if (time >= due) return runDeferred()
    wakeAt(due, time)
  }

  const drain: Effect.Effect<void> = Effect.suspend(() => {
    draining = true
    next()
    const wait: Effect.Effect<void> = Effect.suspend(() => isQuiet() ? Effect.void : Effect.zipRight(quiet.next(), wait))
    return wait
  })

  return {
    enqueue: (op) => {
      ops.push(op)
      next()
    },
    kick: next,
    drain
  }
}
