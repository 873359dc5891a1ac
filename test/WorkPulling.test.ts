/**
 * Work-pulling end to end on the memory transport, driven by TestClock: fair dispatch, slow and
 * window-1 workers, worker loss and replacement, registration fencing, per-binding violations,
 * the producer contract and option checks.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Layer, Queue, Schema, Scope } from "effect"
import * as Producer from "../src/Producer.js"
import type { ControllerAddress } from "../src/Protocol/Address.js"
import { Produced, StoredAck } from "../src/Protocol/Contract.js"
import type { DeliveryConfirmed } from "../src/Protocol/Contract.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { addressOf, advanceBy, advanceUntil, drain, fakeEndpoint, inject, layerRecording, settle } from "./support/Harness.js"

const Job = Schema.Struct({ n: Schema.Number })
type Job = typeof Job.Type
const system = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))
const range = (count: number, from = 0) => Array.from({ length: count }, (_, index) => from + index)

interface Done {
  readonly worker: string
  readonly messageId: string
  readonly n: number
}

/** Starts a worker in its own scope; its handler takes `workMs` of (test) time per job. */
const startWorker = (name: string, done: Array<Done>, options: { readonly window?: number; readonly workMs?: number; readonly started?: Array<Done> } = {}) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const worker = yield* WorkPulling.worker({ name, producer: "dispatcher", payload: Job, window: options.window ?? 5, resendInterval: "200 millis" })
      .pipe(Scope.extend(scope))
    yield* Effect.forkIn(
      worker.run((delivery) =>
        Effect.gen(function*() {
          options.started?.push({ worker: name, messageId: delivery.messageId, n: delivery.payload.n })
          if (options.workMs !== undefined && options.workMs > 0) yield* Effect.sleep(options.workMs)
          done.push({ worker: name, messageId: delivery.messageId, n: delivery.payload.n })
        })
      ),
      scope
    )
    return scope
  })

const countBy = (done: ReadonlyArray<Done>) => {
  const counts: Record<string, number> = {}
  for (const entry of done) counts[entry.worker] = (counts[entry.worker] ?? 0) + 1
  return counts
}

const distinctJobs = (done: ReadonlyArray<Done>) => new Set(done.map((entry) => entry.messageId)).size

const sendJobs = (producer: Producer.Producer<Job>, count: number, from = 0) =>
  Effect.forkScoped(Effect.forEach(range(count, from), (n) => producer.send({ n }, { messageId: `job-${n}` }), { discard: true }))

describe("work-pulling", () => {
  describe("dispatch", () => {
    it.scoped("round-robin: equal workers get equal shares, each job exactly once", () =>
      Effect.gen(function*() {
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
        const done: Array<Done> = []
        for (const name of ["w1", "w2", "w3"]) yield* startWorker(name, done, { window: 5, workMs: 10 })
        yield* settle
        yield* Effect.forkScoped(producer.sendAll(range(300).map((n) => ({ payload: { n }, messageId: `job-${n}` }))))
        yield* advanceUntil(() => done.length >= 300, 10, 60_000)
        expect(done).toHaveLength(300)
        expect(distinctJobs(done)).toBe(300)
        // Strict round-robin among workers with free demand: equal workers stay within a few jobs.
        const counts = Object.values(countBy(done))
        expect(counts).toHaveLength(3)
        expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(5)
      }).pipe(Effect.provide(system())))

    it.scoped("a slow worker pulls less than a fast one", () =>
      Effect.gen(function*() {
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
        const done: Array<Done> = []
        yield* startWorker("fast", done, { window: 5, workMs: 1 })
        yield* startWorker("slow", done, { window: 5, workMs: 50 })
        yield* settle
        yield* sendJobs(producer, 200)
        yield* advanceUntil(() => done.length >= 200, 5, 60_000)
        const counts = countBy(done)
        expect(distinctJobs(done)).toBe(200)
        expect(counts.fast + counts.slow).toBe(200)
        expect(counts.slow * 5).toBeLessThan(counts.fast)
      }).pipe(Effect.provide(system())))

    it.scoped("a worker with window 1 never holds more than one job", () =>
      Effect.gen(function*() {
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
        const done: Array<Done> = []
        yield* startWorker("narrow", done, { window: 1, workMs: 20 })
        yield* startWorker("wide", done, { window: 20, workMs: 20 })
        yield* settle
        yield* sendJobs(producer, 120)
        const service = yield* ReliableSystem.ReliableSystem
        let maxHeld = 0
        yield* advanceUntil(() => {
          const held = Effect.runSync(WorkPulling.stats("dispatcher").pipe(Effect.provideService(ReliableSystem.ReliableSystem, service)))
            .perWorker.find((worker) => worker.worker === "narrow")?.inFlight ?? 0
          maxHeld = Math.max(maxHeld, held)
          return done.length >= 120
        }, 5, 60_000)
        const counts = countBy(done)
        expect(maxHeld).toBe(1)
        expect(counts.narrow).toBeGreaterThan(0)
        expect(counts.wide).toBeGreaterThan(counts.narrow)
        expect(distinctJobs(done)).toBe(120)
      }).pipe(Effect.provide(system())))

    it.scoped("a grant carries the workers' whole windows: busy workers do not shrink it, and the pool stays within them", () =>
      Effect.gen(function*() {
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
        const done: Array<Done> = []
        // Both workers take an hour per job: nothing they hold is confirmed during the test.
        for (const name of ["w1", "w2"]) yield* startWorker(name, done, { window: 5, workMs: 3_600_000 })
        yield* settle
        const batch = (count: number, from: number) => producer.sendAll(range(count, from).map((n) => ({ payload: { n }, messageId: `job-${n}` })))
        yield* batch(7, 0)
        // 3 of their 10 are free: one grant takes 10 more, 3 for the workers and 7 for the pool.
        const second = yield* Effect.fork(batch(10, 7))
        yield* advanceBy(100, 10)
        expect(second.unsafePoll()).toMatchObject({ _tag: "Success" })
        const stats = yield* WorkPulling.stats("dispatcher")
        expect(stats.pending).toBe(7)
        expect(stats.perWorker.map((worker) => worker.inFlight)).toEqual([5, 5])
        // The pool already holds more than the free demand: the next job waits for a worker.
        const third = yield* Effect.fork(batch(1, 17))
        yield* advanceBy(100, 10)
        expect(third.unsafePoll()).toBeNull()
        expect(done).toEqual([])
      }).pipe(Effect.provide(system())))

    it.scoped("jobs sent before any worker exists wait; late workers share them", () =>
      Effect.gen(function*() {
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
        yield* sendJobs(producer, 30)
        yield* advanceBy(1_000, 100)
        const done: Array<Done> = []
        yield* startWorker("w1", done, { window: 3 })
        yield* startWorker("w2", done, { window: 3 })
        yield* advanceUntil(() => done.length >= 30, 10, 20_000)
        expect(distinctJobs(done)).toBe(30)
        expect(done).toHaveLength(30)
      }).pipe(Effect.provide(system())))
  })

  describe("worker loss", () => {
    it.scoped("one of three workers dies mid-stream: every job is done, its jobs reach survivors under their original ids", () =>
      Effect.gen(function*() {
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job, deliveryConfirmation: true })
        const confirmations = yield* producer.subscribeConfirmations
        const done: Array<Done> = []
        const started: Array<Done> = []
        const scopes: Record<string, Scope.CloseableScope> = {}
        for (const name of ["w1", "w2", "w3"]) scopes[name] = yield* startWorker(name, done, { window: 5, workMs: 30, started })
        yield* settle
        yield* sendJobs(producer, 150)
        yield* advanceUntil(() => done.length >= 40, 10, 60_000)
        const before = (yield* WorkPulling.stats("dispatcher")).perWorker.find((worker) => worker.worker === "w2")!
        expect(before.inFlight).toBeGreaterThan(0)
        yield* Scope.close(scopes.w2, Exit.void)
        const doneByW2 = new Set(done.filter((entry) => entry.worker === "w2").map((entry) => entry.messageId))
        const startedByW2 = new Set(started.filter((entry) => entry.worker === "w2").map((entry) => entry.messageId))
        yield* advanceUntil(() => distinctJobs(done) >= 150, 10, 60_000)
        const stats = yield* WorkPulling.stats("dispatcher")
        expect(stats.workers).toBe(2)
        expect(stats.workersGone).toBe(1)
        expect(stats.requeued).toBe(before.inFlight)
        // Every job was done by some worker.
        expect(distinctJobs(done)).toBe(150)
        // The job w2 was working on when it died (and everything it held) reached a survivor, same id.
        const lost = [...startedByW2].filter((id) => !doneByW2.has(id))
        expect(lost.length).toBeGreaterThan(0)
        for (const id of lost) {
          expect(done.some((entry) => entry.messageId === id && entry.worker !== "w2")).toBe(true)
        }
        // Confirmations carry the store seq the Stored carried (job-n was stored n+1th).
        const notices = Chunk.toReadonlyArray(yield* Queue.takeAll(confirmations)) as ReadonlyArray<DeliveryConfirmed>
        expect(new Set(notices.map((notice) => notice.messageId)).size).toBe(150)
        for (const notice of notices) expect(notice.seq).toBe(Number(notice.messageId.slice(4)) + 1)
      }).pipe(Effect.provide(system())))

    it.scoped("a respawned worker (new incarnation) replaces its binding; its unconfirmed jobs are redone", () =>
      Effect.gen(function*() {
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
        const done: Array<Done> = []
        yield* startWorker("w1", done, { window: 5, workMs: 20 })
        yield* startWorker("w2", done, { window: 5, workMs: 20 })
        yield* settle
        yield* sendJobs(producer, 60)
        yield* advanceUntil(() => done.length >= 10, 10, 60_000)
        yield* ReliableSystem.respawn("w1")
        yield* advanceUntil(() => distinctJobs(done) >= 60, 10, 60_000)
        const stats = yield* WorkPulling.stats("dispatcher")
        expect(stats.workersReplaced).toBe(1)
        expect(stats.workers).toBe(2)
      }).pipe(Effect.provide(system())))

    it.scoped("the last worker leaving parks jobs in the pool until a new worker joins", () =>
      Effect.gen(function*() {
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
        const done: Array<Done> = []
        const scope = yield* startWorker("w1", done, { window: 4, workMs: 50 })
        yield* settle
        yield* sendJobs(producer, 20)
        yield* advanceUntil(() => done.length >= 3, 10, 60_000)
        yield* Scope.close(scope, Exit.void)
        yield* advanceBy(2_000, 100)
        const parked = yield* WorkPulling.stats("dispatcher")
        expect(parked.workers).toBe(0)
        expect(parked.pending).toBeGreaterThan(0)
        yield* startWorker("w9", done, { window: 4 })
        yield* advanceUntil(() => distinctJobs(done) >= 20, 10, 60_000)
      }).pipe(Effect.provide(system())))
  })

  describe("registration fencing", () => {
    const registerAs = (from: { readonly node: string; readonly endpoint: string; readonly incarnation: string }) =>
      Effect.gen(function*() {
        const producer = yield* addressOf("dispatcher")
        yield* inject(from, producer, { _tag: "RegisterConsumer", nonce: `${from.endpoint}-nonce` })
        yield* settle
      })

    it.scoped.each([
      ["an unknown sender", "ghost", undefined],
      ["a stale incarnation of a worker", "w-stale", { kind: "Worker", peer: "dispatcher", incarnation: "an-older-one" }],
      ["a worker configured for another producer", "w-other", { kind: "Worker", peer: "elsewhere" }],
      ["a point-to-point consumer naming this producer", "c-p2p", { kind: "Consumer", peer: "dispatcher" }],
      ["a producer", "p-other", { kind: "Producer", peer: "dispatcher" }]
    ] as const)("drops and counts a registration from %s, answering nothing", ([_, name, registered]) =>
      Effect.gen(function*() {
        yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
        const node = (yield* ReliableSystem.ReliableSystem).node
        let from: ControllerAddress = { node, endpoint: name, incarnation: "spoof" }
        let inbox: Queue.Dequeue<unknown> | undefined
        if (registered !== undefined) {
          const fake = yield* fakeEndpoint(name, registered.kind, registered.peer)
          inbox = fake.inbox
          from = "incarnation" in registered ? { ...fake.address, incarnation: registered.incarnation } : fake.address
        }
        yield* registerAs(from)
        const stats = yield* WorkPulling.stats("dispatcher")
        expect(stats.fenced).toBe(1)
        expect(stats.workers).toBe(0)
        if (inbox !== undefined) expect(yield* Queue.size(inbox)).toBe(0)
      }).pipe(Effect.provide(layerRecording())))

    it.scoped("binds a live worker configured for this producer", () =>
      Effect.gen(function*() {
        yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
        const fake = yield* fakeEndpoint("w-real", "Worker", "dispatcher")
        yield* registerAs(fake.address)
        const [answer] = yield* drain(fake.inbox)
        expect(answer.message).toMatchObject({ _tag: "RegistrationAck", nextSeq: 1, nonce: "w-real-nonce" })
        expect((yield* WorkPulling.stats("dispatcher")).workers).toBe(1)
      }).pipe(Effect.provide(layerRecording())))

    it.scoped("a spoofed sender cannot confirm or ask for another worker's jobs", () =>
      Effect.gen(function*() {
        yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
        const fake = yield* fakeEndpoint("w-real", "Worker", "dispatcher")
        yield* registerAs(fake.address)
        const [answer] = yield* drain(fake.inbox)
        const { sessionId } = answer.message as { readonly sessionId: string }
        const producer = yield* addressOf("dispatcher")
        const spoof = { ...fake.address, incarnation: "spoof" }
        yield* inject(spoof, producer, { _tag: "Request", sessionId, nonce: "w-real-nonce", confirmedSeq: 0, requestUpToSeq: 5, viaTimeout: false })
        yield* settle
        const stats = yield* WorkPulling.stats("dispatcher")
        expect(stats.dropped).toBe(1)
        expect(stats.perWorker[0].freeDemand).toBe(0)
      }).pipe(Effect.provide(layerRecording())))
  })

  describe("failures", () => {
    it.scoped("a worker's protocol violation ends only its binding; the controller keeps running", () =>
      Effect.gen(function*() {
        const failures = yield* ReliableSystem.subscribeFailures
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
        const fake = yield* fakeEndpoint("rogue", "Worker", "dispatcher")
        const address = yield* addressOf("dispatcher")
        yield* inject(fake.address, address, { _tag: "RegisterConsumer", nonce: "r1" })
        yield* settle
        const [answer] = yield* drain(fake.inbox)
        const { sessionId } = answer.message as { readonly sessionId: string }
        yield* inject(fake.address, address, { _tag: "Request", sessionId, nonce: "r1", confirmedSeq: 0, requestUpToSeq: 3, viaTimeout: false })
        yield* settle
        yield* Effect.forkScoped(producer.sendAll(range(3).map((n) => ({ payload: { n }, messageId: `job-${n}` }))))
        yield* settle
        expect((yield* drain(fake.inbox)).map((envelope) => envelope.message._tag)).toEqual(["SequencedMessage", "SequencedMessage", "SequencedMessage"])
        // The rogue confirms more than it was sent.
        yield* inject(fake.address, address, { _tag: "Ack", sessionId, nonce: "r1", confirmedSeq: 9 })
        yield* settle
        const stats = yield* WorkPulling.stats("dispatcher")
        expect(stats).toMatchObject({ violations: 1, workers: 0, pending: 3, requeued: 3 })
        // A real worker then does all three jobs.
        const done: Array<Done> = []
        yield* startWorker("honest", done)
        yield* advanceUntil(() => done.length >= 3, 10, 10_000)
        expect(done.map((entry) => entry.messageId).sort()).toEqual(["job-0", "job-1", "job-2"])
        expect(yield* Queue.size(failures)).toBe(0)
      }).pipe(Effect.provide(layerRecording())))

    it.scoped("a payload that cannot be encoded fails that send only; the dispatcher goes on", () =>
      Effect.gen(function*() {
        const Whole = Schema.Struct({ n: Schema.Int })
        const failures = yield* ReliableSystem.subscribeFailures
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Whole })
        const done: Array<Done> = []
        yield* startWorker("w1", done)
        yield* settle
        expect((yield* Effect.flip(producer.send({ n: 1.5 })))._tag).toBe("PayloadEncodeError")
        yield* Effect.forkScoped(producer.send({ n: 2 }))
        yield* advanceUntil(() => done.length >= 1, 100, 20_000)
        expect(done.map((entry) => entry.n)).toEqual([2])
        expect(yield* Queue.size(failures)).toBe(0)
      }).pipe(Effect.provide(system())))
  })

  describe("the producer contract", () => {
    it.scoped("requestNext/produce/storedAck work unchanged; Stored and DeliveryConfirmed carry the store seq", () =>
      Effect.gen(function*() {
        const producer = yield* WorkPulling.producer({ name: "dispatcher", payload: Job, deliveryConfirmation: true })
        const confirmations = yield* producer.subscribeConfirmations
        const done: Array<Done> = []
        yield* startWorker("w1", done)
        const grant = yield* producer.requestNext
        const stored = yield* producer.produce(Produced.make(grant, "order-7", { n: 7 }))
        expect(stored).toMatchObject({ messageId: "order-7", seq: 1, alreadyStored: false })
        // A retried grant gets the same Stored; another message under it is refused.
        expect(yield* producer.produce(Produced.make(grant, "order-7", { n: 7 }))).toEqual(stored)
        expect(yield* Effect.flip(producer.produce(Produced.make(grant, "order-8", { n: 8 })))).toMatchObject({ reason: "TokenAlreadyAnswered" })
        yield* advanceBy(300, 100)
        expect(done).toEqual([])
        yield* producer.storedAck(StoredAck.make(stored))
        yield* advanceUntil(() => done.length === 1, 10, 5_000)
        const notice = yield* Queue.take(confirmations)
        expect(notice).toMatchObject({ endpoint: "dispatcher", messageId: "order-7", seq: 1 })
      }).pipe(Effect.provide(system())))
  })

  describe("configuration", () => {
    const option = (effect: Effect.Effect<unknown, { readonly _tag: string; readonly option?: string }, any>) =>
      Effect.map(Effect.flip(effect), (error) => [error._tag, error.option])

    it.scoped("work-pulling producers refuse chunking, the point-to-point durable queue and a consumer; point-to-point refuses the work queue", () =>
      Effect.gen(function*() {
        const producer = (extra: Record<string, unknown>) =>
          WorkPulling.producer({ name: "dispatcher", payload: Job, ...extra } as WorkPulling.ProducerOptions<Job, Job>)
        expect(yield* option(producer({ chunkSize: 4096 }))).toEqual(["ReliableConfigError", "chunkSize"])
        expect(yield* option(producer({ durableQueue: {} }))).toEqual(["ReliableConfigError", "durableQueue"])
        expect(yield* option(producer({ consumer: "c" }))).toEqual(["ReliableConfigError", "consumer"])
        expect(yield* option(producer({ windw: 5 }))).toEqual(["ReliableConfigError", "windw"])
        expect(yield* option(producer({ retryInterval: "0 millis" }))).toEqual(["ReliableConfigError", "retryInterval"])
        expect(yield* option(producer({ queueRetry: { attempts: 0, interval: "1 second" } }))).toEqual(["ReliableConfigError", "queueRetry.attempts"])
        expect(yield* option(WorkPulling.producer({ name: " ", payload: Job }))).toEqual(["ReliableConfigError", "name"])
        const error = yield* Effect.flip(producer({ durableQueue: {} }))
        expect(error.message).toContain("durableWorkQueue")
        expect(yield* option(Producer.make({ name: "p", consumer: "c", payload: Job, durableWorkQueue: {} } as Producer.ProducerOptions<Job, Job>)))
          .toEqual(["ReliableConfigError", "durableWorkQueue"])
        expect(yield* option(WorkPulling.worker({ name: "w", producer: "dispatcher", payload: Job, window: 0 }))).toEqual(["ReliableConfigError", "window"])
        expect(yield* option(WorkPulling.stats("nobody"))).toEqual(["EndpointNotFound", undefined])
        // A valid producer still starts after all that.
        yield* WorkPulling.producer({ name: "dispatcher", payload: Job })
      }).pipe(Effect.provide(system())))
  })
})
