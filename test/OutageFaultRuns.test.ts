/**
 * Seeded fault runs of a durable point-to-point flow whose queue is PostgreSQL behind a proxy
 * that cuts every connection and heals at random (several outages of 0.2 to 3 s at random
 * moments, under the live clock), with one to three senders using `send` or `sendAll`. Nothing
 * accepted may be lost, each sender's messages arrive in order (a redelivery may go back, never
 * skip ahead), health events come in degraded/recovered pairs and no failure is published.
 * A run prints its seed; `RELIABLE_OUTAGE_SEED=<seed> npx vitest run test/OutageFaultRuns.test.ts -t replay`
 * replays its plan (the outages' timing against real I/O does not replay exactly).
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { Context } from "effect"
import * as SeededRandom from "../src/internal/SeededRandom.js"
import { describePostgres, dropTables, pgClientLayer, pgUrl, probePostgres, sharedClient, uniqueSuffix } from "./DurableQueue/SqlTestSupport.js"
import * as OutageFlow from "./support/OutageFlow.js"
import type { Flow } from "./support/OutageFlow.js"
import * as PgProxy from "./support/PgProxy.js"

const probe = await probePostgres
const tablePrefix = `outrun_${uniqueSuffix()}_`
// Drops this file's tables at the end, through a direct connection (the proxies are gone by then).
if (probe.reachable) sharedClient(pgClientLayer, dropTables(tablePrefix))

interface OutagePlan {
  readonly seed: number
  readonly senders: number
  /** 1: `send`; more: `sendAll` batches of this size. */
  readonly batch: number
  /** Each outage: flow time before it, and how long it lasts (ms). */
  readonly outages: ReadonlyArray<{ readonly afterMs: number; readonly lastsMs: number }>
}

const planFor = (seed: number): OutagePlan => {
  const random = SeededRandom.make(seed)
  return {
    seed,
    senders: random.int(1, 3),
    batch: random.chance(0.5) ? 1 : random.int(2, 10),
    outages: Array.from({ length: random.int(2, 4) }, () => ({ afterMs: random.int(100, 2_000), lastsMs: random.int(200, 3_000) }))
  }
}

/** Per sender, deliveries never skip ahead of one past the highest delivered before. */
const orderViolation = (flow: Flow): string | undefined => {
  const highest = new Map<string, number>()
  for (const { messageId } of flow.deliveries) {
    const [sender, text] = messageId.slice(1).split("-")
    const n = Number(text)
    const before = highest.get(sender) ?? 0
    if (n > before + 1) return `sender ${sender}: ${n} delivered after ${before}`
    highest.set(sender, Math.max(before, n))
  }
  return undefined
}

const healthViolation = (flow: Flow, outages: number): string | undefined => {
  const tags = flow.health.map((event) => event.tag)
  const paired = tags.every((tag, index) => tag === (index % 2 === 0 ? "ReliableDegraded" : "ReliableRecovered"))
  return paired && tags.length % 2 === 0 && tags.length <= 2 * outages ? undefined : `health events: ${tags.join(", ")}`
}

const run = (plan: OutagePlan) =>
  Effect.gen(function*() {
    console.log(`outage fault run: seed=${plan.seed} plan=${JSON.stringify(plan)}`)
    const proxy = yield* PgProxy.make(pgUrl)
    const client: Context.Context<SqlClient> = yield* OutageFlow.buildClient(proxy.url)
    const { flow } = yield* OutageFlow.pointToPoint(client, tablePrefix)
    const senders = yield* flow.startSenders(plan.senders, plan.batch)
    for (const outage of plan.outages) {
      yield* Effect.sleep(outage.afterMs)
      yield* proxy.cut
      yield* Effect.sleep(outage.lastsMs)
      yield* proxy.heal
    }
    yield* Effect.sleep("1 second")
    yield* senders.stop
    const lost = () => {
      const delivered = new Set(flow.deliveries.map((delivery) => delivery.messageId))
      return [...flow.accepted].filter((id) => !delivered.has(id))
    }
    yield* OutageFlow.waitFor("every accepted message delivered", () => lost().length === 0, 30_000).pipe(Effect.ignore)
    // Let a recovery in progress finish before the events are read.
    yield* OutageFlow.waitFor("the flow healthy", () => flow.health.length % 2 === 0, 10_000).pipe(Effect.ignore)
    const problem = lost().length > 0
      ? `${lost().length} accepted messages never delivered: ${lost().slice(0, 5).join(", ")}`
      : orderViolation(flow) ?? healthViolation(flow, plan.outages.length) ??
        (flow.failures.length > 0 ? `failures: ${flow.failures.map(String).join("; ")}` : undefined)
    if (problem !== undefined) console.error(`outage fault run failed: seed=${plan.seed} plan=${JSON.stringify(plan)}: ${problem}`)
    expect(problem, `seed ${plan.seed}`).toBeUndefined()
    console.log(`outage fault run: seed=${plan.seed}: ${flow.accepted.size} accepted, ${flow.deliveries.length} deliveries, ${flow.health.length / 2} degraded periods`)
    // The outages reached the flow: senders never stop, so every cut fails some call.
    expect(flow.health.length).toBeGreaterThan(0)
  }).pipe(Effect.provide(OutageFlow.systemLayer()), Effect.scoped)

describePostgres(probe, "randomized outage runs (PostgreSQL behind a proxy cut and healed at random, live clock)", () => {
  const base = Number(process.env.RELIABLE_OUTAGE_BASE ?? 9100)
  it.live.each([base, base + 1, base + 2])("seed %i", (seed) => run(planFor(seed)), 90_000)

  it.live("replay one seed (RELIABLE_OUTAGE_SEED)", () => run(planFor(Number(process.env.RELIABLE_OUTAGE_SEED ?? 4242))), 90_000)
})
