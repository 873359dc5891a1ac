/**
 * The cluster registry contract on PostgreSQL (fresh tables per test, short leases on the
 * database clock), and a takeover race between two separate clients.
 */
import { SqlClient } from "@effect/sql/SqlClient"
import { expect, it } from "@effect/vitest"
import { Context, Duration, Effect, Layer, Option } from "effect"
import * as PgClusterRegistry from "../../src/Cluster/PgClusterRegistry.js"
import { pgClientLayer, describePostgres, probePostgres, sharedClient, uniqueSuffix } from "../DurableQueue/SqlTestSupport.js"
import { dropClusterTables } from "./ClusterTestSupport.js"
import { registrySuite } from "./RegistrySuite.js"

const probe = await probePostgres
const client = sharedClient(pgClientLayer)

/** A registry on fresh tables, dropped with the scope. */
const freshRegistry = Effect.gen(function*() {
  const tablePrefix = `cr_${uniqueSuffix()}_`
  const context = yield* Layer.build(client)
  yield* Effect.addFinalizer(() => Effect.ignore(Effect.provide(dropClusterTables(tablePrefix), context)))
  return yield* Effect.provide(PgClusterRegistry.makePg({ tablePrefix }), context)
})

describePostgres(probe, "PgClusterRegistry", () => {
  registrySuite((name, body) => it.live(name, () => Effect.scoped(body())), {
    registry: freshRegistry,
    elapse: (ms) => Effect.sleep(Duration.millis(ms)),
    // long enough that a loaded machine does not let a lease lapse between two statements
    leaseMs: 500
  })

  it.live("two clients racing to relocate the same endpoints: exactly one wins each", () =>
    Effect.gen(function*() {
      const tablePrefix = `cr_${uniqueSuffix()}_`
      const shared = yield* Layer.build(client)
      yield* Effect.addFinalizer(() => Effect.ignore(Effect.provide(dropClusterTables(tablePrefix), shared)))
      // two separate connection pools, as two nodes would have
      const clientB = yield* Layer.build(pgClientLayer())
      const clientC = yield* Layer.build(pgClientLayer())
      const b = yield* Effect.provide(PgClusterRegistry.makePg({ tablePrefix }), clientB)
      const c = yield* Effect.provide(PgClusterRegistry.makePg({ tablePrefix }), clientC)
      yield* b.join({ node: "a:1", incarnation: "a1", factories: ["f"] }, 60_000)
      const names = Array.from({ length: 40 }, (_, i) => `endpoint-${i}`)
      const claimed = yield* Effect.forEach(names, (name) =>
        b.claim({ name, kind: "WorkProducer", peer: undefined, factory: "f", node: "a:1", nodeIncarnation: "a1" }))
      yield* b.leave("a:1", "a1")
      yield* b.join({ node: "b:1", incarnation: "b1", factories: ["f"] }, 60_000)
      yield* c.join({ node: "c:1", incarnation: "c1", factories: ["f"] }, 60_000)
      const generations = claimed.map((result) => (result._tag === "Claimed" ? result.generation : -1))
      const race = (registry: typeof b, node: string, incarnation: string) =>
        Effect.forEach(names, (name, i) => registry.takeOver(name, generations[i], node, incarnation), { concurrency: 8 })
      const [byB, byC] = yield* Effect.all([race(b, "b:1", "b1"), race(c, "c:1", "c1")], { concurrency: "unbounded" })
      const endpoints = yield* b.endpoints
      for (const [i, name] of names.entries()) {
        expect([Option.isSome(byB[i]), Option.isSome(byC[i])].filter(Boolean).length).toBe(1)
        expect(endpoints.find((r) => r.name === name)?.node).toBe(Option.isSome(byB[i]) ? "b:1" : "c:1")
      }
      // the migrations ran on both clients without trouble; the tables hold one row per node
      const sql = Context.get(shared, SqlClient)
      const nodes = yield* sql`SELECT node FROM ${sql(`${tablePrefix}cluster_nodes`)} ORDER BY node`
      expect(nodes.map((row) => row.node)).toEqual(["b:1", "c:1"])
    }).pipe(Effect.scoped))
})
