/**
 * Work-pulling with a durable work queue: a producer killed with jobs pending and dispatched
 * comes back and re-dispatches exactly the accepted, unconfirmed jobs (memory, SQLite file,
 * PostgreSQL); durable failures are terminal or heal by restart as in the seed's table.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Layer, Queue, Schema, Scope } from "effect"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { DurableWorkQueueService } from "../src/DurableQueue/DurableWorkQueue.js"
import * as MemoryWorkQueue from "../src/DurableQueue/MemoryWorkQueue.js"
import { QueueBackendError, QueueConflict } from "../src/DurableQueue/QueueErrors.js"
import type { DurableQueueError } from "../src/DurableQueue/QueueErrors.js"
import * as SqlWorkQueue from "../src/DurableQueue/SqlWorkQueue.js"
import { Produced } from "../src/Protocol/Contract.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { describePostgres, dropTables, pgClientLayer, probePostgres, uniqueSuffix } from "./DurableQueue/SqlTestSupport.js"
import { advanceByWithIo, advanceWithIo as advanceUntil } from "./support/IoClock.js"

const Job = Schema.Struct({ n: Schema.Number })
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))
const range = (count: number, from = 0) => Array.from({ length: count }, (_, index) => from + index)

interface Done {
  readonly worker: string
  readonly messageId: string
}

/**
 * The reload scenario. Three workers (window 3) take jobs; only the first four jobs are ever
 * finished, after that every handler hangs, so workers hold jobs unconfirmed. One more job is
 * stored through the contract but never acknowledged. A worker dies (its jobs go back to the
 * pool), then the producer is respawned and fresh workers join: they must get exactly the
 * accepted jobs that were not confirmed, each once, and the unacknowledged one never.
 */
const reloadScenario = (queue: DurableWorkQueueService) =>
  Effect.gen(function*() {
    const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job, durableWorkQueue: queue, retryInterval: "100 millis" })
    const done: Array<Done> = []
    let allowed = 4
    const scopes: Array<Scope.CloseableScope> = []
    const startWorker = (name: string, hang: boolean) =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        scopes.push(scope)
        // Hanging workers stand for dead ones: their scopes close at once, without a drain.
        const worker = yield* WorkPulling.worker({ name, producer: "dispatcher", payload: Job, window: 3, resendInterval: "200 millis", drainTimeout: 0 })
          .pipe(Scope.extend(scope))
        yield* Effect.forkIn(worker.run((delivery) =>
          Effect.suspend(() => {
            if (hang && allowed-- <= 0) return Effect.never
            done.push({ worker: name, messageId: delivery.messageId })
            return Effect.void
          })
        ), scope)
        return scope
      })

    for (const name of ["w1", "w2", "w3"]) yield* startWorker(name, true)
    const sent = yield* Effect.forkScoped(producer.sendAll(range(10).map((n) => ({ payload: { n }, messageId: `job-${n}` }))))
    yield* advanceUntil(() => done.length >= 4 && sent.unsafePoll() !== null, 20, 30_000)
    // A grant is offered only after the last batch was accepted; answer it but never acknowledge.
    const grant = yield* producer.requestNext
    const unacked = yield* producer.produce(Produced.make(grant, "unacked", { n: 99 }))
    expect(unacked.seq).toBe(11)
    yield* advanceByWithIo(300, 20)
    // w3 dies: whatever it held goes back to the pool.
    yield* Scope.close(scopes[2], Exit.void)
    yield* advanceByWithIo(500, 20)
    const before = yield* WorkPulling.stats("dispatcher")
    expect(before.confirmed).toBe(4)
    expect(before.workersGone).toBe(1)
    expect(before.pending + before.perWorker.reduce((sum, worker) => sum + worker.inFlight, 0)).toBe(6)

    const confirmedBefore = new Set(done.map((entry) => entry.messageId))
    const expected = range(10).map((n) => `job-${n}`).filter((id) => !confirmedBefore.has(id)).sort()
    expect(expected).toHaveLength(6)

    // The producer side dies and comes back; the old workers go too, fresh ones join.
    yield* ReliableSystem.respawn("dispatcher")
    yield* Scope.close(scopes[0], Exit.void)
    yield* Scope.close(scopes[1], Exit.void)
    const mark = done.length
    yield* startWorker("v1", false)
    yield* startWorker("v2", false)
    yield* advanceUntil(() => done.length - mark >= expected.length, 20, 30_000)
    yield* advanceByWithIo(1_000, 20)
    const after = done.slice(mark).map((entry) => entry.messageId).sort()
    expect(after).toEqual(expected)
    // The append cursor continues after the reload: the next job is stored after the unacknowledged one.
    const next = yield* producer.send({ n: 100 }, { messageId: "job-100" })
    expect(next.seq).toBe(12)
    yield* advanceUntil(() => done.some((entry) => entry.messageId === "job-100"), 20, 10_000)
    for (const scope of scopes.slice(3)) yield* Scope.close(scope, Exit.void)
  })

describe("work-pulling with a durable work queue", () => {
  it.scoped("memory: a respawned producer re-dispatches exactly the accepted, unconfirmed jobs", () =>
    Effect.flatMap(MemoryWorkQueue.makeWorkMemory, reloadScenario).pipe(Effect.provide(system())))

  it.scoped("SQLite file: a respawned producer re-dispatches exactly the accepted, unconfirmed jobs", () => {
    const filename = join(tmpdir(), `effect-reliable-wp-${uniqueSuffix()}.db`)
    return Effect.gen(function*() {
      const context = yield* Layer.build(SqliteClient.layer({ filename }))
      const queue = yield* Effect.provide(SqlWorkQueue.makeWorkSql({ queueName: `jobs-${uniqueSuffix()}` }), context)
      yield* reloadScenario(queue)
    }).pipe(
      Effect.provide(system()),
      Effect.ensuring(Effect.sync(() => {
        for (const suffix of ["", "-wal", "-shm"]) rmSync(`${filename}${suffix}`, { force: true })
      }))
    )
  })

  it.scoped("DeliveryConfirmed repeats, with the same store seq, when a reloaded job is confirmed again", () =>
    Effect.gen(function*() {
      // A queue whose confirmations never land: what a crash right after the worker confirmed leaves.
      const inner = yield* MemoryWorkQueue.makeWorkMemory
      const queue: DurableWorkQueueService = { ...inner, confirmMessage: () => Effect.void, confirmBatch: () => Effect.void }
      const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job, durableWorkQueue: queue, deliveryConfirmation: true })
      const confirmations = yield* producer.subscribeConfirmations
      const done: Array<string> = []
      const worker = yield* WorkPulling.worker({ name: "w1", producer: "dispatcher", payload: Job, resendInterval: "200 millis" })
      yield* Effect.forkScoped(worker.run((delivery) => Effect.sync(() => void done.push(delivery.messageId))))
      yield* Effect.forkScoped(producer.send({ n: 1 }, { messageId: "job-1" }))
      yield* advanceUntil(() => done.length === 1, 50, 5_000)
      yield* advanceByWithIo(200, 50)
      yield* ReliableSystem.respawn("dispatcher")
      yield* advanceUntil(() => done.length === 2, 50, 10_000)
      yield* advanceByWithIo(200, 50)
      const notices = Chunk.toReadonlyArray(yield* Queue.takeAll(confirmations))
      expect(done).toEqual(["job-1", "job-1"])
      expect(notices.map((notice) => [notice.messageId, notice.seq])).toEqual([["job-1", 1], ["job-1", 1]])
    }).pipe(Effect.provide(system())))

  describe("durable failures", () => {
    type Operation = keyof DurableWorkQueueService
    /** A memory queue whose operations fail while `failing(operation)` says so. */
    const failingQueue = (failing: (operation: Operation) => DurableQueueError | undefined) =>
      Effect.map(MemoryWorkQueue.makeWorkMemory, (queue): DurableWorkQueueService => {
        const wrap = <Args extends ReadonlyArray<unknown>, A, E>(operation: Operation, call: (...args: Args) => Effect.Effect<A, E>) =>
        (...args: Args): Effect.Effect<A, E | DurableQueueError> =>
          Effect.suspend((): Effect.Effect<A, E | DurableQueueError> => {
            const error = failing(operation)
            return error === undefined ? call(...args) : Effect.fail(error)
          })
        // Not fused (so store and accept fail apart); the backlog and the rest pass through.
        const { storeAccepted: _fused, ...unwatched } = queue
        return {
          ...unwatched,
          load: Effect.suspend(() => {
            const error = failing("load")
            return error === undefined ? queue.load : Effect.fail(error as QueueBackendError)
          }),
          store: wrap("store", queue.store),
          storeBatch: wrap("storeBatch", queue.storeBatch),
          accept: wrap("accept", queue.accept),
          acceptBatch: wrap("acceptBatch", queue.acceptBatch),
          confirmMessage: wrap("confirmMessage", queue.confirmMessage),
          confirmBatch: wrap("confirmBatch", queue.confirmBatch)
        } as DurableWorkQueueService
      })

    const withWorker = Effect.gen(function*() {
      const done: Array<string> = []
      const worker = yield* WorkPulling.worker({ name: "w1", producer: "dispatcher", payload: Job, resendInterval: "200 millis" })
      yield* Effect.forkScoped(worker.run((delivery) => Effect.sync(() => void done.push(delivery.messageId))))
      return done
    })

    const conflict = new QueueConflict({ message: "injected" })
    const backend = new QueueBackendError({ operation: "injected", cause: "down" })

    it.scoped.each([
      ["store", "Store"],
      ["accept", "Accept"],
      ["confirmMessage", "Confirm"]
    ] as const)("QueueConflict on %s is terminal with stage %s", ([operation, stage]) =>
      Effect.gen(function*() {
        const failures = yield* ReliableSystem.subscribeFailures
        const queue = yield* failingQueue((called) => called.startsWith(operation) || (operation === "confirmMessage" && called === "confirmBatch") ? conflict : undefined)
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job, durableWorkQueue: queue })
        yield* withWorker
        yield* Effect.forkScoped(producer.send({ n: 1 }))
        yield* advanceByWithIo(2_000, 50)
        const events = Chunk.toReadonlyArray(yield* Queue.takeAll(failures))
        expect(events.map((event) => [event.endpointName, event.role, event.stage])).toEqual([["dispatcher", "Producer", stage]])
      }).pipe(Effect.provide(system())))

    it.scoped("a newer load fences the controller: QueueFenced at the next store is terminal; respawn takes a fresh epoch", () =>
      Effect.gen(function*() {
        const failures = yield* ReliableSystem.subscribeFailures
        const queue = yield* MemoryWorkQueue.makeWorkMemory
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job, durableWorkQueue: queue })
        const done = yield* withWorker
        yield* Effect.forkScoped(producer.send({ n: 1 }, { messageId: "first" }))
        yield* advanceUntil(() => done.length === 1, 50, 5_000)
        yield* queue.load
        yield* Effect.forkScoped(producer.send({ n: 2 }, { messageId: "second" }))
        yield* advanceByWithIo(1_000, 50)
        const events = Chunk.toReadonlyArray(yield* Queue.takeAll(failures))
        expect(events.map((event) => [event.stage, (event.cause as { _tag: string })._tag])).toEqual([["Store", "QueueFenced"]])
        yield* ReliableSystem.respawn("dispatcher")
        yield* advanceUntil(() => done.includes("second"), 50, 10_000)
      }).pipe(Effect.provide(system())))

    it.scoped("exhausted retries restart the controller, which reloads and carries on; nothing is published", () =>
      Effect.gen(function*() {
        const failures = yield* ReliableSystem.subscribeFailures
        let storeFailures = 5
        const queue = yield* failingQueue((operation) => operation.startsWith("store") && storeFailures-- > 0 ? backend : undefined)
        const producer = yield* WorkPulling.producer({
          name: "dispatcher",
          payload: Job,
          durableWorkQueue: queue,
          queueRetry: { attempts: 3, interval: "10 millis" }
        })
        const done = yield* withWorker
        yield* Effect.forkScoped(producer.send({ n: 1 }, { messageId: "survivor" }))
        yield* advanceUntil(() => done.includes("survivor"), 50, 20_000)
        expect(yield* Queue.size(failures)).toBe(0)
      }).pipe(Effect.provide(system())))

    it.scoped("a reload that keeps failing is retried until the queue answers: degraded, then recovered, no failure", () =>
      Effect.gen(function*() {
        const failures = yield* ReliableSystem.subscribeFailures
        const health = yield* ReliableSystem.subscribeHealth
        let broken = false
        const queue = yield* failingQueue((operation) => broken && (operation === "load" || operation.startsWith("store")) ? backend : undefined)
        const producer = yield* WorkPulling.producer({
          name: "dispatcher",
          payload: Job,
          durableWorkQueue: queue,
          queueRetry: { attempts: 2, interval: "10 millis" }
        })
        yield* withWorker
        yield* advanceByWithIo(500, 50)
        broken = true
        const sent = yield* Effect.forkScoped(producer.send({ n: 1 }))
        yield* advanceByWithIo(2_000, 50)
        expect((yield* WorkPulling.stats("dispatcher")).degraded).toBe(true)
        broken = false
        yield* advanceUntil(() => sent.unsafePoll() !== null, 50, 5_000)
        expect((yield* WorkPulling.stats("dispatcher")).degraded).toBe(false)
        expect(Chunk.toReadonlyArray(yield* Queue.takeAll(failures))).toEqual([])
        const events = Chunk.toReadonlyArray(yield* Queue.takeAll(health))
        expect(events.map((event) => event._tag)).toEqual(["ReliableDegraded", "ReliableRecovered"])
      }).pipe(Effect.provide(system())))
  })
})

const probe = await probePostgres

describePostgres(probe, "work-pulling with a durable work queue on PostgreSQL", () => {
  it.scoped("a respawned producer re-dispatches exactly the accepted, unconfirmed jobs", () => {
    const tablePrefix = `wp_${uniqueSuffix()}_`
    return Effect.gen(function*() {
      const context = yield* Layer.build(pgClientLayer())
      yield* Effect.addFinalizer(() => Effect.orDie(Effect.provide(dropTables(tablePrefix), context)))
      const queue = yield* Effect.provide(SqlWorkQueue.makeWorkSql({ queueName: `jobs-${uniqueSuffix()}`, tablePrefix }), context)
      yield* reloadScenario(queue)
    }).pipe(Effect.provide(system()))
  }, 60_000)
})
