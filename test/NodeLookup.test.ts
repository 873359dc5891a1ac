/**
 * Node lookups (`Lookup` / `LookupReply` between system addresses) under TestClock, on in-process
 * nodes that share a memory hub: answers come from the asked node's registry, unknown names are
 * answered at once, silence times out at the lookup timeout, and nothing stays pending.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Fiber, Layer, TestClock } from "effect"
import { systemAddress } from "../src/internal/NodeLookup.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { Transport } from "../src/Transport/Transport.js"
import { settle } from "./support/Harness.js"

/** Two systems, nodes "a" and "b", on one hub. */
const twoNodes = Effect.gen(function*() {
  const hub = MemoryTransport.makeHub()
  const build = (node: string) =>
    Effect.map(
      Layer.build(ReliableSystem.layer().pipe(Layer.provide(Layer.succeed(Transport, MemoryTransport.makeNode(hub, node))))),
      (context) => Context.get(context, ReliableSystem.ReliableSystem).internal
    )
  return { a: yield* build("a"), b: yield* build("b") }
})

describe("node lookups", () => {
  it.scoped("answers from the asked node's registry: kind, configured peer and live controller", () =>
    Effect.gen(function*() {
      const { a, b } = yield* twoNodes
      const address = { node: "b", endpoint: "orders-in", incarnation: "inc-1" }
      yield* b.registry.claim({ name: "orders-in", kind: "Consumer", peer: "orders-out", address }, Effect.void)
      const found = yield* a.lookup("orders-in", "b")
      expect(found).toEqual({ name: "orders-in", kind: "Consumer", peer: "orders-out", address })
      // Asked locally (no node, or this node's own name), a's registry has no such endpoint.
      expect(yield* a.lookup("orders-in")).toBeUndefined()
      expect(yield* a.lookup("orders-in", "a")).toBeUndefined()
      expect(a.lookupStats()).toMatchObject({ asked: 1, answered: 1, unanswered: 0, pending: 0 })
      expect(b.lookupStats()).toMatchObject({ served: 1 })
    }))

  it.scoped("a record without a live controller or peer crosses as such; an unknown name is answered at once", () =>
    Effect.gen(function*() {
      const { a, b } = yield* twoNodes
      yield* b.registry.claim({ name: "dispatcher", kind: "WorkProducer", peer: undefined, address: undefined }, Effect.void)
      expect(yield* a.lookup("dispatcher", "b")).toEqual({ name: "dispatcher", kind: "WorkProducer", peer: undefined, address: undefined })
      const unknown = yield* Effect.fork(a.lookup("nobody", "b"))
      yield* settle
      // Answered without any time passing: no timeout was needed.
      expect(unknown.unsafePoll()).not.toBeNull()
      expect(yield* Fiber.join(unknown)).toBeUndefined()
      expect(a.lookupStats()).toMatchObject({ answered: 2, unanswered: 0, pending: 0 })
    }))

  it.scoped("a silent node times out at the lookup timeout (500ms) and leaves nothing pending; a late answer is dropped", () =>
    Effect.gen(function*() {
      const { a, b } = yield* twoNodes
      const asking = yield* Effect.fork(Effect.all(Array.from({ length: 5 }, () => a.lookup("orders-in", "c")), { concurrency: "unbounded" }))
      yield* settle
      expect(a.lookupStats().pending).toBe(5)
      yield* TestClock.adjust("499 millis")
      yield* settle
      expect(asking.unsafePoll()).toBeNull()
      yield* TestClock.adjust("1 millis")
      expect(yield* Fiber.join(asking)).toEqual([undefined, undefined, undefined, undefined, undefined])
      expect(a.lookupStats()).toMatchObject({ asked: 5, unanswered: 5, pending: 0 })
      // A reply to a request nobody waits for any more changes nothing.
      b.transport.post([{ from: systemAddress("b"), to: systemAddress("a"), message: { _tag: "LookupReply", requestId: "stale", record: { kind: "Producer" } } }])
      yield* settle
      expect(a.lookupStats()).toMatchObject({ answered: 0, pending: 0 })
    }))

  it.scoped("an interrupted lookup leaves nothing pending", () =>
    Effect.gen(function*() {
      const { a } = yield* twoNodes
      const asking = yield* Effect.fork(a.lookup("orders-in", "nowhere"))
      yield* settle
      expect(a.lookupStats().pending).toBe(1)
      yield* Fiber.interrupt(asking)
      expect(a.lookupStats().pending).toBe(0)
    }))

  it.scoped("the lookup timeout is configurable", () =>
    Effect.gen(function*() {
      const hub = MemoryTransport.makeHub()
      const context = yield* Layer.build(ReliableSystem.layer({ lookupTimeout: "50 millis" }).pipe(
        Layer.provide(Layer.succeed(Transport, MemoryTransport.makeNode(hub, "a")))
      ))
      const a = Context.get(context, ReliableSystem.ReliableSystem).internal
      const asking = yield* Effect.fork(a.lookup("x", "silent"))
      yield* TestClock.adjust("50 millis")
      expect(yield* Fiber.join(asking)).toBeUndefined()
      expect(a.lookupStats().unanswered).toBe(1)
    }))
})
