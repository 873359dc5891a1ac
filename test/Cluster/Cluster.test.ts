/**
 * Cluster mode in one process: members on a shared memory hub and one in-memory registry, live
 * clock with short leases. Resolution across nodes, cluster-wide names, cross-node worker pools,
 * relocation of a crashed node's endpoints, fencing of a node that was cut off and came back,
 * remote placement, and the configuration errors.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Layer, Option, Queue, Schema } from "effect"
import * as Cluster from "../../src/Cluster.js"
import * as Consumer from "../../src/Consumer.js"
import type { DurableWorkQueueService } from "../../src/DurableQueue/DurableWorkQueue.js"
import * as MemoryWorkQueue from "../../src/DurableQueue/MemoryWorkQueue.js"
import * as Producer from "../../src/Producer.js"
import type { ReliableDeliveryFailed } from "../../src/Protocol/Failure.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as MemoryTransport from "../../src/Transport/MemoryTransport.js"
import { Transport } from "../../src/Transport/Transport.js"
import * as WorkPulling from "../../src/WorkPulling.js"
import { waitUntil } from "../support/Nodes.js"
import { eventually, makeWorld, startMember } from "./ClusterWorld.js"
import type { World } from "./ClusterWorld.js"

const Job = Schema.Struct({ n: Schema.Number })
// In-process flows can hold up Effect timers for a second or more on a loaded machine: leases long
// enough not to lapse then (a member whose renewals stall for its lease gives its relocatable
// endpoints up, and these tests count relocations).
const lease = { lease: "3 seconds", renewInterval: "100 millis" } as const
const range = (count: number) => Array.from({ length: count }, (_, index) => index)

const world = Effect.map(Cluster.makeMemory, makeWorld)

/** A worker on `member` that records what it processed. */
const startWorker = (member: { readonly run: <A, E>(effect: Effect.Effect<A, E, any>) => Effect.Effect<A, E> }, name: string, done: Array<{ readonly worker: string; readonly id: string }>) =>
  member.run(Effect.gen(function*() {
    const worker = yield* WorkPulling.worker({ name, producer: "dispatcher", payload: Job, window: 10, resendInterval: "100 millis" })
    yield* Effect.forkScoped(worker.run((delivery) => Effect.sync(() => void done.push({ worker: name, id: delivery.messageId }))))
  }))

/** A relocatable durable dispatcher that (re)submits jobs 0..count-1 on every start. */
const dispatcher = (queue: DurableWorkQueueService, count: number, started: Array<string>) =>
  Cluster.relocatable("dispatcher", (name) =>
    Effect.gen(function*() {
      const system = yield* ReliableSystem.ReliableSystem
      started.push(system.node)
      const producer = yield* WorkPulling.producer({ name, payload: Job, durableWorkQueue: queue, retryInterval: "100 millis" })
      yield* Effect.forkScoped(producer.sendAll(range(count).map((n) => ({ payload: { n }, messageId: `job-${n}` }))))
    }))

const failuresOf = (member: { readonly run: <A, E>(effect: Effect.Effect<A, E, any>) => Effect.Effect<A, E> }) =>
  member.run(ReliableSystem.subscribeFailures)

const takeFailure = (queue: Queue.Dequeue<ReliableDeliveryFailed>) =>
  Queue.take(queue).pipe(Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => new Error("no failure event") }))

describe("cluster mode (in process)", () => {
  it.live("a producer and a consumer on different nodes find each other through the registry", () =>
    Effect.gen(function*() {
      const w = yield* world
      const a = yield* startMember(w, "a", lease)
      const b = yield* startMember(w, "b", lease)
      const received: Array<number> = []
      yield* b.run(Effect.gen(function*() {
        const consumer = yield* Consumer.make({ name: "orders-in", producer: "orders-out", payload: Job, resendInterval: "100 millis" })
        yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void received.push(delivery.payload.n))))
      }))
      yield* a.run(Effect.gen(function*() {
        const producer = yield* Producer.make({ name: "orders-out", consumer: "orders-in", payload: Job, retryInterval: "100 millis" })
        yield* producer.sendAll(range(500).map((n) => ({ payload: { n } })))
      }))
      yield* waitUntil("every message", () => received.length >= 500, "10 seconds")
      expect(received).toEqual(range(500))
      const records = yield* w.registry.endpoints
      expect(records.map((r) => [r.name, r.node, r.kind, r.live])).toEqual([
        ["orders-in", "b", "Consumer", true],
        ["orders-out", "a", "Producer", true]
      ])
    }).pipe(Effect.scoped))

  it.live("names are unique across the cluster; a dead node's name is free again", () =>
    Effect.gen(function*() {
      const w = yield* world
      const a = yield* startMember(w, "a", lease)
      const b = yield* startMember(w, "b", lease)
      yield* a.run(Consumer.make({ name: "orders-in", producer: "orders-out", payload: Job }))
      const error = yield* b.run(Effect.flip(Consumer.make({ name: "orders-in", producer: "orders-out", payload: Job })))
      expect(error).toMatchObject({ _tag: "ReliableConfigError", option: "name" })
      expect(error.message).toContain("node a")
      yield* a.crash
      yield* eventually("a's lease to expire", Effect.map(w.registry.members, (members) => !members.some((m) => m.node === "a")))
      yield* b.run(Consumer.make({ name: "orders-in", producer: "orders-out", payload: Job }))
      const record = yield* w.registry.get("orders-in")
      expect(Option.map(record, (r) => [r.node, r.live])).toEqual(Option.some(["b", true]))
    }).pipe(Effect.scoped))

  it.live("workers on two nodes join one producer's pool; a crashed worker node's jobs go to the other", () =>
    Effect.gen(function*() {
      const w = yield* world
      const a = yield* startMember(w, "a", lease)
      const b = yield* startMember(w, "b", lease)
      const c = yield* startMember(w, "c", lease)
      const done: Array<{ readonly worker: string; readonly id: string }> = []
      yield* startWorker(b, "worker-b", done)
      yield* startWorker(c, "worker-c", done)
      const producer = yield* a.run(WorkPulling.producer({ name: "dispatcher", payload: Job, retryInterval: "100 millis" }))
      yield* eventually("both workers bound", Effect.map(a.run(WorkPulling.stats("dispatcher")), (stats) => stats.workers === 2))
      yield* a.run(Effect.forkScoped(producer.sendAll(range(2000).map((n) => ({ payload: { n }, messageId: `job-${n}` })))))
      yield* waitUntil("both workers busy", () => done.some((d) => d.worker === "worker-b") && done.some((d) => d.worker === "worker-c"), "10 seconds")
      yield* b.crash
      yield* waitUntil("every job", () => new Set(done.map((d) => d.id)).size === 2000, "15 seconds")
      yield* eventually("b's binding to end", Effect.map(a.run(WorkPulling.stats("dispatcher")), (stats) => stats.workersGone === 1 && stats.workers === 1))
    }).pipe(Effect.scoped))

  it.live("a relocatable durable producer of a crashed node is re-created on exactly one survivor and finishes", () =>
    Effect.gen(function*() {
      const w: World = yield* world
      const queue = yield* MemoryWorkQueue.makeWorkMemory
      const started: Array<string> = []
      const options = { ...lease, relocatable: [dispatcher(queue, 3000, started)] }
      const a = yield* startMember(w, "a", options)
      const b = yield* startMember(w, "b", options)
      const c = yield* startMember(w, "c", options)
      const done: Array<{ readonly worker: string; readonly id: string }> = []
      yield* startWorker(b, "worker-b", done)
      yield* startWorker(c, "worker-c", done)
      yield* a.run(Cluster.spawn("dispatcher", "dispatcher"))
      expect(started).toEqual(["a"])
      yield* waitUntil("some jobs", () => done.length >= 300, "10 seconds")
      yield* a.crash
      yield* waitUntil("relocation", () => started.length === 2, "5 seconds")
      yield* waitUntil("every job", () => new Set(done.map((d) => d.id)).size === 3000, "15 seconds")
      expect(["b", "c"]).toContain(started[1])
      const record = yield* w.registry.get("dispatcher")
      expect(Option.map(record, (r) => [r.node, r.kind, r.factory, r.live])).toEqual(Option.some([started[1], "WorkProducer", "dispatcher", true]))
    }).pipe(Effect.scoped))

  it.live("a node cut off past its lease: it stops its relocatable producer before the lease ends (one event), its pinned endpoint is kept", () =>
    Effect.gen(function*() {
      const w: World = yield* world
      const queue = yield* MemoryWorkQueue.makeWorkMemory
      const started: Array<string> = []
      const options = { ...lease, relocatable: [dispatcher(queue, 2000, started)] }
      const a = yield* startMember(w, "a", options)
      const b = yield* startMember(w, "b", options)
      const done: Array<{ readonly worker: string; readonly id: string }> = []
      yield* startWorker(b, "worker-b", done)
      // a pinned consumer on a: nobody takes it over, so a keeps it
      yield* a.run(Consumer.make({ name: "pinned-in", producer: "nobody", payload: Job }))
      const failures = yield* failuresOf(a)
      yield* a.run(Cluster.spawn("dispatcher", "dispatcher"))
      yield* waitUntil("some jobs", () => done.length >= 200, "10 seconds")
      yield* a.cutOff
      // a gives the dispatcher up on its own clock, before b may take it over
      const failure = yield* takeFailure(failures)
      expect(started).toEqual(["a"])
      expect(failure.endpointName).toBe("dispatcher")
      expect(failure.cause).toMatchObject({ _tag: "ReliableOwnershipLost", owner: undefined })
      yield* waitUntil("relocation to b", () => started.length === 2, "5 seconds")
      expect(started).toEqual(["a", "b"])
      yield* a.restore
      yield* waitUntil("every job", () => new Set(done.map((d) => d.id)).size === 2000, "15 seconds")
      yield* eventually("a to reclaim its pinned endpoint", Effect.map(w.registry.get("pinned-in"), Option.exists((r) => r.node === "a" && r.live)))
      expect(yield* Queue.size(failures)).toBe(0)
    }).pipe(Effect.scoped))

  it.live("a relocatable producer whose durable write is fenced while its node holds it is given up and re-created, not left stopped", () =>
    Effect.gen(function*() {
      const w: World = yield* world
      const queue = yield* MemoryWorkQueue.makeWorkMemory
      const started: Array<string> = []
      const options = { ...lease, relocatable: [dispatcher(queue, 400, started)] }
      const a = yield* startMember(w, "a", options)
      const b = yield* startMember(w, "b", options)
      const done: Array<string> = []
      // jobs from 100 on wait at the gate, so a has writes left to make once the queue is loaded
      const gate = yield* Deferred.make<void>()
      yield* b.run(Effect.gen(function*() {
        const worker = yield* WorkPulling.worker({ name: "worker-b", producer: "dispatcher", payload: Job, window: 10, resendInterval: "100 millis" })
        yield* Effect.forkScoped(worker.run((delivery) =>
          Effect.zipRight(delivery.payload.n >= 100 ? Deferred.await(gate) : Effect.void, Effect.sync(() => void done.push(delivery.messageId)))))
      }))
      const failures = yield* failuresOf(a)
      yield* a.run(Cluster.spawn("dispatcher", "dispatcher"))
      yield* waitUntil("the first jobs", () => done.length >= 100, "10 seconds")
      // a writer nobody placed loads the queue: a's next durable write is fenced while a holds the name
      yield* queue.load
      yield* Deferred.succeed(gate, undefined)
      const failure = yield* takeFailure(failures)
      expect(failure.cause).toMatchObject({ _tag: "QueueFenced" })
      yield* waitUntil("re-creation", () => started.length === 2, "5 seconds")
      yield* waitUntil("every job", () => new Set(done).size === 400, "15 seconds")
      const record = yield* w.registry.get("dispatcher")
      expect(Option.map(record, (r) => [r.node, r.kind, r.live])).toEqual(Option.some([started[1], "WorkProducer", true]))
      expect(yield* Queue.size(failures)).toBe(0)
    }).pipe(Effect.scoped))

  it.live("remote placement: on a named member, idempotent; refusals are typed; stop retires; a system that is not clustered cannot place", () =>
    Effect.gen(function*() {
      const w: World = yield* world
      const queue = yield* MemoryWorkQueue.makeWorkMemory
      const started: Array<string> = []
      const a = yield* startMember(w, "a", lease)
      const b = yield* startMember(w, "b", { ...lease, relocatable: [dispatcher(queue, 10, started)] })
      yield* a.run(Cluster.spawn("dispatcher", "dispatcher", { node: "b" }))
      expect(started).toEqual(["b"])
      const refusal = (effect: Effect.Effect<void, unknown, ReliableSystem.ReliableSystem>) =>
        a.run(Effect.flip(effect)).pipe(Effect.map((error) => (error as { reason?: string; _tag: string }).reason ?? (error as { _tag: string })._tag))
      expect(yield* refusal(Cluster.spawn("dispatcher", "other", { node: "z" }))).toBe("NodeUnavailable")
      expect(yield* refusal(Cluster.spawn("dispatcher", "other", { node: "a" }))).toBe("UnknownFactory")
      yield* a.run(Consumer.make({ name: "pinned-in", producer: "nobody", payload: Job }))
      expect(yield* refusal(Cluster.spawn("dispatcher", "pinned-in", { node: "b" }))).toBe("NameTaken")
      // the same endpoint again: it already runs, nothing new is created
      yield* a.run(Cluster.spawn("dispatcher", "dispatcher", { node: "b" }))
      yield* a.run(Cluster.spawn("dispatcher", "dispatcher"))
      expect(started).toEqual(["b"])
      // stopping: pinned endpoints refuse, relocatable ones are closed on their node for good
      expect(yield* refusal(Cluster.stop("pinned-in"))).toBe("NotRelocatable")
      yield* a.run(Cluster.stop("dispatcher"))
      yield* eventually("b to close the dispatcher", Effect.sync(() => b.system.internal.registry.get("dispatcher") === undefined))
      expect(yield* w.registry.get("dispatcher")).toEqual(Option.none())
      yield* a.run(Cluster.stop("dispatcher"))
      const plain = yield* Effect.flip(Cluster.spawn("dispatcher", "x").pipe(
        Effect.provide(ReliableSystem.layer().pipe(Layer.provide(MemoryTransport.layerMemory)))
      ))
      expect(plain._tag).toBe("ReliableClusterRequired")
    }).pipe(Effect.scoped))

  it.live("worker registrations are fenced through the registry: spoofed node, stale incarnation, a worker naming another producer", () =>
    Effect.gen(function*() {
      const w = yield* world
      const a = yield* startMember(w, "a", lease)
      const b = yield* startMember(w, "b", lease)
      const c = yield* startMember(w, "c", lease)
      const done: Array<{ readonly worker: string; readonly id: string }> = []
      yield* a.run(WorkPulling.producer({ name: "dispatcher", payload: Job, retryInterval: "100 millis" }))
      yield* startWorker(b, "worker-b", done)
      yield* c.run(WorkPulling.worker({ name: "other-worker", producer: "elsewhere", payload: Job }))
      const stats = a.run(WorkPulling.stats("dispatcher"))
      yield* eventually("worker-b bound", Effect.map(stats, (s) => s.workers === 1))
      const dispatcherAt = a.system.internal.registry.get("dispatcher")!.record.address!
      const spoof = (from: { readonly run: <A, E>(effect: Effect.Effect<A, E, any>) => Effect.Effect<A, E> }, node: string, endpoint: string, incarnation: string) =>
        from.run(Effect.gen(function*() {
          const transport = yield* Transport
          const address = { node, endpoint, incarnation }
          yield* transport.open(address)
          transport.post([{ from: address, to: dispatcherAt, message: { _tag: "RegisterConsumer", nonce: `n-${incarnation}` } }])
        }))
      yield* spoof(c, "c", "worker-b", "spoof")          // worker-b's name from a node that does not hold it
      yield* spoof(b, "b", "worker-b", "stale")          // the right node, not its live incarnation
      const other = c.system.internal.registry.get("other-worker")!.record.address!
      yield* spoof(c, "c", "other-worker", other.incarnation) // live, but configured for another producer
      yield* eventually("three fenced registrations", Effect.map(stats, (s) => s.fenced >= 3))
      const final = yield* stats
      expect(final.workers).toBe(1)
      expect(final.perWorker.map((x) => x.worker)).toEqual(["worker-b"])
    }).pipe(Effect.scoped))

  it.live("a relocatable consumer of a crashed node is re-created on a survivor, registers again and the flow resumes in order", () =>
    Effect.gen(function*() {
      const w = yield* world
      const received: Array<{ readonly node: string; readonly n: number }> = []
      const consumer = Cluster.relocatable("orders-in", (name) =>
        Effect.gen(function*() {
          const node = (yield* ReliableSystem.ReliableSystem).node
          const endpoint = yield* Consumer.make({ name, producer: "orders-out", payload: Job, window: 20, resendInterval: "100 millis" })
          yield* Effect.forkScoped(endpoint.run((delivery) => Effect.sync(() => void received.push({ node, n: delivery.payload.n }))))
        }))
      const options = { ...lease, relocatable: [consumer] }
      const a = yield* startMember(w, "a", lease)
      const b = yield* startMember(w, "b", options)
      yield* startMember(w, "c", options)
      yield* b.run(Cluster.spawn("orders-in", "orders-in"))
      const producer = yield* a.run(Producer.make({ name: "orders-out", consumer: "orders-in", payload: Job, retryInterval: "100 millis" }))
      const send = (from: number, count: number) =>
        a.run(Effect.forkScoped(Effect.forEach(range(count), (i) => producer.send({ n: from + i }), { discard: true })))
      yield* send(0, 1000)
      yield* waitUntil("the first thousand at b", () => received.length >= 1000, "10 seconds")
      yield* b.crash
      // sent while the consumer is being relocated: they wait for c's demand
      yield* send(1000, 2000)
      yield* waitUntil("the rest at c", () => received.some((r) => r.node === "c" && r.n === 2999), "15 seconds")
      const atC = received.filter((r) => r.node === "c").map((r) => r.n)
      // c continues from where b's confirmations reached the producer: in order, nothing skipped
      for (let i = 1; i < atC.length; i++) expect(atC[i]).toBe(atC[i - 1] + 1)
      expect(new Set(received.map((r) => r.n)).size).toBe(3000)
    }).pipe(Effect.scoped))

  it.live("a relocatable worker of a crashed node is re-created on a survivor, registers again and takes the jobs that follow", () =>
    Effect.gen(function*() {
      const w = yield* world
      const done: Array<{ readonly worker: string; readonly id: string }> = []
      const worker = Cluster.relocatable("worker", (name) =>
        Effect.gen(function*() {
          const node = (yield* ReliableSystem.ReliableSystem).node
          const endpoint = yield* WorkPulling.worker({ name, producer: "dispatcher", payload: Job, window: 10, resendInterval: "100 millis" })
          yield* Effect.forkScoped(endpoint.run((delivery) => Effect.sync(() => void done.push({ worker: node, id: delivery.messageId }))))
        }))
      const options = { ...lease, relocatable: [worker] }
      const a = yield* startMember(w, "a", lease)
      const b = yield* startMember(w, "b", options)
      yield* startMember(w, "c", options)
      const producer = yield* a.run(WorkPulling.producer({ name: "dispatcher", payload: Job, retryInterval: "100 millis" }))
      yield* b.run(Cluster.spawn("worker", "the-worker"))
      const send = (from: number, count: number) =>
        a.run(Effect.forkScoped(producer.sendAll(range(count).map((i) => ({ payload: { n: from + i }, messageId: `job-${from + i}` })))))
      yield* send(0, 500)
      yield* waitUntil("the first jobs at b", () => done.length >= 500, "10 seconds")
      yield* b.crash
      yield* send(500, 1500)
      yield* waitUntil("every job", () => new Set(done.map((d) => d.id)).size === 2000, "15 seconds")
      expect(done.some((d) => d.worker === "c")).toBe(true)
      yield* eventually("the old binding ended, the new one bound", Effect.map(a.run(WorkPulling.stats("dispatcher")), (s) => s.workers === 1 && s.workersGone + s.workersReplaced >= 1))
    }).pipe(Effect.scoped))

  it.live("a node that leaves gracefully hands its relocatable endpoints over at once", () =>
    Effect.gen(function*() {
      const w: World = yield* world
      const queue = yield* MemoryWorkQueue.makeWorkMemory
      const started: Array<string> = []
      const options = { lease: "1 minute", renewInterval: "100 millis", relocatable: [dispatcher(queue, 10, started)] } as const
      const a = yield* startMember(w, "a", options)
      yield* startMember(w, "b", options)
      yield* a.run(Cluster.spawn("dispatcher", "dispatcher"))
      yield* a.stop
      // far sooner than the one-minute lease: leaving ended it
      yield* waitUntil("the dispatcher on b", () => started.length === 2, "5 seconds")
      expect(started).toEqual(["a", "b"])
    }).pipe(Effect.scoped))

  it.live("a peer address on a clustered system is a conflict", () =>
    Effect.gen(function*() {
      const w = yield* world
      const a = yield* startMember(w, "a", lease)
      const error = yield* a.run(Effect.flip(Producer.make({
        name: "orders-out",
        consumer: "orders-in",
        payload: Job,
        remoteConsumer: { host: "127.0.0.1", port: 9 }
      })))
      expect(error._tag).toBe("ReliablePeerClusterConflict")
    }).pipe(Effect.scoped))
})
