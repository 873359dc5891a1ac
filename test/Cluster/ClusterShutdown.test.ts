/**
 * A cluster member closed while its registry's PostgreSQL hangs (a proxy that forwards nothing):
 * the close ends within its bounds, about two leases (its endpoints' name releases and its leave
 * each wait a lease at most, then go on in the background), not when the database answers again.
 */
import { expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Option, Schema, Scope } from "effect"
import * as Consumer from "../../src/Consumer.js"
import { describePostgres, dropTables, pgClientLayer, pgUrl, probePostgres, sharedClient, uniqueSuffix } from "../DurableQueue/SqlTestSupport.js"
import * as PgProxy from "../support/PgProxy.js"
import { startMember } from "./ClusterTestSupport.js"

const probe = await probePostgres
const tablePrefix = `cluster_close_${uniqueSuffix()}_`
// Drops this file's tables at the end, through a direct connection (the proxy is gone by then).
if (probe.reachable) sharedClient(pgClientLayer, dropTables(tablePrefix))

const leaseMs = 3_000

describePostgres(probe, "closing a cluster member while its database hangs", () => {
  it.live("the member and its pinned endpoint close within about two leases, not when the database answers again", () =>
    Effect.gen(function*() {
      const proxy = yield* PgProxy.make(pgUrl)
      const memberScope = yield* Scope.make()
      const member = yield* startMember({ prefix: tablePrefix, leaseMs, renewMs: 500, pgUrl: proxy.url }).pipe(Scope.extend(memberScope))
      // A pinned endpoint: closing it releases its name in the registry.
      yield* member.run(Consumer.make({ name: "pinned-in", producer: "nobody", payload: Schema.Number }))
      yield* Effect.sleep("1 second")
      yield* proxy.blackhole
      yield* Effect.sleep("700 millis")
      const closingAt = Date.now()
      const closing = yield* Effect.fork(Scope.close(memberScope, Exit.void))
      const closed = yield* Effect.option(Effect.timeout(Fiber.await(closing), "30 seconds"))
      const closeMs = Date.now() - closingAt
      yield* proxy.heal
      console.log(`cluster member closed in ${closeMs} ms while its database hung (lease ${leaseMs} ms, connectTimeout 2 s)`)
      expect(Option.isSome(closed)).toBe(true)
      expect(closeMs).toBeLessThan(2 * leaseMs + 4_000)
    }).pipe(Effect.scoped), 60_000)
})
