/**
 * Cluster mode across real processes on 127.0.0.1 sharing the test PostgreSQL (own table prefix
 * per test, leases of 1 s): a worker node SIGKILLed mid-stream, a durable producer's node
 * SIGKILLed (the producer relocates), and a producer's node SIGSTOPped past its lease and
 * continued after its producer moved (its stale controller is fenced).
 */
import { expect, it } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Queue } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as PgClusterRegistry from "../../src/Cluster/PgClusterRegistry.js"
import type { DeliveryConfirmed } from "../../src/Protocol/Contract.js"
import * as WorkPulling from "../../src/WorkPulling.js"
import { pgClientLayer, describePostgres, probePostgres, uniqueSuffix } from "../DurableQueue/SqlTestSupport.js"
import { countLines, tempDir } from "../support/Processes.js"
import { Job } from "../fixtures/ClusterJob.js"
import { eventually } from "./ClusterWorld.js"
import { dropAll, spawnMember, startMember, workQueueStates } from "./ClusterTestSupport.js"

const probe = await probePostgres
// A member that cannot renew for its lease stops its relocatable endpoints (see ClusterMember):
// a lease well above the stalls of node processes starting on a loaded machine.
const leaseMs = 1000
const renewMs = 200

const lines = (file: string): Array<string> => {
  if (!Fs.existsSync(file)) return []
  const text = Fs.readFileSync(file, "utf8")
  const end = text.lastIndexOf("\n")
  return end < 0 ? [] : text.slice(0, end).split("\n")
}

/** A fresh table prefix, dropped (with every table on it) when the scope closes. */
const freshPrefix = Effect.gen(function*() {
  const prefix = `cl_${uniqueSuffix()}_`
  yield* Effect.addFinalizer(() => dropAll(prefix).pipe(Effect.provide(pgClientLayer()), Effect.ignore))
  return prefix
})

/** The test's own view of the registry and the work queue, on a client for the life of the scope. */
const views = (prefix: string) =>
  Effect.gen(function*() {
    const client = yield* Layer.build(pgClientLayer())
    const registry = yield* Effect.provide(PgClusterRegistry.makePg({ tablePrefix: prefix }), client)
    const confirmedJobs = Effect.map(Effect.provide(workQueueStates(prefix, "dispatcher"), client), (s) => s.confirmed)
    return { registry, confirmedJobs }
  })

const workerNodeKilled = Effect.gen(function*() {
  const dir = yield* tempDir
  const prefix = yield* freshPrefix
  const cluster = { prefix, leaseMs, renewMs }
  const jobs = 3000
  const a = yield* startMember(cluster)
  const b = yield* spawnMember(cluster)
  const c = yield* spawnMember(cluster)
  const logB = Path.join(dir, "b.log")
  const logC = Path.join(dir, "c.log")
  const hangAfter = 300
  b.send(`WORKER worker-b dispatcher ${logB} ${hangAfter} 20`)
  c.send(`WORKER worker-c dispatcher ${logC} 1000000000 20`)
  const producer = yield* a.run(WorkPulling.producer({ name: "dispatcher", payload: Job, deliveryConfirmation: true, retryInterval: "100 millis" }))
  const confirmations = yield* a.run(producer.subscribeConfirmations)
  const confirmed = new Set<string>()
  yield* a.run(Effect.forkScoped(Effect.forever(Effect.map(Queue.takeAll(confirmations), (batch) => {
    for (const item of batch as Iterable<DeliveryConfirmed>) confirmed.add(item.messageId)
  }))))
  const stats = a.run(WorkPulling.stats("dispatcher"))
  yield* eventually("both workers bound", Effect.map(stats, (s) => s.workers === 2), "20 seconds")
  yield* a.run(Effect.forkScoped(producer.sendAll(Array.from({ length: jobs }, (_, n) => ({ payload: { n }, messageId: `job-${n}` })))))
  yield* eventually("worker-b hanging on a job", Effect.sync(() => countLines(logB) >= hangAfter), "30 seconds")
  yield* b.kill("SIGKILL")
  yield* eventually("worker-b's binding to end", Effect.map(stats, (s) => s.workersGone === 1), "10 seconds")
  yield* eventually("every job confirmed", Effect.sync(() => confirmed.size === jobs), "60 seconds")
  return { logB: lines(logB), logC: lines(logC), hangAfter, final: yield* stats, jobs }
})

const producerNodeKilled = Effect.gen(function*() {
  const dir = yield* tempDir
  const prefix = yield* freshPrefix
  const jobs = 4000
  const cluster = { prefix, leaseMs, renewMs, jobs }
  const { confirmedJobs, registry } = yield* views(prefix)
  const [a, b, c] = yield* Effect.all([spawnMember(cluster), spawnMember(cluster), spawnMember(cluster)], { concurrency: "unbounded" })
  const logs = [Path.join(dir, "b.log"), Path.join(dir, "c.log")]
  b.send(`WORKER worker-b dispatcher ${logs[0]}`)
  c.send(`WORKER worker-c dispatcher ${logs[1]}`)
  a.send("SPAWN dispatcher")
  yield* a.next("SPAWNED", Duration.seconds(30))
  yield* eventually("a third of the jobs", Effect.sync(() => countLines(logs[0]) + countLines(logs[1]) >= jobs / 3), "60 seconds")
  const killedAt = Date.now()
  yield* a.kill("SIGKILL")
  const nodes = [`127.0.0.1:${b.port}`, `127.0.0.1:${c.port}`]
  yield* eventually("the dispatcher running on b or c", Effect.map(registry.get("dispatcher"), (record) =>
    Option.exists(record, (r) => r.live && r.kind === "WorkProducer" && nodes.includes(r.node))), "20 seconds")
  const relocatedAfterMs = Date.now() - killedAt
  yield* eventually("every job confirmed in the queue", Effect.map(confirmedJobs, (n) => n === jobs), "60 seconds")
  const processed = new Set([...lines(logs[0]), ...lines(logs[1])])
  return { relocatedAfterMs, processed, jobs }
})

const producerNodePaused = Effect.gen(function*() {
  const dir = yield* tempDir
  const prefix = yield* freshPrefix
  const jobs = 4000
  const window = 20
  const cluster = { prefix, leaseMs, renewMs, jobs }
  const { confirmedJobs, registry } = yield* views(prefix)
  const [a, b, c] = yield* Effect.all([spawnMember(cluster), spawnMember(cluster), spawnMember(cluster)], { concurrency: "unbounded" })
  const logs = [Path.join(dir, "b.log"), Path.join(dir, "c.log")]
  b.send(`WORKER worker-b dispatcher ${logs[0]} 1000000000 ${window}`)
  c.send(`WORKER worker-c dispatcher ${logs[1]} 1000000000 ${window}`)
  a.send("SPAWN dispatcher")
  yield* a.next("SPAWNED", Duration.seconds(30))
  yield* eventually("a quarter of the jobs", Effect.sync(() => countLines(logs[0]) + countLines(logs[1]) >= jobs / 4), "60 seconds")
  yield* a.kill("SIGSTOP")
  const nodes = [`127.0.0.1:${b.port}`, `127.0.0.1:${c.port}`]
  yield* eventually("the dispatcher running on b or c", Effect.map(registry.get("dispatcher"), (record) =>
    Option.exists(record, (r) => r.live && r.kind === "WorkProducer" && nodes.includes(r.node))), "20 seconds")
  yield* a.kill("SIGCONT")
  const failed = yield* a.next("FAILED", Duration.seconds(20))
  yield* eventually("every job confirmed in the queue", Effect.map(confirmedJobs, (n) => n === jobs), "60 seconds")
  const statsB = yield* b.stats
  const statsC = yield* c.stats
  const statsA = yield* a.stats
  const all = [...lines(logs[0]), ...lines(logs[1])]
  const record = Option.getOrUndefined(yield* registry.get("dispatcher"))
  return { failed, all, jobs, window, statsA, statsB, statsC, record, nodes }
})

describePostgres(probe, "cluster mode across processes (PostgreSQL)", () => {
  it.live("workers on two nodes; one node SIGKILLed mid-stream: every job confirmed, its unconfirmed jobs redone on the other with their ids", () =>
    Effect.gen(function*() {
      const { final, hangAfter, jobs, logB, logC } = yield* workerNodeKilled
      // b logged its last job and hung on it: never confirmed there, it must have been redone on c
      expect(logB.length).toBe(hangAfter)
      expect(logC).toContain(logB[hangAfter - 1])
      expect(new Set([...logB, ...logC]).size).toBe(jobs)
      expect(final.requeued).toBeGreaterThanOrEqual(1)
      expect(final.workers).toBe(1)
    }).pipe(Effect.scoped), 120_000)

  it.live("a durable producer's node SIGKILLed: the producer relocates within a few leases and every accepted job is confirmed", () =>
    Effect.gen(function*() {
      const { jobs, processed, relocatedAfterMs } = yield* producerNodeKilled
      expect(relocatedAfterMs).toBeLessThan(6 * leaseMs)
      expect(processed.size).toBe(jobs)
    }).pipe(Effect.scoped), 120_000)

  it.live("a producer's node SIGSTOPped past its lease and continued: its stale controller is fenced, the flow on the new node is unaffected", () =>
    Effect.gen(function*() {
      const { all, failed, jobs, nodes, record, statsA, statsB, statsC, window } = yield* producerNodePaused
      expect(failed).toMatch(/^dispatcher (Protocol ReliableOwnershipLost|Store QueueFenced|Accept QueueFenced|Confirm QueueFenced)$/)
      expect(statsA.dispatchersStarted).toBe(1)
      expect(statsB.failures + statsC.failures).toBe(0)
      expect(statsB.dispatchersStarted + statsC.dispatchersStarted).toBe(1)
      expect(nodes).toContain(record?.node)
      expect(new Set(all).size).toBe(jobs)
      // at least once: only jobs that were in flight (unconfirmed) when the producer moved come twice
      expect(all.length - jobs).toBeLessThanOrEqual(4 * 2 * window)
    }).pipe(Effect.scoped), 120_000)
})
