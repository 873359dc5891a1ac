/**
 * Test support for the operations page: a running durable flow whose consumer refuses chosen
 * orders once (each refusal a dead letter kept in the producer's queue), and the page over it.
 */
import { Deferred, Effect, Fiber, Layer, Schedule, Schema } from "effect"
import type { Scope } from "effect"
import { Consumer, DurableQueue, Producer, ReliableSystem, Transport, WorkPulling } from "effect-reliable"
import * as Ops from "effect-reliable/ops"

export const Order = Schema.Struct({ id: Schema.Number, item: Schema.String })

export const systemLayer = ReliableSystem.layer().pipe(Layer.provide(Transport.layerMemory))

export interface OpsFlow {
  readonly producer: Producer.Producer<typeof Order.Type>
  readonly consumer: Consumer.Consumer<typeof Order.Type>
  /** Ids the handler accepted, in order (a requeued order appears once it is accepted). */
  readonly accepted: Array<number>
  /** Keeps sending an order every few milliseconds until `stop`. */
  readonly stop: Effect.Effect<void>
  /** How many orders the background sender sent. */
  readonly sent: () => number
}

/**
 * A durable flow `orders-out` -> `orders-in`: orders `refused` are refused on their first attempt
 * (dead-lettered after 1 attempt); the rest are accepted. Sends `initial` orders, then keeps
 * sending in the background.
 */
export const startFlow = (refused: ReadonlySet<number>, initial = 10): Effect.Effect<OpsFlow, unknown, ReliableSystem.ReliableSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const queue = yield* DurableQueue.makeMemory
    const producer = yield* Producer.make({ name: "orders-out", consumer: "orders-in", payload: Order, durableQueue: queue })
    const consumer = yield* Consumer.make({ name: "orders-in", producer: "orders-out", payload: Order, window: 8, maxAttempts: 1 })
    const accepted: Array<number> = []
    const refusedOnce = new Set<number>()
    yield* Effect.forkScoped(consumer.run((delivery) => {
      const id = delivery.payload.id
      if (refused.has(id) && !refusedOnce.has(id)) {
        refusedOnce.add(id)
        return Effect.fail(`order ${id} refused`)
      }
      return Effect.sync(() => void accepted.push(id))
    }))
    let sent = 0
    const send = Effect.suspend(() => {
      const id = sent++
      return producer.send({ id, item: `item-${id}` }, { messageId: `order-${id}` })
    })
    yield* Effect.repeatN(send, initial - 1)
    const sender = yield* Effect.forkScoped(Effect.repeat(send, Schedule.spaced("5 millis")))
    return { producer, consumer, accepted, stop: Fiber.interrupt(sender), sent: () => sent }
  })

/** GETs or POSTs a path of the page; the status and the parsed JSON (or text) body. */
export const call = (page: Ops.OpsPageService, path: string, method: "GET" | "POST" = "GET") =>
  Effect.promise(async () => {
    const response = await fetch(new URL(path, page.url), { method })
    const text = await response.text()
    const type = response.headers.get("content-type") ?? ""
    return { status: response.status, type, body: type.includes("json") ? JSON.parse(text) as any : text }
  })

/** Polls the page's view of the `orders-out` queue until `holds`; fails after 20 seconds. */
export const queueWhen = (page: Ops.OpsPageService, label: string, holds: (queue: any) => boolean) =>
  call(page, "api/queues/orders-out").pipe(
    Effect.map((answer) => answer.body),
    Effect.filterOrFail(holds, () => new Error(`not yet: ${label}`)),
    Effect.retry(Schedule.spaced("20 millis")),
    Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error(`timed out waiting for ${label}`) })
  )

/**
 * A work-pulling pool that stands still: producer "jobs", workers "worker-a" (window 2) and
 * "worker-b" (window 3) whose handlers wait for the returned `release`, and 8 jobs sent, so 5 are
 * in flight and 3 wait.
 */
export const startHeldPool: Effect.Effect<Deferred.Deferred<void>, unknown, ReliableSystem.ReliableSystem | Scope.Scope> = Effect.gen(function*() {
  const Job = Schema.Struct({ n: Schema.Number })
  const producer = yield* WorkPulling.producer({ name: "jobs", payload: Job })
  const release = yield* Deferred.make<void>()
  for (const [name, window] of [["worker-a", 2], ["worker-b", 3]] as const) {
    const worker = yield* WorkPulling.worker({ name, producer: "jobs", payload: Job, window, concurrency: window })
    yield* Effect.forkScoped(worker.run(() => Deferred.await(release)))
  }
  yield* Effect.forkScoped(Effect.forEach(Array.from({ length: 8 }, (_, n) => n), (n) => producer.send({ n }), { discard: true }))
  return release
})
