/**
 * The operations page's JSON API against a running durable flow: its numbers are the endpoints'
 * stats, its queue view shows the dead letters, the operator actions are refused (403) on a
 * read-only page and requeue a dead letter back into the flow when enabled.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Schedule } from "effect"
import { WorkPulling } from "effect-reliable"
import * as Ops from "effect-reliable/ops"
import { waitUntil } from "../support/Nodes.js"
import { call, queueWhen, startFlow, startHeldPool, systemLayer } from "./OpsFlow.js"

describe("operations page API", () => {
  it.scopedLive("the snapshot's numbers are the endpoints' stats, during the flow and once it stops", () =>
    Effect.gen(function*() {
      const flow = yield* startFlow(new Set())
      const page = yield* Ops.make({ port: 0 })
      yield* waitUntil("the flow to move", () => flow.accepted.length >= 20)
      // While it runs, each counter on the page lies between the stats read before and after.
      const before = { producer: yield* flow.producer.stats, consumer: yield* flow.consumer.stats }
      const snapshot = (yield* call(page, "api/snapshot")).body
      const after = { producer: yield* flow.producer.stats, consumer: yield* flow.consumer.stats }
      const shown = (name: string) => snapshot.endpoints.find((endpoint: { name: string }) => endpoint.name === name)
      for (const field of ["sent", "confirmed"] as const) {
        expect(shown("orders-out").stats[field]).toBeGreaterThanOrEqual(before.producer[field])
        expect(shown("orders-out").stats[field]).toBeLessThanOrEqual(after.producer[field])
      }
      expect(shown("orders-in").stats.delivered).toBeGreaterThanOrEqual(before.consumer.delivered)
      expect(shown("orders-in").stats.delivered).toBeLessThanOrEqual(after.consumer.delivered)
      expect(shown("orders-out")).toMatchObject({ kind: "Producer", peer: "orders-in", live: true, durable: true })
      expect(shown("orders-in")).toMatchObject({ kind: "Consumer", peer: "orders-out", live: true, window: 8 })
      expect(snapshot.actions).toBe(false)

      yield* flow.stop
      yield* waitUntil("every order accepted", () => flow.accepted.length === flow.sent())
      const settled = (yield* call(page, "api/snapshot")).body
      const exact = (name: string) => settled.endpoints.find((endpoint: { name: string }) => endpoint.name === name).stats
      expect(exact("orders-out")).toEqual(yield* flow.producer.stats)
      expect(exact("orders-in")).toEqual(yield* flow.consumer.stats)
      const queue = (yield* call(page, "api/queues/orders-out")).body
      expect(queue.counts).toEqual({ backlog: 0, stored: 0, unconfirmed: 0, deadLettered: 0 })
    }).pipe(Effect.provide(systemLayer)))

  it.scopedLive("a read-only page refuses the actions with 403 and leaves the dead letter", () =>
    Effect.gen(function*() {
      const flow = yield* startFlow(new Set([3]))
      const page = yield* Ops.make({ port: 0 })
      const queue = yield* queueWhen(page, "order 3 dead-lettered", (queue) => queue.counts.deadLettered === 1)
      expect(queue.deadLetters.map((dead: { messageId: string }) => dead.messageId)).toEqual(["order-3"])
      expect(queue.deadLetters[0]).toMatchObject({ attempts: 1, lastError: expect.stringContaining("order 3 refused"), payload: { id: 3, item: "item-3" } })
      for (const action of ["requeue", "discard"]) {
        const refused = yield* call(page, `api/queues/orders-out/dead-letters/order-3/${action}`, "POST")
        expect(refused.status).toBe(403)
      }
      expect((yield* call(page, "api/queues/orders-out")).body.counts.deadLettered).toBe(1)
      expect(flow.accepted).not.toContain(3)
    }).pipe(Effect.provide(systemLayer)))

  it.scopedLive("with actions enabled, requeue delivers the dead letter again and discard drops one", () =>
    Effect.gen(function*() {
      const flow = yield* startFlow(new Set([2, 5]))
      const page = yield* Ops.make({ port: 0, actions: true })
      yield* queueWhen(page, "two dead letters", (queue) => queue.counts.deadLettered === 2)
      const requeued = yield* call(page, "api/queues/orders-out/dead-letters/order-2/requeue", "POST")
      expect(requeued).toMatchObject({ status: 200, body: { action: "requeue", messageId: "order-2", done: true } })
      yield* waitUntil("order 2 accepted after its requeue", () => flow.accepted.includes(2))
      const discarded = yield* call(page, "api/queues/orders-out/dead-letters/order-5/discard", "POST")
      expect(discarded.body.done).toBe(true)
      const queue = (yield* call(page, "api/queues/orders-out")).body
      expect(queue.deadLetters).toEqual([])
      expect((yield* call(page, "api/queues/orders-out/dead-letters/order-5/requeue", "POST")).body.done).toBe(false)
      expect((yield* call(page, "api/queues/orders-in")).status).toBe(404)
      expect(flow.accepted).not.toContain(5)
    }).pipe(Effect.provide(systemLayer)))

  it.scopedLive("a work-pulling pool shows each worker's in-flight jobs as WorkPulling.stats does", () =>
    Effect.gen(function*() {
      const release = yield* startHeldPool
      const page = yield* Ops.make({ port: 0 })
      const pool = Effect.map(call(page, "api/snapshot"), (answer) => answer.body.endpoints.find((endpoint: { name: string }) => endpoint.name === "jobs").pool)
      // Both workers hold a full window (2 + 3), the other jobs wait: the pool stands still.
      const held = (state: { perWorker: Array<{ inFlight: number }> }) => state.perWorker.reduce((sum, worker) => sum + worker.inFlight, 0)
      const shown = yield* pool.pipe(
        Effect.filterOrFail((state) => state !== undefined && state.workers === 2 && held(state) === 5, (state) => new Error(`the pool has not filled yet: ${JSON.stringify(state)}`)),
        Effect.retry(Schedule.spaced("20 millis")),
        Effect.timeout("10 seconds")
      )
      const stats = yield* WorkPulling.stats("jobs")
      expect(shown.perWorker.map((worker: { worker: string; inFlight: number }) => [worker.worker, worker.inFlight]).sort())
        .toEqual(stats.perWorker.map((worker) => [worker.worker, worker.inFlight]).sort())
      expect(shown.perWorker.map((worker: { inFlight: number }) => worker.inFlight).sort()).toEqual([2, 3])
      const kinds = (yield* call(page, "api/snapshot")).body.endpoints.map((endpoint: { name: string; kind: string }) => [endpoint.name, endpoint.kind])
      expect(kinds).toEqual([["jobs", "WorkProducer"], ["worker-a", "Worker"], ["worker-b", "Worker"]])
      yield* Deferred.succeed(release, undefined)
    }).pipe(Effect.provide(systemLayer)))

  it.scopedLive("serves the page, Prometheus text at /metrics, a web handler to mount elsewhere, and refuses bad options", () =>
    Effect.gen(function*() {
      const page = yield* Ops.make({ port: 0 })
      expect(page.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/)
      const html = yield* call(page, "")
      expect(html.type).toContain("text/html")
      expect(html.body).toContain("effect-reliable operations")
      expect(html.body).not.toMatch(/<(script|link)[^>]+(src|href)=/)
      const metrics = yield* call(page, "metrics")
      expect(metrics.type).toContain("text/plain")
      expect(metrics.body).toMatch(/^# TYPE /m)
      expect((yield* call(page, "api/nothing")).status).toBe(404)
      const handler = yield* Ops.webHandler()
      const answer = yield* Effect.promise(() => handler(new Request("http://app.internal/api/snapshot")))
      expect(answer.status).toBe(200)
      expect(yield* Effect.promise(() => answer.json())).toMatchObject({ node: "memory", actions: false })
      expect(yield* Effect.flip(Ops.make({ port: -1 }))).toMatchObject({ _tag: "ReliableConfigError", option: "port" })
      expect(yield* Effect.flip(Ops.make({ port: 0, action: true } as Ops.OpsOptions))).toMatchObject({ _tag: "ReliableConfigError", option: "action" })
    }).pipe(Effect.provide(systemLayer)))
})
