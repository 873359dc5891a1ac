/**
 * The move to `@effect/sql`'s `Migrator`: a database migrated by the hand-written runners (the
 * queues' `<prefix>migrations`, the registry's `<prefix>cluster_migrations`, rows `version, name`)
 * is picked up without running anything again, its data converted to version 2's states; first
 * migrations from several clients at once stay safe.
 *
 * The old layout is created here by the old runner's own statements (versions 1-3), kept below as
 * they were. Running version 3 again would fail (its column exists), so a build that succeeds ran
 * none of them.
 */
import { SqlClient } from "@effect/sql/SqlClient"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Context, Duration, Effect, Layer } from "effect"
import * as ChildProcess from "node:child_process"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import * as PgClusterRegistry from "../../src/Cluster/PgClusterRegistry.js"
import * as SqlProducerQueue from "../../src/DurableQueue/SqlProducerQueue.js"
import * as SqlWorkQueue from "../../src/DurableQueue/SqlWorkQueue.js"
import { describePostgres, dropTables, pgClientLayer, probePostgres, sharedClient, uniqueSuffix } from "./SqlTestSupport.js"

const probe = await probePostgres

const bytes = (text: string) => new TextEncoder().encode(text)
const text = (payload: Uint8Array) => new TextDecoder().decode(payload)

/** The queues' layout as the old runner left it after versions 1-3, with its record. */
const oldQueueLayout = (prefix: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    const pg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })
    const t = (name: string) => sql(`${prefix}${name}`)
    const bytesType = sql.literal(pg ? "BYTEA" : "BLOB")
    const fill = sql.literal(pg ? "WITH (fillfactor = 70)" : "")
    yield* sql`CREATE TABLE ${t("migrations")} (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL)`
    yield* sql`CREATE TABLE ${t("producer_queues")} (
      name TEXT NOT NULL PRIMARY KEY, epoch BIGINT NOT NULL, current_seq BIGINT NOT NULL, confirmed_seq BIGINT NOT NULL)`
    yield* sql`CREATE TABLE ${t("producer_entries")} (
      queue TEXT NOT NULL, seq BIGINT NOT NULL, business_id TEXT NOT NULL, part INTEGER NOT NULL, part_count INTEGER NOT NULL,
      payload ${bytesType} NOT NULL, accepted SMALLINT NOT NULL, PRIMARY KEY (queue, seq)) ${fill}`
    yield* sql`CREATE UNIQUE INDEX ${t("producer_entries_business")} ON ${t("producer_entries")} (queue, business_id, part)`
    yield* sql`CREATE TABLE ${t("work_queues")} (name TEXT NOT NULL PRIMARY KEY, epoch BIGINT NOT NULL, current_seq BIGINT NOT NULL)`
    yield* sql`CREATE TABLE ${t("work_entries")} (
      queue TEXT NOT NULL, seq BIGINT NOT NULL, message_id TEXT NOT NULL, payload ${bytesType} NOT NULL,
      state SMALLINT NOT NULL, PRIMARY KEY (queue, seq)) ${fill}`
    yield* sql`CREATE UNIQUE INDEX ${t("work_entries_message")} ON ${t("work_entries")} (queue, message_id)`
    yield* sql`ALTER TABLE ${t("work_queues")} ADD COLUMN settled_seq BIGINT NOT NULL DEFAULT 0`
    if (pg) {
      yield* sql`ALTER TABLE ${t("work_entries")} SET (fillfactor = 50)`
      yield* sql`ALTER TABLE ${t("producer_entries")} SET (fillfactor = 50)`
    }
    yield* sql`INSERT INTO ${t("migrations")} (version, name)
      VALUES (1, 'producer_queue'), (2, 'work_queue'), (3, 'in_place_updates')`
    // a producer queue under watermark 3: a and c confirmed (compacted), b stored and never
    // accepted below it, d accepted above it, e stored above it
    yield* sql`INSERT INTO ${t("producer_queues")} VALUES ('orders', 7, 5, 3)`
    const entry = (seq: number, id: string, payload: string, accepted: number) =>
      sql`INSERT INTO ${t("producer_entries")} (queue, seq, business_id, part, part_count, payload, accepted)
        VALUES ('orders', ${seq}, ${id}, 0, 0, ${Buffer.from(payload)}, ${accepted})`
    yield* entry(1, "a", "", 1)
    yield* entry(2, "b", "b", 0)
    yield* entry(3, "c", "", 1)
    yield* entry(4, "d", "d", 1)
    yield* entry(5, "e", "e", 0)
    // a work queue: j1 confirmed, j2 accepted, j3 stored
    yield* sql`INSERT INTO ${t("work_queues")} (name, epoch, current_seq) VALUES ('jobs', 2, 3)`
    const job = (seq: number, id: string, state: number) =>
      sql`INSERT INTO ${t("work_entries")} VALUES ('jobs', ${seq}, ${id}, ${Buffer.from(state === 2 ? "" : id)}, ${state})`
    yield* job(1, "j1", 2)
    yield* job(2, "j2", 1)
    yield* job(3, "j3", 0)
  })

const migrationRows = (table: string) =>
  Effect.flatMap(SqlClient, (sql) =>
    Effect.map(
      sql<{ readonly migration_id: number | string; readonly name: string }>`SELECT migration_id, name FROM ${sql(table)} ORDER BY migration_id`,
      (rows) => rows.map((row) => [Number(row.migration_id), row.name])
    ))

const tableExists = (table: string) =>
  Effect.flatMap(SqlClient, (sql) =>
    Effect.map(
      sql.onDialectOrElse({
        pg: () => sql`SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = ${table}`,
        orElse: () => sql`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ${table}`
      }),
      (rows) => rows.length > 0
    ))

const migrateProcess = fileURLToPath(new URL("./MigrateProcess.ts", import.meta.url))

/** Runs `count` processes that build the queues of `prefix` on the SQLite file at once; all must succeed. */
const migrateInProcesses = (filename: string, prefix: string, count: number) =>
  Effect.all(
    Array.from({ length: count }, () =>
      Effect.async<void, Error>((resume) => {
        let stderr = ""
        const child = ChildProcess.spawn(process.execPath, ["--import", "tsx", migrateProcess], {
          env: { ...process.env, SQLITE_FILE: filename, TABLE_PREFIX: prefix },
          stdio: ["ignore", "ignore", "pipe"]
        })
        child.stderr!.on("data", (data) => void (stderr += String(data)))
        child.on("exit", (code) => resume(code === 0 ? Effect.void : Effect.fail(new Error(`migrating process exited ${code}: ${stderr}`))))
        return Effect.sync(() => void child.kill("SIGKILL"))
      }).pipe(Effect.timeoutFail({ duration: Duration.seconds(60), onTimeout: () => new Error("a migrating process took over 60s") }))),
    { concurrency: "unbounded", discard: true }
  )

const queueMigrations = [
  [1, "producer_queue"],
  [2, "work_queue"],
  [3, "in_place_updates"],
  [4, "entry_states"],
  [5, "entry_details"],
  [6, "backlogs"]
]

/** Builds the queues of `prefix` from several clients (or processes) at once. */
type BuildConcurrently = (prefix: string) => Effect.Effect<void, unknown>

const upgradeTests = (client: () => Layer.Layer<SqlClient, unknown>, buildConcurrently: BuildConcurrently) =>
  it.scoped("a database the old runner migrated is picked up: nothing runs again, its data takes version 2's states", () =>
    Effect.gen(function*() {
      const prefix = `mig_${uniqueSuffix()}_`
      yield* Effect.addFinalizer(() => Effect.orDie(Effect.provide(dropTables(prefix), client())))
      yield* oldQueueLayout(prefix)
      // first migrations from several clients at once: the move and the new migrations happen once
      yield* buildConcurrently(prefix)
      expect(yield* migrationRows(`${prefix}queue_migrations`)).toEqual(queueMigrations)
      expect(yield* tableExists(`${prefix}migrations`)).toBe(false)

      const producer = yield* SqlProducerQueue.makeSql({ queueName: "orders", tablePrefix: prefix })
      const { epoch, state } = yield* producer.load
      expect(epoch).toBe(8)
      // the low mark stops below b, stored and never accepted; d is the one accepted entry
      expect([state.currentSeq, state.confirmedSeq, state.unconfirmed.map((entry) => entry.messageId)]).toEqual([5, 1, ["d"]])
      const again = yield* producer.store(epoch, { messageId: "b", payload: bytes("other") })
      expect([again.alreadyStored, again.accepted, text(again.entries[0].payload)]).toEqual([true, false, "b"])
      // accepted now, b lies below the old watermark: it is loaded, and confirmed by a later confirm
      yield* producer.accept(epoch, "b")
      const reloaded = yield* producer.load
      expect(reloaded.state.unconfirmed.map((entry) => entry.messageId)).toEqual(["b", "d"])
      yield* producer.confirm(reloaded.epoch, 4)
      const confirmed = yield* producer.load
      expect([confirmed.state.confirmedSeq, confirmed.state.unconfirmed]).toEqual([4, []])
      const inspection = yield* producer.inspect({ limit: 10 })
      expect(inspection.entries.map((entry) => [entry.messageId, entry.state])).toEqual([
        ["a", "Confirmed"],
        ["b", "Confirmed"],
        ["c", "Confirmed"],
        ["d", "Confirmed"],
        ["e", "Stored"]
      ])

      const work = yield* SqlWorkQueue.makeWorkSql({ queueName: "jobs", tablePrefix: prefix })
      const jobs = yield* work.load
      expect([jobs.epoch, jobs.state.currentSeq, jobs.state.pending.map((entry) => entry.messageId)]).toEqual([3, 3, ["j2"]])
      // a later build runs nothing
      yield* SqlProducerQueue.makeSql({ queueName: "orders", tablePrefix: prefix })
      expect(yield* migrationRows(`${prefix}queue_migrations`)).toEqual(queueMigrations)
    }).pipe(Effect.provide(client())))

describe("migrations on SQLite", () => {
  const filename = join(tmpdir(), `effect-reliable-migrations-${uniqueSuffix()}.db`)
  sharedClient(() => SqliteClient.layer({ filename }), Effect.sync(() => {
    for (const suffix of ["", "-wal", "-shm"]) rmSync(`${filename}${suffix}`, { force: true })
  }))
  // separate processes: in one process, separate clients on one file would block each other's
  // thread while they wait for SQLite's lock
  upgradeTests(() => SqliteClient.layer({ filename }), (prefix) => migrateInProcesses(filename, prefix, 3))

  it.scoped("a fresh prefix migrates once from several processes at once", () =>
    Effect.gen(function*() {
      const prefix = `mig_${uniqueSuffix()}_`
      yield* migrateInProcesses(filename, prefix, 4)
      expect(yield* migrationRows(`${prefix}queue_migrations`)).toEqual(queueMigrations)
    }).pipe(Effect.provide(SqliteClient.layer({ filename }))))
})

/** Builds on separate pools at once: PostgreSQL serializes them as it would separate processes. */
const migrateOnPools = (count: number) => (prefix: string) =>
  Effect.all(
    Array.from({ length: count }, (_, i) =>
      Effect.scoped(Layer.build(
        (i % 2 === 0
          ? Layer.map(SqlProducerQueue.layerSql({ queueName: "orders", tablePrefix: prefix }), () => Context.empty())
          : Layer.map(SqlWorkQueue.layerWorkSql({ queueName: "jobs", tablePrefix: prefix }), () => Context.empty()))
          .pipe(Layer.provide(pgClientLayer()))
      ))),
    { concurrency: "unbounded", discard: true }
  )

describePostgres(probe, "migrations on PostgreSQL", () => {
  upgradeTests(pgClientLayer, migrateOnPools(4))

  it.scoped("the cluster registry's old record moves over once; its migration does not run again", () =>
    Effect.gen(function*() {
      const prefix = `mig_${uniqueSuffix()}_`
      yield* Effect.addFinalizer(() => Effect.orDie(Effect.provide(dropTables(prefix), pgClientLayer())))
      const sql = yield* SqlClient
      const t = (name: string) => sql(`${prefix}${name}`)
      // the old runner's version 1, without the factory index: were it run again, the index would appear
      yield* sql`CREATE TABLE ${t("cluster_migrations")} (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL)`
      yield* sql`CREATE TABLE ${t("cluster_nodes")} (node TEXT NOT NULL PRIMARY KEY, incarnation TEXT NOT NULL,
        factories TEXT[] NOT NULL, lease_expires_at TIMESTAMPTZ NOT NULL, joined_at TIMESTAMPTZ NOT NULL)`
      yield* sql`CREATE TABLE ${t("cluster_endpoints")} (name TEXT NOT NULL PRIMARY KEY, kind TEXT NULL, peer TEXT NULL,
        factory TEXT NULL, node TEXT NOT NULL, node_incarnation TEXT NOT NULL, generation BIGINT NOT NULL, updated_at TIMESTAMPTZ NOT NULL)`
      yield* sql`INSERT INTO ${t("cluster_migrations")} VALUES (1, 'cluster_registry')`
      yield* Effect.all(
        Array.from({ length: 3 }, () =>
          Effect.scoped(Layer.build(PgClusterRegistry.layerPg({ tablePrefix: prefix }).pipe(Layer.provide(pgClientLayer()))))),
        { concurrency: "unbounded" }
      )
      expect(yield* migrationRows(`${prefix}cluster_schema_migrations`)).toEqual([[1, "cluster_registry"]])
      expect(yield* tableExists(`${prefix}cluster_migrations`)).toBe(false)
      const indexes = yield* sql<{ readonly indexname: string }>`SELECT indexname FROM pg_indexes WHERE tablename = ${`${prefix}cluster_endpoints`}`
      expect(indexes.map((row) => row.indexname)).toEqual([`${prefix}cluster_endpoints_pkey`])
    }).pipe(Effect.provide(pgClientLayer())))

  it.scoped("a prefix with capitals builds again (the Migrator finds its table) and keeps a migrations table of its own", () =>
    Effect.gen(function*() {
      const suffix = uniqueSuffix()
      const [upper, lower] = [`Mig_${suffix}_`, `mig_${suffix}_`]
      yield* Effect.addFinalizer(() => Effect.orDie(Effect.provide(Effect.all([dropTables(upper), dropTables(lower)]), pgClientLayer())))
      for (const tablePrefix of [upper, lower, upper, lower]) yield* SqlProducerQueue.makeSql({ queueName: "q", tablePrefix })
      const sql = yield* SqlClient
      const tables = yield* sql<{ readonly name: string }>`SELECT tablename AS name FROM pg_tables
        WHERE schemaname = current_schema() AND starts_with(lower(tablename), ${lower}) AND tablename LIKE '%migrations%'`
      expect(tables.map((row) => row.name).sort()).toEqual([`${lower}queue_migrations`, expect.stringMatching(new RegExp(`^${lower}queue_migrations_[0-9a-z]+$`))])
      for (const { name } of tables) expect(yield* migrationRows(name)).toEqual(queueMigrations)
    }).pipe(Effect.provide(pgClientLayer())))

  it.scoped("a fresh prefix migrates once from several clients at once", () =>
    Effect.gen(function*() {
      const prefix = `mig_${uniqueSuffix()}_`
      yield* Effect.addFinalizer(() => Effect.orDie(Effect.provide(dropTables(prefix), pgClientLayer())))
      yield* migrateOnPools(4)(prefix)
      expect(yield* migrationRows(`${prefix}queue_migrations`)).toEqual(queueMigrations)
    }).pipe(Effect.provide(pgClientLayer())))
})
