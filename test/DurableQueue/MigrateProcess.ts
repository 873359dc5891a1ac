/**
 * A process that builds a SQL producer and work queue on the SQLite file `SQLITE_FILE` with the
 * table prefix `TABLE_PREFIX` (running the migrations), then exits: 0 when it worked, 1 with the
 * error on stderr. Several at once check that concurrent first migrations stay safe.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Effect } from "effect"
import * as SqlProducerQueue from "../../src/DurableQueue/SqlProducerQueue.js"
import * as SqlWorkQueue from "../../src/DurableQueue/SqlWorkQueue.js"

const tablePrefix = process.env.TABLE_PREFIX ?? "reliable_"

Effect.all([
  SqlProducerQueue.makeSql({ queueName: "orders", tablePrefix }),
  SqlWorkQueue.makeWorkSql({ queueName: "jobs", tablePrefix })
]).pipe(
  Effect.provide(SqliteClient.layer({ filename: process.env.SQLITE_FILE! })),
  Effect.runPromise
).then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(String(error))
    process.exit(1)
  }
)
