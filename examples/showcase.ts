/**
 * The showcase (`npm start`): an order pipeline on an in-process transport that drops 20% of all
 * messages in both directions. A publisher sends orders; a processor handles each one exactly
 * once in effect (it deduplicates by messageId) and in order. At the end it prints what was sent,
 * delivered and resent, and checks that nothing was lost or reordered.
 */
import { Console, Deferred, Duration, Effect, Layer, Schema } from "effect"
import { Consumer, Producer, ReliableSystem, Transport } from "../src/index.js"

const OrderCreated = Schema.Struct({
  orderId: Schema.Number,
  customer: Schema.String,
  amountCents: Schema.Int
})

const orders = 2_000

const program = Effect.gen(function*() {
  const publisher = yield* Producer.make({
    name: "order-publisher",
    consumer: "order-processor",
    payload: OrderCreated,
    retryInterval: "50 millis"
  })
  const processor = yield* Consumer.make({
    name: "order-processor",
    producer: "order-publisher",
    payload: OrderCreated,
    window: 50,
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
  for (let orderId = 1; orderId <= orders; orderId++) {
    yield* publisher.send(
      { orderId, customer: `customer-${orderId % 97}`, amountCents: 1_000 + orderId },
      { messageId: `order-${orderId}` }
    )
  }
  yield* Deferred.await(done).pipe(Effect.timeoutFail({ duration: Duration.seconds(60), onTimeout: () => new Error("orders did not all arrive in 60s") }))
  const elapsed = Date.now() - started

  const faults = yield* Transport.FaultInjector
  const dropped = faults.stats().dropped
  const publisherStats = yield* publisher.stats
  const processorStats = yield* processor.stats
  const reordered = inOrder.some((orderId, index) => orderId !== index + 1)

  yield* Console.log(`order pipeline over a transport that drops 20% of messages both ways (${elapsed} ms)`)
  yield* Console.log(`  orders sent:            ${orders}`)
  yield* Console.log(`  envelopes dropped:      ${dropped}`)
  yield* Console.log(`  messages resent:        ${publisherStats.resent}`)
  yield* Console.log(`  deliveries (incl. redeliveries): ${deliveries} (${processorStats.redelivered} redelivered)`)
  yield* Console.log(`  orders processed:       ${processed.size}`)
  yield* Console.log(`  confirmed at publisher: ${publisherStats.confirmed}`)
  yield* Console.log(`  lost: ${orders - processed.size}, out of order: ${reordered ? "yes" : "none"}`)
  if (processed.size !== orders || reordered) return yield* Effect.fail(new Error("the showcase lost or reordered orders"))
})

const layer = ReliableSystem.layer().pipe(
  Layer.provideMerge(Transport.layerFaulty({ seed: Date.now() % 100_000, drop: 0.2 }))
)

Effect.runPromise(program.pipe(Effect.scoped, Effect.provide(layer))).catch((error) => {
  console.error(error)
  process.exit(1)
})
