/**
 * The showcase (`npm start`), on the embedded default: a durable producer queue in a SQLite file
 * (a temp file) and the in-process transport, here dropping 20% of all messages in both
 * directions. A publisher sends orders; halfway through, its controller crashes (a respawn: a
 * fresh controller that must reload the queue). A processor handles each order exactly once in
 * effect (it deduplicates by messageId) and in order. At the end it prints what was sent,
 * dropped, resent and delivered, and checks that nothing was lost or reordered.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Console, Deferred, Duration, Effect, Layer, Schema } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Consumer, DurableQueue, Producer, ReliableSystem, Transport } from "effect-reliable"

const OrderCreated = Schema.Struct({
  orderId: Schema.Number,
  customer: Schema.String,
  amountCents: Schema.Int
})

const orders = 2_000
const batch = 50

const program = Effect.gen(function*() {
  const queue = yield* DurableQueue.makeSql({ queueName: "orders" })
  const publisher = yield* Producer.make({
    name: "order-publisher",
    consumer: "order-processor",
    payload: OrderCreated,
    durableQueue: queue,
    retryInterval: "50 millis"
  })
  const processor = yield* Consumer.make({
    name: "order-processor",
    producer: "order-publisher",
    payload: OrderCreated,
    window: 100,
    resendInterval: "50 millis"
  })

  // The processor: idempotent by messageId, confirms only after processing.
  const processed = new Set<string>()
  const inOrder: Array<number> = []
  let deliveries = 0
  const done = yield* Deferred.make<void>()
  yield* Effect.forkScoped(processor.run((delivery) =>
    Effect.sync(() => {
      deliveries++
      if (processed.has(delivery.messageId)) return
      processed.add(delivery.messageId)
      inOrder.push(delivery.payload.orderId)
      if (processed.size === orders) Deferred.unsafeDone(done, Effect.void)
    })
  ))

  const started = Date.now()
  for (let first = 1; first <= orders; first += batch) {
    if (first === orders / 2 + 1) {
      yield* Console.log(`after ${orders / 2} orders: the publisher's controller crashes and respawns from the SQLite queue`)
      yield* ReliableSystem.respawn("order-publisher")
    }
    yield* publisher.sendAll(Array.from({ length: batch }, (_, index) => {
      const orderId = first + index
      return {
        payload: { orderId, customer: `customer-${orderId % 97}`, amountCents: 1_000 + orderId },
        messageId: `order-${orderId}`
      }
    }))
  }
  yield* Deferred.await(done).pipe(
    Effect.timeoutFail({ duration: Duration.seconds(60), onTimeout: () => new Error("orders did not all arrive in 60s") })
  )
  const elapsed = Date.now() - started

  const faults = yield* Transport.FaultInjector
  const publisherStats = yield* publisher.stats
  const processorStats = yield* processor.stats
  const reordered = inOrder.some((orderId, index) => orderId !== index + 1)

  yield* Console.log(`order pipeline: durable SQLite queue, transport dropping 20% both ways (${elapsed} ms)`)
  yield* Console.log(`  orders sent:                   ${orders}`)
  yield* Console.log(`  envelopes dropped:             ${faults.stats().dropped}`)
  yield* Console.log(`  messages resent:               ${publisherStats.resent} (since the respawn)`)
  yield* Console.log(`  deliveries:                    ${deliveries} (${deliveries - processed.size} redelivered duplicates skipped)`)
  yield* Console.log(`  orders processed:              ${processed.size}`)
  yield* Console.log(`  consumer re-registrations:     ${processorStats.registrations}`)
  yield* Console.log(`  lost: ${orders - processed.size}, out of order: ${reordered ? "yes" : "none"}`)
  if (processed.size !== orders || reordered) return yield* Effect.fail(new Error("the showcase lost or reordered orders"))
})

const directory = mkdtempSync(join(tmpdir(), "effect-reliable-"))
const filename = join(directory, "queue.sqlite")

const layer = ReliableSystem.layer().pipe(
  Layer.provideMerge(Transport.layerFaulty({ seed: Date.now() % 100_000, drop: 0.2 })),
  Layer.provideMerge(SqliteClient.layer({ filename }))
)

Effect.runPromise(program.pipe(Effect.scoped, Effect.provide(layer))).then(
  () => {
    console.log(`  (queue file: ${filename}, removed)`)
    rmSync(directory, { recursive: true, force: true })
  },
  (error) => {
    console.error(error)
    rmSync(directory, { recursive: true, force: true })
    process.exit(1)
  }
)
