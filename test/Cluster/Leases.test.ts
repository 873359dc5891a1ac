/**
 * Lease timers on the TestClock: members on a memory hub and the in-memory registry (whose lease
 * clock is the TestClock). Renewals keep members live; a silent node expires one lease after its
 * last renewal and its relocatable endpoint moves on a survivor's next tick; a node that comes
 * back keeps what nobody took and is fenced from what was taken; respawn takes a name back only
 * once it is free.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Option, Queue, Schema, TestClock } from "effect"
import * as Cluster from "../../src/Cluster.js"
import * as Consumer from "../../src/Consumer.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import { makeWorld, startMember } from "./ClusterWorld.js"
import type { Member } from "./ClusterWorld.js"

const Job = Schema.Struct({ n: Schema.Number })
const timing = { lease: "3 seconds", renewInterval: "1 second" } as const

const ownerOf = (w: { readonly registry: Cluster.ClusterRegistryService }, name: string) =>
  Effect.map(w.registry.get(name), Option.map((record) => ({ node: record.node, live: record.live, kind: record.kind })))

const membersOf = (w: { readonly registry: Cluster.ClusterRegistryService }) =>
  Effect.map(w.registry.members, (members) => members.map((member) => member.node))

/** A pinned consumer that names a producer nobody runs (it only needs to exist). */
const pinned = (member: Member, name: string) => member.run(Consumer.make({ name, producer: "nowhere", payload: Job }))

describe("cluster leases (TestClock)", () => {
  it.scoped("renewals keep members live; a silent node expires one lease after its last renewal; its orphan moves on the next tick", () =>
    Effect.gen(function*() {
      const w = makeWorld(yield* Cluster.makeMemory)
      const started: Array<string> = []
      const factory = Cluster.relocatable("svc", (name) =>
        Effect.gen(function*() {
          started.push((yield* ReliableSystem.ReliableSystem).node)
          yield* Consumer.make({ name, producer: "nowhere", payload: Job })
        }))
      const options = { ...timing, relocatable: [factory] }
      const a = yield* startMember(w, "a", options)
      yield* startMember(w, "b", options)
      const spawn = yield* Effect.fork(a.run(Cluster.spawn("svc", "svc")))
      yield* TestClock.adjust(Duration.millis(100))
      yield* Fiber.join(spawn)
      expect(started).toEqual(["a"])
      for (let second = 0; second < 20; second++) {
        yield* TestClock.adjust(Duration.seconds(1))
        expect(yield* membersOf(w)).toEqual(["a", "b"])
      }
      yield* a.cutOff
      let elapsed = 0
      while (Option.getOrUndefined(yield* ownerOf(w, "svc"))?.node === "a") {
        expect(elapsed).toBeLessThan(10_000)
        yield* TestClock.adjust(Duration.millis(100))
        elapsed += 100
      }
      // a renewed at most one interval before it went silent; b looks at least once per interval
      expect(elapsed).toBeGreaterThanOrEqual(3000 - 1000)
      expect(elapsed).toBeLessThanOrEqual(3000 + 1000)
      expect(yield* membersOf(w)).toEqual(["b"])
      expect(started).toEqual(["a", "b"])
      expect(yield* ownerOf(w, "svc")).toEqual(Option.some({ node: "b", live: true, kind: "Consumer" }))
    }))

  it.scoped("a node back after its lease expired keeps the endpoints nobody took over, without a failure event", () =>
    Effect.gen(function*() {
      const w = makeWorld(yield* Cluster.makeMemory)
      const a = yield* startMember(w, "a", timing)
      yield* startMember(w, "b", timing)
      yield* pinned(a, "orders-in")
      const failures = yield* a.run(ReliableSystem.subscribeFailures)
      yield* a.cutOff
      yield* TestClock.adjust(Duration.seconds(5))
      expect(yield* ownerOf(w, "orders-in")).toEqual(Option.some({ node: "a", live: false, kind: "Consumer" }))
      yield* a.restore
      yield* TestClock.adjust(Duration.seconds(1))
      expect(yield* ownerOf(w, "orders-in")).toEqual(Option.some({ node: "a", live: true, kind: "Consumer" }))
      expect(yield* Queue.size(failures)).toBe(0)
      expect(yield* membersOf(w)).toEqual(["a", "b"])
    }))

  it.scoped("a name taken while its node was away: that node's controller is fenced; respawn is refused until the name is free", () =>
    Effect.gen(function*() {
      const w = makeWorld(yield* Cluster.makeMemory)
      const a = yield* startMember(w, "a", timing)
      const b = yield* startMember(w, "b", timing)
      yield* pinned(a, "orders-in")
      const failures = yield* a.run(ReliableSystem.subscribeFailures)
      yield* a.cutOff
      yield* TestClock.adjust(Duration.seconds(5))
      // a is dead to the cluster: b may create the name
      const onB = yield* b.run(Effect.scoped(Effect.gen(function*() {
        yield* Consumer.make({ name: "orders-in", producer: "nowhere", payload: Job })
        yield* a.restore
        yield* TestClock.adjust(Duration.seconds(1))
        const lost = yield* Queue.take(failures)
        expect(lost.endpointName).toBe("orders-in")
        expect(lost.stage).toBe("Protocol")
        expect(lost.cause).toMatchObject({ _tag: "ReliableOwnershipLost", endpointName: "orders-in", owner: "b" })
        // respawn on a while b holds the name: refused, with one more event
        yield* a.run(ReliableSystem.respawn("orders-in"))
        const refused = yield* Queue.take(failures)
        expect(refused.cause).toMatchObject({ _tag: "ReliableOwnershipLost", owner: "b" })
        return yield* ownerOf(w, "orders-in")
      })))
      expect(onB).toEqual(Option.some({ node: "b", live: true, kind: "Consumer" }))
      // b closed its endpoint (the name is free): a's respawn takes it back
      expect(yield* ownerOf(w, "orders-in")).toEqual(Option.none())
      yield* a.run(ReliableSystem.respawn("orders-in"))
      expect(yield* ownerOf(w, "orders-in")).toEqual(Option.some({ node: "a", live: true, kind: "Consumer" }))
      expect(yield* Queue.size(failures)).toBe(0)
      const record = a.system.internal.registry.get("orders-in")?.record
      expect(record?.address?.node).toBe("a")
    }))
})
