/**
 * A randomized work-pulling run derived from one seed: a lossy, duplicating, reordering
 * transport; workers that join and leave at random; producer restarts over a durable work queue
 * (sometimes a flaky one). The guarantees: every job is done at least once, and exactly once on
 * runs without faults.
 */
import { Effect, Exit, Layer, Scope, TestClock } from "effect"
import { Schema } from "effect"
import * as FlakyQueue from "../../src/DurableQueue/FlakyQueue.js"
import * as MemoryWorkQueue from "../../src/DurableQueue/MemoryWorkQueue.js"
import * as SeededRandom from "../../src/internal/SeededRandom.js"
import type * as Producer from "../../src/Producer.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as FaultyTransport from "../../src/Transport/FaultyTransport.js"
import * as WorkPulling from "../../src/WorkPulling.js"
import { advanceBy, advanceUntil, settle } from "./Harness.js"

const Job = Schema.Struct({ n: Schema.Number })
type Job = typeof Job.Type

export interface WorkPlan {
  readonly seed: number
  /** Transport faults, worker departures and producer restarts; false: a clean run. */
  readonly faults: boolean
  readonly jobs: number
  readonly durable: boolean
  /** A share of durable operations that fail with a backend error (healed by retries or a restart). */
  readonly flakyQueue: number
  readonly drop: number
  readonly duplicate: number
  readonly reorder: number
  readonly initialWorkers: number
  readonly maxWorkers: number
  /** Per 50ms step: the chance a worker joins. */
  readonly joinChance: number
  /** Jobs done after which a random worker leaves (its scope closes), ascending. */
  readonly leavesAfter: ReadonlyArray<number>
  /** Jobs done after which the producer is respawned (a crash and restart), ascending. */
  readonly restartsAfter: ReadonlyArray<number>
}

const thresholds = (random: SeededRandom.SeededRandom, jobs: number, count: number) =>
  Array.from({ length: count }, () => random.int(Math.floor(jobs * 0.1), Math.floor(jobs * 0.7))).sort((a, b) => a - b)

/** Derives a whole run from one seed. */
export const planFor = (seed: number, faults: boolean): WorkPlan => {
  const random = SeededRandom.make(seed)
  const durable = faults || random.chance(0.5)
  const jobs = random.int(40, 90)
  return {
    seed,
    faults,
    jobs,
    durable,
    flakyQueue: faults && random.chance(0.5) ? 0.02 + random.next() * 0.08 : 0,
    drop: faults ? 0.05 + random.next() * 0.25 : 0,
    duplicate: faults ? random.next() * 0.15 : 0,
    reorder: faults ? random.next() * 0.25 : 0,
    initialWorkers: random.int(1, 3),
    maxWorkers: random.int(3, 5),
    joinChance: 0.05 + random.next() * 0.1,
    leavesAfter: faults ? thresholds(random, jobs, random.int(1, 3)) : [],
    restartsAfter: faults ? thresholds(random, jobs, random.int(1, 2)) : []
  }
}

export interface Done {
  readonly worker: string
  readonly messageId: string
}

export interface RunResult {
  readonly done: ReadonlyArray<Done>
  readonly restarts: number
  readonly workersStarted: number
  /** The largest number of jobs any binding held beyond its worker's window (must be 0). */
  readonly overWindow: number
}

interface LiveWorker {
  readonly name: string
  readonly window: number
  readonly scope: Scope.CloseableScope
}

/** Runs one plan under TestClock; returns every job completion, in order. */
export const runPlan = (plan: WorkPlan) =>
  Effect.gen(function*() {
    const random = SeededRandom.make(plan.seed ^ 0x5eed)
    const done: Array<Done> = []
    const doneIds = new Set<string>()
    const ids = Array.from({ length: plan.jobs }, (_, n) => `job-${n}`)
    const queue = plan.durable ? yield* MemoryWorkQueue.makeWorkMemory : undefined
    const durableWorkQueue = queue === undefined || plan.flakyQueue === 0
      ? queue
      : yield* FlakyQueue.flakyWorkQueue(queue, { seed: plan.seed, failureRate: plan.flakyQueue, failLoad: false })
    const producer: Producer.Producer<Job> = yield* WorkPulling.producer({
      name: "dispatcher",
      payload: Job,
      retryInterval: "50 millis",
      queueRetry: { attempts: 3, interval: "10 millis" },
      ...(durableWorkQueue === undefined ? {} : { durableWorkQueue })
    })

    const workers: Array<LiveWorker> = []
    let started = 0
    const startWorker = Effect.gen(function*() {
      started++
      const name = `worker-${started}`
      const window = random.int(1, 8)
      const workMs = random.int(0, 15)
      const scope = yield* Scope.make()
      const worker = yield* WorkPulling.worker({ name, producer: "dispatcher", payload: Job, window, resendInterval: "100 millis" })
        .pipe(Scope.extend(scope))
      yield* Effect.forkIn(worker.run((delivery) =>
        Effect.zipRight(
          workMs > 0 ? Effect.sleep(workMs) : Effect.void,
          Effect.sync(() => {
            done.push({ worker: name, messageId: delivery.messageId })
            doneIds.add(delivery.messageId)
          })
        )
      ), scope)
      workers.push({ name, window, scope })
    })
    const stopWorker = (index: number) =>
      Effect.suspend(() => {
        const [worker] = workers.splice(index, 1)
        return Scope.close(worker.scope, Exit.void)
      })

    /** Submits, in order, every job not done yet (after a restart, a resubmission of what the old controller held). */
    const submit = (only: ReadonlyArray<string>) =>
      Effect.forkScoped(Effect.forEach(only, (messageId) => producer.send({ n: Number(messageId.slice(4)) }, { messageId }), { discard: true }))

    for (let index = 0; index < plan.initialWorkers; index++) yield* startWorker
    yield* submit(ids)

    let restarts = 0
    let overWindow = 0
    const system = yield* ReliableSystem.ReliableSystem
    const checkWindows = () => {
      const stats = Effect.runSync(Effect.provideService(WorkPulling.stats("dispatcher"), ReliableSystem.ReliableSystem, system))
      for (const bound of stats.perWorker) {
        const window = workers.find((worker) => worker.name === bound.worker)?.window
        if (window !== undefined) overWindow = Math.max(overWindow, bound.inFlight - window)
      }
    }
    const limit = Number(process.env.FAULT_LIMIT ?? 600_000)

    // The turbulent phase: workers come and go and the producer restarts as jobs get done.
    const leaves = [...plan.leavesAfter]
    const restartsDue = [...plan.restartsAfter]
    let steps = 0
    while ((leaves.length > 0 || restartsDue.length > 0 || doneIds.size < plan.jobs * 0.5) && doneIds.size < plan.jobs && steps < 4_000) {
      steps++
      yield* TestClock.adjust("50 millis")
      yield* settle
      checkWindows()
      if (workers.length < plan.maxWorkers && random.chance(plan.joinChance)) yield* startWorker
      if (leaves.length > 0 && doneIds.size >= leaves[0]) {
        leaves.shift()
        yield* stopWorker(random.int(0, workers.length - 1))
        if (workers.length === 0) yield* startWorker
      }
      if (restartsDue.length > 0 && doneIds.size >= restartsDue[0]) {
        restartsDue.shift()
        restarts++
        yield* ReliableSystem.respawn("dispatcher")
        yield* submit(ids.filter((id) => !doneIds.has(id)))
      }
    }
    // The calm phase: the survivors finish everything.
    if (workers.length === 0) yield* startWorker
    yield* advanceUntil(() => {
      checkWindows()
      return doneIds.size === plan.jobs
    }, 25, limit).pipe(
      Effect.tapError(() =>
        Effect.gen(function*() {
          const missing = ids.filter((id) => !doneIds.has(id))
          console.error(`work-pulling run stuck: done ${doneIds.size}/${plan.jobs}, missing ${missing.slice(0, 10).join(",")}`, yield* WorkPulling.stats("dispatcher"))
        })
      )
    )
    // Let in-flight confirmations settle, so a clean run would show any late duplicate.
    yield* advanceBy(1_000, 100)
    for (const worker of [...workers]) yield* Scope.close(worker.scope, Exit.void)
    return { done, restarts, workersStarted: started, overWindow } satisfies RunResult
  }).pipe(
    Effect.scoped,
    Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(FaultyTransport.layerFaulty({
      seed: plan.seed,
      drop: plan.drop,
      duplicate: plan.duplicate,
      reorder: plan.reorder,
      reorderWindow: "30 millis"
    }))))
  )

/** Checks the guarantees; returns a description of the first violation, or undefined. */
export const violation = (plan: WorkPlan, result: RunResult): string | undefined => {
  const seen = new Set(result.done.map((entry) => entry.messageId))
  for (let n = 0; n < plan.jobs; n++) {
    if (!seen.has(`job-${n}`)) return `job-${n} was never done`
  }
  if (result.overWindow > 0) return `a worker held ${result.overWindow} job(s) beyond its window`
  if (!plan.faults && result.done.length !== plan.jobs) {
    const counts = new Map<string, number>()
    for (const entry of result.done) counts.set(entry.messageId, (counts.get(entry.messageId) ?? 0) + 1)
    const twice = [...counts].filter(([, count]) => count > 1).map(([id]) => id)
    return `a clean run did ${result.done.length} jobs for ${plan.jobs}: done twice ${twice.slice(0, 10).join(",")}`
  }
  return undefined
}
