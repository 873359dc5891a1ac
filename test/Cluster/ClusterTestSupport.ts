/**
 * Test support for cluster mode on PostgreSQL: cluster members as child processes
 * (`test/fixtures/ClusterNode.ts`) or in the test process, the test's own registry view, the
 * state of a durable work queue, and dropping a test's tables.
 */
import { SqlClient } from "@effect/sql/SqlClient"
import { Context, Duration, Effect, Exit, Layer, Schedule, Scope } from "effect"
import { fileURLToPath } from "node:url"
import * as PgClusterRegistry from "../../src/Cluster/PgClusterRegistry.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as SocketTransport from "../../src/Transport/SocketTransport.js"
import { Transport } from "../../src/Transport/Transport.js"
import { dropTables, pgClientLayer } from "../DurableQueue/SqlTestSupport.js"
import { clientLayer } from "../support/OutageFlow.js"
import { spawnNode } from "../support/Processes.js"

const script = fileURLToPath(new URL("../fixtures/ClusterNode.ts", import.meta.url))

/** Drops every cluster registry table of a prefix (the test's own, randomly named). */
export const dropClusterTables = (tablePrefix: string): Effect.Effect<void, unknown, SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    for (const table of ["cluster_endpoints", "cluster_nodes", "cluster_migrations", "cluster_schema_migrations"]) {
      yield* sql`DROP TABLE IF EXISTS ${sql(`${tablePrefix}${table}`)}`
    }
  })

/** Drops the registry and the work queue tables of a prefix: every table whose name starts with it. */
export const dropAll = (tablePrefix: string): Effect.Effect<void, unknown, SqlClient> => dropTables(tablePrefix)

export interface ClusterEnv {
  readonly prefix: string
  readonly leaseMs: number
  readonly renewMs: number
  readonly jobs?: number
  /** The PostgreSQL the member uses (default RELIABLE_PG_URL): a proxy, or a throwaway cluster. */
  readonly pgUrl?: string
  /** A steady job source: jobs per second from `jobStartMs` (see the fixture). */
  readonly jobRate?: number
  readonly jobStartMs?: number
  /** A file the test writes the number of jobs into once it knows it (see the fixture). */
  readonly jobsFile?: string
  /** The file the member's dispatcher samples its dispatching into (see the fixture). */
  readonly dispatchLog?: string
}

/** A cluster member child process (SIGKILLed with the scope). */
export const spawnMember = (cluster: ClusterEnv) =>
  spawnNode({
    PORT: "0",
    PG_PREFIX: cluster.prefix,
    LEASE_MS: String(cluster.leaseMs),
    RENEW_MS: String(cluster.renewMs),
    JOBS: String(cluster.jobs ?? 0),
    ...(cluster.pgUrl === undefined ? {} : { RELIABLE_PG_URL: cluster.pgUrl }),
    ...(cluster.jobRate === undefined ? {} : { JOB_RATE: String(cluster.jobRate), JOB_START_MS: String(cluster.jobStartMs ?? Date.now()) }),
    ...(cluster.dispatchLog === undefined ? {} : { DISPATCH_LOG: cluster.dispatchLog }),
    ...(cluster.jobsFile === undefined ? {} : { JOBS_FILE: cluster.jobsFile })
  }, script)

/** A cluster member in the test process, on its own TCP port and PostgreSQL client. */
export const startMember = (cluster: ClusterEnv) =>
  Effect.gen(function*() {
    const scope = yield* Effect.acquireRelease(Scope.make(), (scope) => Scope.close(scope, Exit.void))
    const layer = ReliableSystem.layerCluster({
      lease: Duration.millis(cluster.leaseMs),
      renewInterval: Duration.millis(cluster.renewMs)
    }).pipe(
      Layer.provideMerge(SocketTransport.layerSocket({ host: "127.0.0.1", port: 0, reconnect: Schedule.spaced(Duration.millis(20)) })),
      Layer.provide(PgClusterRegistry.layerPg({ tablePrefix: cluster.prefix })),
      Layer.provide(cluster.pgUrl === undefined ? pgClientLayer() : clientLayer(cluster.pgUrl))
    )
    const context = yield* Layer.buildWithScope(layer, scope)
    return {
      context,
      system: Context.get(context, ReliableSystem.ReliableSystem),
      run: <A, E>(effect: Effect.Effect<A, E, ReliableSystem.ReliableSystem | Transport | Scope.Scope>) =>
        effect.pipe(Effect.provide(context), Effect.provideService(Scope.Scope, scope))
    }
  })

/** The state counts of a durable work queue: stored (0), accepted (1), confirmed (2). */
export const workQueueStates = (tablePrefix: string, queue: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    const rows = yield* sql<{ readonly state: number | string; readonly n: number | string }>`
      SELECT state, count(*) AS n FROM ${sql(`${tablePrefix}work_entries`)} WHERE queue = ${queue} GROUP BY state`
    const counts = [0, 0, 0]
    for (const row of rows) counts[Number(row.state)] = Number(row.n)
    return { stored: counts[0], accepted: counts[1], confirmed: counts[2] }
  })
