/**
 * The transactional outbox across real processes on 127.0.0.1 and a real PostgreSQL: two writer
 * processes enqueue into one queue inside their own transactions, half of which roll back (a
 * seeded plan, printed); a third process runs the durable producer and is killed with SIGKILL
 * when the writers are a third through, then restarted (while they write on) on the same queue and address; a fourth
 * runs the consumer. Every committed message is delivered at least once, in backlog order, and
 * no rolled back one ever is.
 */
import { expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql/SqlClient"
import { Duration, Effect } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import * as SqlProducerQueue from "../src/DurableQueue/SqlProducerQueue.js"
import * as SeededRandom from "../src/internal/SeededRandom.js"
import { describePostgres, dropTables, pgClientLayer, probePostgres, uniqueSuffix } from "./DurableQueue/SqlTestSupport.js"
import { countLines, spawnNode, tempDir } from "./support/Processes.js"

const probe = await probePostgres
const fixture = fileURLToPath(new URL("./fixtures/OutboxNode.ts", import.meta.url))
const writers = ["a", "b"] as const
const transactionsPerWriter = 300

/** Each writer's plan: one letter per transaction, `c` commits and `r` rolls back (about half). */
const plansOf = (seed: number): Record<string, string> => {
  const random = SeededRandom.make(seed)
  return Object.fromEntries(writers.map((name) => [name, Array.from({ length: transactionsPerWriter }, () => random.chance(0.5) ? "r" : "c").join("")]))
}

const committedIds = (plans: Record<string, string>): Array<string> =>
  writers.flatMap((name) => [...plans[name]].flatMap((letter, index) => letter === "c" ? [`${name}-${index}`] : []))

const waitFor = (what: string, done: () => boolean, timeoutMs: number) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    while (!done()) {
      if (Date.now() > deadline) return yield* Effect.fail(new Error(`timed out waiting for ${what}`))
      yield* Effect.sleep(Duration.millis(25))
    }
  })

const readIds = (file: string): Array<string> => {
  if (!Fs.existsSync(file)) return []
  const text = Fs.readFileSync(file, "utf8")
  return text.slice(0, Math.max(0, text.lastIndexOf("\n"))).split("\n").filter((line) => line.length > 0)
}

/** Message ids in the order the producer stored them (its seq order: the order it took the backlog). */
const storedOrder = (tablePrefix: string, queue: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    const rows = yield* sql<{ readonly business_id: string }>`SELECT business_id FROM ${sql(`${tablePrefix}producer_entries`)}
      WHERE queue = ${queue} ORDER BY seq`
    return rows.map((row) => row.business_id)
  }).pipe(Effect.provide(pgClientLayer()))

/** Every position 0..total-1 arrived; runs are contiguous and never skip ahead (redelivery may go back). */
const orderedAtLeastOnce = (positions: ReadonlyArray<number>, total: number): string | undefined => {
  const seen = new Set(positions)
  for (let position = 0; position < total; position++) if (!seen.has(position)) return `stored message ${position} never delivered`
  let highest = -1
  for (const position of positions) {
    if (position > highest + 1) return `skipped from ${highest} to ${position}`
    highest = Math.max(highest, position)
  }
  return undefined
}

const outboxScenario = (seed: number) =>
  Effect.gen(function*() {
    const plans = plansOf(seed)
    console.log(`outbox process run seed ${seed} (replay: RELIABLE_OUTBOX_SEED=${seed}); plans ${JSON.stringify(plans)}`)
    const dir = yield* tempDir
    const log = Path.join(dir, "deliveries.log")
    const tablePrefix = `outbox_${uniqueSuffix()}_`
    const queue = `orders-${uniqueSuffix()}`
    const orders = `${tablePrefix}orders`
    const shared = { PG_QUEUE: queue, PG_PREFIX: tablePrefix }
    yield* Effect.addFinalizer(() => dropTables(tablePrefix).pipe(Effect.provide(pgClientLayer()), Effect.ignore))
    // The application's table, and the queue's tables migrated once before the processes start.
    yield* Effect.gen(function*() {
      const sql = yield* SqlClient
      yield* sql`CREATE TABLE ${sql(orders)} (id TEXT PRIMARY KEY)`
      yield* SqlProducerQueue.makeSql({ queueName: queue, tablePrefix })
    }).pipe(Effect.provide(pgClientLayer()))

    const first = yield* spawnNode({ ROLE: "producer", PORT: "0", ...shared }, fixture)
    const consumer = yield* spawnNode({ ROLE: "consumer", PORT: "0", PEER_PORT: String(first.port), LOG: log, ...shared }, fixture)
    first.send(`PEER ${consumer.port}`)
    const writerNodes = yield* Effect.forEach(writers, (name) =>
      spawnNode({ ROLE: "writer", WRITER: name, PLAN: plans[name], ORDERS: orders, ...shared }, fixture))
    for (const node of writerNodes) node.send("GO")
    const started = Date.now()
    const expected = committedIds(plans)

    // The writers pause after each third of their plans. The producer dies once they are a third
    // through and some of their messages were delivered; they write the second third while no
    // producer runs (their messages wait in the backlog), the last one beside the restarted one.
    const paused = Effect.forEach(writerNodes, (node) => node.next("PAUSED", Duration.seconds(60)))
    yield* paused
    yield* waitFor("some deliveries", () => countLines(log) >= 20, 60_000)
    yield* first.kill("SIGKILL")
    const deliveredBeforeKill = countLines(log)
    const killedAt = Date.now() - started
    for (const node of writerNodes) node.send("RESUME")
    yield* paused
    const second = yield* spawnNode({ ROLE: "producer", PORT: String(first.port), ...shared }, fixture)
    second.send(`PEER ${consumer.port}`)
    for (const node of writerNodes) node.send("RESUME")
    const done = yield* Effect.forEach(writerNodes, (node) => Effect.map(node.next("DONE", Duration.seconds(60)), Number))
    const writersDoneAt = Date.now() - started
    yield* waitFor("every committed message", () => new Set(readIds(log)).size >= expected.length, 60_000)
    const committedRows = yield* Effect.gen(function*() {
      const sql = yield* SqlClient
      return (yield* sql<{ readonly id: string }>`SELECT id FROM ${sql(orders)}`).map((row) => row.id)
    }).pipe(Effect.provide(pgClientLayer()))
    console.log(`killed at ${killedAt}ms, writers done at ${writersDoneAt}ms, every message delivered at ${Date.now() - started}ms`)
    return { expected, done, committedRows, deliveredBeforeKill, delivered: readIds(log), stored: yield* storedOrder(tablePrefix, queue) }
  })

const run = () =>
  it.live("two writer processes fill one queue inside their transactions; the producer process is killed and restarted: every committed message, in backlog order, no rolled back one", () =>
    Effect.gen(function*() {
      const seed = Number(process.env.RELIABLE_OUTBOX_SEED ?? 1515)
      const { committedRows, deliveredBeforeKill, delivered, done, expected, stored } = yield* outboxScenario(seed)
      const expectedSet = new Set(expected)
      // The plan held: the application's rows are exactly the committed transactions.
      expect(done.reduce((sum, count) => sum + count, 0)).toBe(expected.length)
      expect([...committedRows].sort()).toEqual([...expected].sort())
      // The producer was killed mid-way: after some deliveries, before the writers' second thirds.
      const firstThirds = expected.filter((id) => Number(id.split("-")[1]) < transactionsPerWriter / 3).length
      expect(deliveredBeforeKill).toBeGreaterThanOrEqual(20)
      expect(deliveredBeforeKill).toBeLessThanOrEqual(firstThirds)
      // No rolled back message was stored or delivered; every committed one was stored once.
      expect(delivered.filter((id) => !expectedSet.has(id))).toEqual([])
      expect([...stored].sort()).toEqual([...expected].sort())
      // Backlog order: each writer's messages were taken in the order its transactions committed,
      // and deliveries follow the stored order (a redelivery after the restart may go back).
      for (const name of writers) {
        const own = stored.filter((id) => id.startsWith(`${name}-`)).map((id) => Number(id.slice(name.length + 1)))
        expect(own).toEqual([...own].sort((x, y) => x - y))
      }
      const position = new Map(stored.map((id, index) => [id, index]))
      expect(orderedAtLeastOnce(delivered.map((id) => position.get(id) ?? -1), stored.length)).toBeUndefined()
      console.log(`committed ${expected.length} of ${2 * transactionsPerWriter}, delivered before the kill ${deliveredBeforeKill}, deliveries ${delivered.length} (duplicates ${delivered.length - expected.length})`)
    }).pipe(Effect.scoped), 180_000)

describePostgres(probe, "the transactional outbox across processes (PostgreSQL)", () => {
  run()
})
