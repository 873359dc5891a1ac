/**
 * Cluster mode through database outages, across real processes on 127.0.0.1: three members, a
 * relocatable durable work-pulling dispatcher, one worker per node, a steady job source, and
 * PostgreSQL (registry and work queue both) behind a proxy the test cuts, blackholes and heals,
 * or a throwaway PostgreSQL cluster of the test's own that it stops and starts.
 *
 * Every scenario checks that every job is confirmed in the queue and processed (0 lost), that two
 * dispatchers never dispatched at once (the members sample their dispatching, with the queue
 * epoch, into one log), and measures the time from the database's return to the first job
 * processed that had not been before (printed, one line per outage).
 *
 * Shorter than the issue's runs where that changes nothing: 200 jobs/s for a few seconds after
 * each outage, and the 30 s blackhole only with the 1 s lease (see the README's known limits).
 */
import { PgClient } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Duration, Effect, Layer, Redacted } from "effect"
import type { Scope } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { describePostgres, pgUrl, probePostgres, uniqueSuffix, dropTables } from "../DurableQueue/SqlTestSupport.js"
import * as PgClusterRegistry from "../../src/Cluster/PgClusterRegistry.js"
import * as PgProxy from "../support/PgProxy.js"
import type { ChildNode } from "../support/Processes.js"
import { tempDir } from "../support/Processes.js"
import * as ThrowawayPg from "../support/ThrowawayPg.js"
import { spawnMember, workQueueStates } from "./ClusterTestSupport.js"
import { eventually } from "./ClusterWorld.js"

const probe = await probePostgres
const jobRate = 200
/** Jobs submitted after the last outage, so the flow must carry on past it. */
const tailSeconds = 3

/** The database the members use, and how the test takes it away and gives it back. */
interface Backend {
  /** The URL member `index` connects to. */
  readonly url: (index: number) => string
  /** The URL the test reads the queue through (never interrupted). */
  readonly directUrl: string
  /** Takes the database away from member `index` only, or from every member. */
  readonly down: (outage: Outage, index: number) => Effect.Effect<void, Error>
  readonly up: (outage: Outage) => Effect.Effect<void, Error>
}

type OutageKind = "cut" | "blackhole" | "restart"

interface Outage {
  readonly kind: OutageKind
  readonly seconds: number
  /** Only the node that runs the dispatcher loses the database (its peers keep it). */
  readonly dispatcherNodeOnly?: boolean
}

interface Scenario {
  readonly name: string
  /** The members' lease (undefined: the default, 3 s). */
  readonly leaseMs: number | undefined
  readonly outages: ReadonlyArray<Outage>
}

/** One proxy per member in front of the test PostgreSQL. */
const proxied: Effect.Effect<Backend, Error, Scope.Scope> = Effect.gen(function*() {
  const proxies = yield* Effect.all([PgProxy.make(pgUrl), PgProxy.make(pgUrl), PgProxy.make(pgUrl)])
  const take = (proxy: PgProxy.PgProxy, outage: Outage) => outage.kind === "blackhole" ? proxy.blackhole : proxy.cut
  return {
    url: (index) => proxies[index].url,
    directUrl: pgUrl,
    down: (outage, index) => outage.dispatcherNodeOnly === true ? take(proxies[index], outage) : Effect.forEach(proxies, (proxy) => take(proxy, outage), { discard: true }),
    up: () => Effect.forEach(proxies, (proxy) => proxy.heal, { discard: true })
  }
})

/** A PostgreSQL cluster of the test's own, stopped (immediate mode) and started again. */
const throwaway: Effect.Effect<Backend, Error, Scope.Scope> = Effect.map(ThrowawayPg.make, (pg) => ({
  url: () => pg.url,
  directUrl: pg.url,
  down: () => pg.stopImmediate,
  up: () => pg.start
}))

interface Window {
  readonly node: string
  readonly epoch: number
  readonly from: number
  readonly to: number
}

const complete = (file: string): Array<string> => {
  if (!Fs.existsSync(file)) return []
  const text = Fs.readFileSync(file, "utf8")
  const end = text.lastIndexOf("\n")
  return end < 0 ? [] : text.slice(0, end).split("\n")
}

const dispatchWindows = (file: string): Array<Window> =>
  complete(file).map((line) => {
    const [node, epoch, from, to] = line.split(" ")
    return { node, epoch: Number(epoch), from: Number(from), to: Number(to) }
  })

/** Pairs of sampling windows in which dispatchers of two different epochs both sent jobs. */
const overlaps = (windows: ReadonlyArray<Window>): Array<[Window, Window]> => {
  const sorted = [...windows].sort((a, b) => a.from - b.from)
  const found: Array<[Window, Window]> = []
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i + 1; j < sorted.length && sorted[j].from < sorted[i].to; j++) {
      if (sorted[j].epoch !== sorted[i].epoch) found.push([sorted[i], sorted[j]])
    }
  }
  return found
}

/** When each job was first processed, by any worker. */
const firstProcessed = (logs: ReadonlyArray<string>): Map<string, number> => {
  const first = new Map<string, number>()
  for (const log of logs) {
    for (const line of complete(log)) {
      const [id, at] = line.split(" ")
      const time = Number(at)
      const seen = first.get(id)
      if (seen === undefined || time < seen) first.set(id, time)
    }
  }
  return first
}

/** Which member runs the dispatcher now: the node of the latest dispatch window. */
const dispatcherNode = (members: ReadonlyArray<ChildNode>, file: string) =>
  Effect.sync(() => {
    const windows = dispatchWindows(file)
    const node = windows.reduce((latest, window) => window.to > latest.to ? window : latest).node
    return members.findIndex((member) => `127.0.0.1:${member.port}` === node)
  })

/** A client on the backend's direct URL for the life of the scope: the test's view of the queue. */
const confirmedJobs = (backend: Backend, prefix: string) =>
  Effect.gen(function*() {
    const client = yield* Layer.build(PgClient.layer({ url: Redacted.make(backend.directUrl), connectTimeout: Duration.seconds(5) }))
    yield* Effect.addFinalizer(() => Effect.ignore(Effect.provide(dropTables(prefix), client)))
    const registry = yield* Effect.provide(PgClusterRegistry.makePg({ tablePrefix: prefix }), client)
    return {
      confirmed: Effect.map(Effect.provide(workQueueStates(prefix, "dispatcher"), client), (s) => s.confirmed),
      /** What the test prints when the flow does not finish: the registry's records and the queue's states. */
      describe: Effect.all([registry.endpoints, registry.members, Effect.provide(workQueueStates(prefix, "dispatcher"), client)])
    }
  })

/** The longest time between two jobs processed for the first time, from `from` on. */
const longestGap = (processed: Map<string, number>, from: number): number => {
  const times = [...processed.values()].filter((at) => at >= from).sort((a, b) => a - b)
  let gap = 0
  for (let i = 1; i < times.length; i++) gap = Math.max(gap, times[i] - times[i - 1])
  return gap
}

/** Waits for a job processed for the first time after `at`; when that was, in ms after `at`. */
const resumedAfter = (logs: ReadonlyArray<string>, at: number) =>
  Effect.gen(function*() {
    const before = new Set(firstProcessed(logs).keys())
    const fresh = () => [...firstProcessed(logs)].filter(([id]) => !before.has(id)).map(([, time]) => time)
    yield* eventually("jobs to flow again", Effect.sync(() => fresh().length > 0), "60 seconds", Duration.millis(100))
    return Math.min(...fresh()) - at
  })

const run = (scenario: Scenario, backend: Backend) =>
  Effect.gen(function*() {
    const dir = yield* tempDir
    const prefix = `co_${uniqueSuffix()}_`
    const leaseMs = scenario.leaseMs ?? 3000
    const cluster = {
      prefix,
      leaseMs,
      renewMs: Math.round(leaseMs / 3),
      jobRate,
      jobStartMs: Date.now(),
      jobsFile: Path.join(dir, "jobs"),
      dispatchLog: Path.join(dir, "dispatch.log")
    }
    // Made before the members, so its finalizer drops the tables after they are killed, not
    // under processes still querying them.
    const view = yield* confirmedJobs(backend, prefix)
    const members: ReadonlyArray<ChildNode> = yield* Effect.all([0, 1, 2].map((index) => spawnMember({ ...cluster, pgUrl: backend.url(index) })), {
      concurrency: "unbounded"
    })
    const logs = members.map((_, index) => Path.join(dir, `worker-${index}.log`))
    members.forEach((member, index) => member.send(`WORKER worker-${index} dispatcher ${logs[index]} 1000000000 20 stamped`))
    members[0].send("SPAWN dispatcher")
    yield* members[0].next("SPAWNED", Duration.seconds(30))
    yield* eventually("the flow to start", Effect.sync(() => firstProcessed(logs).size >= jobRate), "30 seconds", Duration.millis(100))
    const firstDownAt = Date.now()
    const resumes: Array<number> = []
    for (const outage of scenario.outages) {
      yield* backend.down(outage, yield* dispatcherNode(members, cluster.dispatchLog))
      yield* Effect.sleep(Duration.seconds(outage.seconds))
      yield* backend.up(outage)
      resumes.push(yield* resumedAfter(logs, Date.now()))
    }
    // The source ends a few seconds of jobs later (the file is renamed into place: read whole or not at all).
    const jobs = Math.ceil((Date.now() - cluster.jobStartMs) / 1000 * jobRate) + tailSeconds * jobRate
    Fs.writeFileSync(`${cluster.jobsFile}.new`, String(jobs))
    Fs.renameSync(`${cluster.jobsFile}.new`, cluster.jobsFile)
    yield* eventually("every job confirmed in the queue", Effect.map(Effect.orElseSucceed(view.confirmed, () => 0), (n) => n === jobs), "60 seconds", Duration.millis(100)).pipe(
      Effect.tapError(() => Effect.flatMap(Effect.either(view.describe), (state) => Effect.sync(() => console.log(`${scenario.name}: ${jobs} jobs; stuck at ${JSON.stringify(state)}`))))
    )
    const processed = firstProcessed(logs)
    const gap = longestGap(processed, firstDownAt)
    console.log(
      `${scenario.name} (lease ${leaseMs} ms): jobs flowed again ${resumes.map((ms) => `${ms} ms`).join(", then ")} after the database returned; ` +
        `longest pause ${gap} ms; ${jobs} jobs, all confirmed`
    )
    return { jobs, resumes, processed, overlaps: overlaps(dispatchWindows(cluster.dispatchLog)) }
  })

/** Every job confirmed and processed, never two active dispatchers, and the flow back within lease + a few seconds. */
const check = (scenario: Scenario, backend: Effect.Effect<Backend, Error, Scope.Scope>) =>
  Effect.gen(function*() {
    const result = yield* run(scenario, yield* backend)
    expect(result.processed.size).toBe(result.jobs)
    const [first] = result.overlaps
    expect(result.overlaps.length, first === undefined ? "" : `e.g. epoch ${first[0].epoch} on ${first[0].node} and epoch ${first[1].epoch} on ${first[1].node}`).toBe(0)
    for (const resume of result.resumes) expect(resume).toBeLessThan((scenario.leaseMs ?? 3000) + 5000)
  }).pipe(Effect.scoped)

describePostgres(probe, "cluster mode through database outages (three member processes, PostgreSQL behind a proxy)", () => {
  it.live("a 1 s cut with the default lease: the dispatcher heals in place", () =>
    check({ name: "cut 1 s", leaseMs: undefined, outages: [{ kind: "cut", seconds: 1 }] }, proxied), 90_000)

  it.live("a 5 s then a 30 s cut with a 1 s lease: the names are given up and the dispatcher re-created", () =>
    check({ name: "cut 5 s, then 30 s", leaseMs: 1000, outages: [{ kind: "cut", seconds: 5 }, { kind: "cut", seconds: 30 }] }, proxied), 150_000)

  it.live("a 5 s blackhole with the default lease", () =>
    check({ name: "blackhole 5 s", leaseMs: undefined, outages: [{ kind: "blackhole", seconds: 5 }] }, proxied), 90_000)

  it.live("the dispatcher's node alone blackholed for 5 s: it stops its dispatcher before a survivor takes over", () =>
    check({
      name: "dispatcher's node blackholed 5 s",
      leaseMs: undefined,
      outages: [{ kind: "blackhole", seconds: 5, dispatcherNodeOnly: true }]
    }, proxied), 90_000)
})

describePostgres(probe, "cluster mode through a PostgreSQL restart (three member processes, a throwaway PostgreSQL)", () => {
  // Under CI the throwaway cluster must be made: a missing initdb fails the test there instead of skipping.
  const skip = process.env.CI === "true" ? undefined : ThrowawayPg.unavailable()
  it.live.skipIf(skip !== undefined)(`stopped (immediate mode) for 5 s and started again${skip === undefined ? "" : ` (skipped: ${skip})`}`, () =>
    check({ name: "PostgreSQL stopped 5 s", leaseMs: undefined, outages: [{ kind: "restart", seconds: 5 }] }, throwaway), 90_000)
})
