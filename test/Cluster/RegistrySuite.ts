/**
 * The cluster registry contract as tests, run against every implementation: the in-memory one
 * under `TestClock`, PostgreSQL on the live clock. `elapse` lets lease time pass.
 */
import { expect } from "@effect/vitest"
import { Effect, Option } from "effect"
import type { Scope } from "effect"
import type { ClusterRegistryError } from "../../src/Cluster/ClusterErrors.js"
import type { ClaimRequest, ClusterRegistryService } from "../../src/Cluster/ClusterRegistry.js"

type Test = (name: string, body: () => Effect.Effect<void, unknown, Scope.Scope>) => void

export interface SuiteOptions {
  /** A fresh, empty registry. */
  readonly registry: Effect.Effect<ClusterRegistryService, unknown, Scope.Scope>
  /** Lets `ms` of registry time pass. */
  readonly elapse: (ms: number) => Effect.Effect<void>
  /** The lease used throughout, in ms. */
  readonly leaseMs: number
}

const request = (name: string, node: string, incarnation: string, factory?: string): ClaimRequest => ({
  name,
  kind: "Producer",
  peer: "peer",
  factory,
  node,
  nodeIncarnation: incarnation
})

const join = (registry: ClusterRegistryService, node: string, incarnation: string, leaseMs: number, factories: ReadonlyArray<string> = ["f"]) =>
  registry.join({ node, incarnation, factories }, leaseMs)

const generationOf = (claim: Effect.Effect<{ readonly _tag: string; readonly generation?: number }, ClusterRegistryError>) =>
  Effect.map(claim, (result) => {
    expect(result._tag).toBe("Claimed")
    return result.generation!
  })

export const registrySuite = (test: Test, options: SuiteOptions): void => {
  const { elapse, leaseMs } = options
  const past = leaseMs + Math.ceil(leaseMs / 4)

  test("leases: renewing keeps a member live; an expired lease stays lost", () =>
    Effect.gen(function*() {
      const registry = yield* options.registry
      yield* join(registry, "a:1", "a1", leaseMs)
      expect((yield* registry.members).map((m) => m.node)).toEqual(["a:1"])
      yield* elapse(leaseMs / 2)
      expect(yield* registry.renew("a:1", "a1", leaseMs)).toBe(true)
      yield* elapse(leaseMs / 2)
      expect(yield* registry.renew("a:1", "a1", leaseMs)).toBe(true)
      yield* elapse(past)
      expect(yield* registry.members).toEqual([])
      expect(yield* registry.renew("a:1", "a1", leaseMs)).toBe(false)
      // only a fresh join brings the node back
      yield* join(registry, "a:1", "a2", leaseMs)
      expect(yield* registry.renew("a:1", "a1", leaseMs)).toBe(false)
      expect(yield* registry.renew("a:1", "a2", leaseMs)).toBe(true)
      const [member] = yield* registry.members
      expect(member.incarnation).toBe("a2")
      expect(member.factories).toEqual(["f"])
    }))

  test("names are unique among live records; a dead node's name can be claimed again", () =>
    Effect.gen(function*() {
      const registry = yield* options.registry
      yield* join(registry, "a:1", "a1", leaseMs)
      yield* join(registry, "b:1", "b1", leaseMs)
      const first = yield* generationOf(registry.claim(request("orders", "a:1", "a1")))
      expect(yield* registry.claim(request("orders", "b:1", "b1"))).toEqual({ _tag: "Taken", owner: "a:1" })
      expect(Option.map(yield* registry.resolve("orders"), (r) => r.node)).toEqual(Option.some("a:1"))
      yield* elapse(leaseMs / 2)
      yield* registry.renew("b:1", "b1", leaseMs)
      yield* elapse(past - leaseMs / 2)
      expect(yield* registry.resolve("orders")).toEqual(Option.none())
      expect(yield* registry.renew("b:1", "b1", leaseMs)).toBe(true)
      const second = yield* generationOf(registry.claim(request("orders", "b:1", "b1")))
      expect(second).toBeGreaterThan(first)
      expect(Option.map(yield* registry.resolve("orders"), (r) => [r.node, r.generation])).toEqual(Option.some(["b:1", second]))
    }))

  test("a replaced node incarnation owns nothing until it reclaims", () =>
    Effect.gen(function*() {
      const registry = yield* options.registry
      yield* join(registry, "a:1", "a1", leaseMs)
      const generation = yield* generationOf(registry.claim(request("orders", "a:1", "a1")))
      yield* join(registry, "a:1", "a2", leaseMs)
      expect(yield* registry.resolve("orders")).toEqual(Option.none())
      expect(yield* registry.reclaim("orders", generation + 5, "a:1", "a2")).toEqual(Option.none())
      const reclaimed = yield* registry.reclaim("orders", generation, "a:1", "a2")
      expect(reclaimed).toEqual(Option.some(generation + 1))
      expect(Option.map(yield* registry.resolve("orders"), (r) => r.nodeIncarnation)).toEqual(Option.some("a2"))
      // a stale generation changes nothing
      expect(yield* registry.reclaim("orders", generation, "a:1", "a3")).toEqual(Option.none())
    }))

  test("abandon: a live node's relocatable record becomes an orphan at once; pinned ones and stale generations stay", () =>
    Effect.gen(function*() {
      const registry = yield* options.registry
      yield* join(registry, "a:1", "a1", leaseMs)
      const relocatable = yield* generationOf(registry.claim(request("orders", "a:1", "a1", "f")))
      const pinned = yield* generationOf(registry.claim(request("pinned", "a:1", "a1")))
      expect(yield* registry.abandon("pinned", pinned)).toEqual(Option.none())
      expect(yield* registry.abandon("orders", relocatable + 1)).toEqual(Option.none())
      expect(yield* registry.abandon("orders", relocatable)).toEqual(Option.some(relocatable + 1))
      expect(yield* registry.resolve("orders")).toEqual(Option.none())
      expect((yield* registry.owned("a:1", "a1")).map((r) => r.name)).toEqual(["pinned"])
      // the node that gave it up may take it back like any survivor
      expect((yield* registry.orphans(["f"])).map((r) => r.name)).toEqual(["orders"])
      expect(yield* registry.takeOver("orders", relocatable + 1, "a:1", "a1")).toEqual(Option.some(relocatable + 2))
      expect(yield* registry.orphans(["f"])).toEqual([])
    }))

  test("release deletes only the generation it names", () =>
    Effect.gen(function*() {
      const registry = yield* options.registry
      yield* join(registry, "a:1", "a1", leaseMs)
      const generation = yield* generationOf(registry.claim(request("orders", "a:1", "a1")))
      yield* registry.release("orders", generation + 1)
      expect(Option.isSome(yield* registry.get("orders"))).toBe(true)
      yield* registry.release("orders", generation)
      expect(yield* registry.get("orders")).toEqual(Option.none())
      expect((yield* registry.endpoints).length).toBe(0)
    }))

  test("orphans: relocatable records of dead nodes; one takeOver wins, then the new node adopts", () =>
    Effect.gen(function*() {
      const registry = yield* options.registry
      yield* join(registry, "a:1", "a1", leaseMs)
      const relocatable = yield* generationOf(registry.claim(request("orders", "a:1", "a1", "f")))
      yield* generationOf(registry.claim(request("pinned", "a:1", "a1")))
      yield* generationOf(registry.claim(request("other", "a:1", "a1", "g")))
      expect(yield* registry.orphans(["f", "g"])).toEqual([])
      expect(yield* registry.takeOver("orders", relocatable, "b:1", "b1")).toEqual(Option.none())
      yield* elapse(past)
      yield* join(registry, "b:1", "b1", leaseMs)
      expect((yield* registry.orphans(["f"])).map((r) => r.name)).toEqual(["orders"])
      expect(yield* registry.takeOver("pinned", 1, "b:1", "b1")).toEqual(Option.none())
      const moved = yield* registry.takeOver("orders", relocatable, "b:1", "b1")
      expect(moved).toEqual(Option.some(relocatable + 1))
      expect(yield* registry.takeOver("orders", relocatable, "c:1", "c1")).toEqual(Option.none())
      expect(yield* registry.orphans(["f"])).toEqual([])
      // placed on b, not started: not resolvable yet
      expect(yield* registry.resolve("orders")).toEqual(Option.none())
      expect((yield* registry.owned("b:1", "b1")).map((r) => [r.name, r.kind])).toEqual([["orders", undefined]])
      expect(yield* registry.adopt({ ...request("orders", "b:1", "b1", "f"), generation: relocatable })).toBe(false)
      expect(yield* registry.adopt({ ...request("orders", "b:1", "b1", "f"), generation: relocatable + 1 })).toBe(true)
      const resolved = yield* registry.resolve("orders")
      expect(Option.map(resolved, (r) => [r.node, r.kind, r.peer, r.factory])).toEqual(Option.some(["b:1", "Producer", "peer", "f"]))
      expect((yield* registry.owned("b:1", "b1")).map((r) => [r.name, r.kind])).toEqual([["orders", "Producer"]])
      expect((yield* registry.owned("a:1", "a1")).map((r) => r.name).sort()).toEqual(["other", "pinned"])
    }))

  test("concurrent takeovers of one orphan: exactly one wins", () =>
    Effect.gen(function*() {
      const registry = yield* options.registry
      yield* join(registry, "a:1", "a1", leaseMs)
      const names = Array.from({ length: 8 }, (_, i) => `job-${i}`)
      const generations = yield* Effect.forEach(names, (name) => generationOf(registry.claim(request(name, "a:1", "a1", "f"))))
      yield* registry.leave("a:1", "a1")
      yield* join(registry, "b:1", "b1", leaseMs)
      yield* join(registry, "c:1", "c1", leaseMs)
      const results = yield* Effect.forEach(names, (name, i) =>
        Effect.all([
          registry.takeOver(name, generations[i], "b:1", "b1"),
          registry.takeOver(name, generations[i], "c:1", "c1")
        ], { concurrency: "unbounded" }), { concurrency: "unbounded" })
      for (const pair of results) expect(pair.filter(Option.isSome).length).toBe(1)
      const owners = yield* registry.endpoints
      for (const [i, pair] of results.entries()) {
        const winner = Option.isSome(pair[0]) ? "b:1" : "c:1"
        expect(owners.find((r) => r.name === names[i])?.node).toBe(winner)
      }
    }))

  test("placement: on a live node that has the factory, unless a live node holds the name", () =>
    Effect.gen(function*() {
      const registry = yield* options.registry
      yield* join(registry, "a:1", "a1", leaseMs, ["f"])
      yield* join(registry, "b:1", "b1", leaseMs, [])
      expect(yield* registry.place("orders", "f", "z:1")).toEqual({ _tag: "NodeUnavailable" })
      expect(yield* registry.place("orders", "f", "b:1")).toEqual({ _tag: "UnknownFactory" })
      const placed = yield* registry.place("orders", "f", "a:1")
      expect(placed._tag).toBe("Placed")
      expect((yield* registry.owned("a:1", "a1")).map((r) => r.name)).toEqual(["orders"])
      expect(yield* registry.place("orders", "f", "a:1")).toEqual({ _tag: "Taken", owner: "a:1" })
      expect(yield* registry.claim(request("orders", "b:1", "b1"))).toEqual({ _tag: "Taken", owner: "a:1" })
    }))

  test("leaving ends the lease at once: the node's relocatable records are orphans", () =>
    Effect.gen(function*() {
      const registry = yield* options.registry
      yield* join(registry, "a:1", "a1", leaseMs)
      yield* generationOf(registry.claim(request("orders", "a:1", "a1", "f")))
      yield* registry.leave("a:1", "a1")
      expect(yield* registry.members).toEqual([])
      expect((yield* registry.orphans(["f"])).map((r) => r.name)).toEqual(["orders"])
      const [status] = yield* registry.endpoints
      expect(status.live).toBe(false)
    }))
}
