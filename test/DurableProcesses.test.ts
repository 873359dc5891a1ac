/**
 * A producer process crash with a durable PostgreSQL queue, across real processes on 127.0.0.1:
 * the producer node is killed with SIGKILL mid-flow; a new process on the same queue (and the
 * same port, the address the consumer names) reloads what was stored, redelivers what was
 * unconfirmed, resubmits its whole source (first write wins: nothing is stored or dispatched
 * twice) and the flow continues to the end.
 */
import { expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql/SqlClient"
import { Duration, Effect } from "effect"
import * as Path from "node:path"
import { dropTables, pgClientLayer, describePostgres, probePostgres, uniqueSuffix } from "./DurableQueue/SqlTestSupport.js"
import { countLines, readLog, spawnNode, tempDir } from "./support/Processes.js"

const probe = await probePostgres
const messages = 6_000
const window = 50

/** Every index 0..total-1 arrived; runs are contiguous and never skip ahead (redelivery may go back). */
const orderedAtLeastOnce = (indices: ReadonlyArray<number>, total: number): string | undefined => {
  const seen = new Set(indices)
  for (let index = 0; index < total; index++) if (!seen.has(index)) return `message ${index} never delivered`
  let highest = -1
  for (const index of indices) {
    if (index > highest + 1) return `skipped from ${highest} to ${index}`
    highest = Math.max(highest, index)
  }
  return undefined
}

const waitFor = (what: string, done: () => boolean, timeoutMs: number) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    while (!done()) {
      if (Date.now() > deadline) return yield* Effect.fail(new Error(`timed out waiting for ${what}`))
      yield* Effect.sleep(Duration.millis(25))
    }
  })

/** The confirmation watermark the producer has persisted (0 before its first write). */
const persistedConfirmed = (tablePrefix: string, queue: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    const rows = yield* sql<{ readonly confirmed_seq: string | number }>`SELECT confirmed_seq FROM ${sql(`${tablePrefix}producer_queues`)} WHERE name = ${queue}`
    return rows.length === 0 ? 0 : Number(rows[0].confirmed_seq)
  }).pipe(Effect.catchAll(() => Effect.succeed(0)), Effect.provide(pgClientLayer()))

const crashScenario = Effect.gen(function*() {
  const dir = yield* tempDir
  const log = Path.join(dir, "deliveries.log")
  const tablePrefix = `crash_${uniqueSuffix()}_`
  const queue = `orders-${uniqueSuffix()}`
  const durable = { PG_QUEUE: queue, PG_PREFIX: tablePrefix, MESSAGES: String(messages) }
  yield* Effect.addFinalizer(() => dropTables(tablePrefix).pipe(Effect.provide(pgClientLayer()), Effect.ignore))

  const first = yield* spawnNode({ ROLE: "producer", PORT: "0", ...durable })
  const consumer = yield* spawnNode({ ROLE: "consumer", PORT: "0", PEER_PORT: String(first.port), LOG: log, WINDOW: String(window) })
  first.send(`PEER ${consumer.port}`)
  yield* waitFor("a third of the messages", () => countLines(log) >= messages / 3, 60_000)
  // Kill once a watermark well above a window is on disk, so the run shows which confirmed
  // messages come back: none.
  const deadline = Date.now() + 10_000
  while ((yield* persistedConfirmed(tablePrefix, queue)) <= 4 * window && Date.now() < deadline) {
    yield* Effect.sleep(Duration.millis(10))
  }
  yield* first.kill("SIGKILL")
  const deliveredBeforeCrash = countLines(log)
  const confirmedAtCrash = yield* persistedConfirmed(tablePrefix, queue)

  // The restarted producer process: same queue, same address; it resubmits its whole source.
  const second = yield* spawnNode({ ROLE: "producer", PORT: String(first.port), ...durable })
  second.send(`PEER ${consumer.port}`)
  yield* waitFor("every message", () => new Set(readLog(log, 1).map((entry) => entry.index)).size === messages, 90_000)
  yield* second.next("SENT", Duration.seconds(60))

  const indices = readLog(log, 1).map((entry) => entry.index)
  return { indices, deliveredBeforeCrash, confirmedAtCrash }
})

const run = () => it.live("a producer process killed mid-flow: a new process on the same PostgreSQL queue finishes the work", () =>
  Effect.gen(function*() {
    const { confirmedAtCrash, deliveredBeforeCrash, indices } = yield* crashScenario
    expect(deliveredBeforeCrash).toBeGreaterThanOrEqual(messages / 3)
    expect(deliveredBeforeCrash).toBeLessThan(messages)
    expect(confirmedAtCrash).toBeGreaterThan(4 * window)
    expect(orderedAtLeastOnce(indices, messages)).toBeUndefined()
    // Only what the persisted watermark did not cover comes again: the new process resubmits
    // every message, and the ones below the watermark are recognised (first write wins) and never
    // dispatched twice. What comes again is at most what the first process got delivered (before
    // the kill, plus up to a window already on its way) above the watermark.
    const duplicates = indices.length - messages
    console.log(`delivered before the kill ${deliveredBeforeCrash}, watermark ${confirmedAtCrash}, duplicates ${duplicates}`)
    expect(duplicates).toBeLessThanOrEqual(deliveredBeforeCrash + window - confirmedAtCrash)
  }).pipe(Effect.scoped), 180_000)

describePostgres(probe, "durable producer crash across processes (PostgreSQL)", () => {
  run()
})
