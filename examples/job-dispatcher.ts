/**
 * A job dispatcher (`npx tsx examples/job-dispatcher.ts`): one work-pulling producer hands
 * thumbnail jobs to a pool of workers that changes while it runs. Three workers start; a fourth
 * joins; one slows down (it pulls less from then on); one dies mid-job (its unconfirmed jobs go
 * back to the pool and survivors redo them under their original ids). Two images are broken:
 * one fails twice and then works (retried with backoff, on whichever worker is free), the other
 * never works and is dead-lettered in the durable work queue after its attempts; once "fixed",
 * an operator call requeues it and it is done. At the end it prints what each worker did and
 * checks that every job was done.
 */
import { Console, Data, Deferred, Duration, Effect, ExecutionStrategy, Exit, Layer, Schedule, Schema, Scope } from "effect"
import { DurableQueue, ReliableSystem, Transport, WorkPulling } from "effect-reliable"

class ImageUnreadable extends Data.TaggedError("ImageUnreadable")<{ readonly imageId: number }> {}

/** Fails its first two attempts, then works. */
const flakyImage = 1_234
/** Fails until the operator has fixed it. */
const brokenImage = 2_345

const Thumbnail = Schema.Struct({ imageId: Schema.Number, width: Schema.Int })

const jobs = 4_000

const started = Date.now()
const at = (millis: number) => Effect.sleep(Duration.millis(Math.max(0, started + millis - Date.now())))
const say = (text: string) => Console.log(`  ${String(Date.now() - started).padStart(5)} ms  ${text}`)

const program = Effect.gen(function*() {
  const programScope = yield* Effect.scope
  // A memory work queue keeps the example self-contained; `DurableQueue.makeWorkSql` on SQLite
  // or PostgreSQL behaves the same and survives a process restart.
  const queue = yield* DurableQueue.makeWorkMemory
  const dispatcher = yield* WorkPulling.producer({
    name: "job-dispatcher",
    payload: Thumbnail,
    durableWorkQueue: queue,
    // Also how often bound workers are re-checked: a dead worker's jobs come back within this.
    retryInterval: "100 millis"
  })

  // Every job done, by worker; `finished` keys by messageId, the stable deduplication key.
  const doneBy: Record<string, number> = {}
  const finished = new Set<string>()
  let redone = 0
  const allDone = yield* Deferred.make<void>()
  const workMs: Record<string, number> = {}
  let brokenFixed = false

  /** A worker in its own scope: closing the scope is the worker dying. */
  const startWorker = (name: string, millisPerJob: number) =>
    Effect.gen(function*() {
      workMs[name] = millisPerJob
      doneBy[name] = 0
      // A child of the program's scope: the program's end closes every worker still running.
      const scope = yield* Scope.fork(programScope, ExecutionStrategy.sequential)
      const worker = yield* WorkPulling.worker({
        name,
        producer: "job-dispatcher",
        payload: Thumbnail,
        window: 10,
        resendInterval: "200 millis",
        // A failed job goes back to the dispatcher and runs again after 100 ms, then 200 ms;
        // after its third failed attempt it is dead-lettered.
        retry: Schedule.exponential("100 millis"),
        maxAttempts: 3
      }).pipe(Scope.extend(scope))
      yield* Effect.forkIn(worker.run((delivery) =>
        Effect.gen(function*() {
          const { imageId } = delivery.payload
          const broken = (imageId === flakyImage && delivery.attempt <= 2) || (imageId === brokenImage && !brokenFixed)
          if (imageId === flakyImage || imageId === brokenImage) {
            yield* say(`image ${imageId}, attempt ${delivery.attempt} on ${name}: ${broken ? "failed" : "done"}`)
          }
          if (broken) return yield* new ImageUnreadable({ imageId })
          yield* Effect.sleep(Duration.millis(workMs[name]))
          doneBy[name]++
          if (finished.has(delivery.messageId)) redone++
          finished.add(delivery.messageId)
          if (finished.size === jobs) Deferred.unsafeDone(allDone, Effect.void)
        })
      ), scope)
      return scope
    })


  yield* Console.log(`dispatching ${jobs} thumbnail jobs to a changing pool of workers`)
  yield* startWorker("worker-1", 2)
  yield* startWorker("worker-2", 2)
  const doomed = yield* startWorker("worker-3", 2)
  yield* say("worker-1, worker-2 and worker-3 started (2 ms per job)")

  yield* Effect.forkScoped(Effect.forEach(
    Array.from({ length: jobs }, (_, imageId) => imageId),
    (imageId) => dispatcher.send({ imageId, width: 256 }, { messageId: `thumbnail-${imageId}` }),
    { discard: true }
  ))

  yield* at(400)
  yield* startWorker("worker-4", 2)
  yield* say("worker-4 joined")
  yield* at(800)
  workMs["worker-2"] = 30
  yield* say("worker-2 slowed down to 30 ms per job")
  yield* at(1_200)
  const before = yield* WorkPulling.stats("job-dispatcher")
  const held = before.perWorker.find((worker) => worker.worker === "worker-3")?.inFlight ?? 0
  yield* Scope.close(doomed, Exit.void)
  yield* say(`worker-3 died holding ${held} unconfirmed job(s)`)

  // The broken image has used its three attempts by now: it waits in the queue's dead letters.
  const deadLetters = yield* waitForDeadLetter(queue)
  for (const letter of deadLetters) {
    yield* say(`dead letter: ${letter.messageId} after ${letter.attempts} attempts (${letter.lastError.split("\n")[0]})`)
  }
  brokenFixed = true
  for (const letter of deadLetters) yield* DurableQueue.requeueDeadLetter(queue, letter.messageId)
  yield* say("the operator fixed the image and requeued the dead letter")

  yield* Deferred.await(allDone).pipe(
    Effect.timeoutFail({ duration: Duration.seconds(30), onTimeout: () => new Error("the jobs were not all done within 30s") })
  )
  yield* say("every job done")
  const stats = yield* WorkPulling.stats("job-dispatcher")

  yield* Console.log("")
  yield* Console.log("jobs done per worker:")
  for (const [name, count] of Object.entries(doneBy)) yield* Console.log(`  ${name}: ${String(count).padStart(5)}`)
  yield* Console.log(`distinct jobs done: ${finished.size} of ${jobs}; done again after requeue: ${redone}`)
  yield* Console.log(`requeued by the dispatcher: ${stats.requeued}; workers now bound: ${stats.workers}`)
  if (finished.size !== jobs) return yield* Effect.fail(new Error("some jobs were lost"))
})

/** The dead letters once there is one (bounded: the broken image fails within a second or two). */
const waitForDeadLetter = (queue: DurableQueue.DurableWorkQueueService) =>
  DurableQueue.deadLetters(queue, { limit: 10 }).pipe(
    Effect.filterOrFail((letters) => letters.length > 0, () => "none yet"),
    Effect.retry({ schedule: Schedule.spaced("50 millis"), while: (error) => error === "none yet" }),
    Effect.timeoutFail({ duration: Duration.seconds(20), onTimeout: () => new Error("no dead letter within 20s") })
  )

const layer = ReliableSystem.layer().pipe(Layer.provideMerge(Transport.layerMemory))

Effect.runPromise(program.pipe(Effect.scoped, Effect.provide(layer))).catch((error) => {
  console.error(error)
  process.exit(1)
})
