/**
 * Point-to-point on the memory transport: `consumer.run` with a no-op handler, `producer.send`
 * in a loop, and the batched `sendAll` path.
 */
import { Deferred, Effect, Layer, Schema } from "effect"
import * as Consumer from "../src/Consumer.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { measure } from "./Row.js"

const Order = Schema.Struct({ orderId: Schema.Number, customer: Schema.String })

/** `messages` sent on one flow, `batch` per call (1: `send`), until the consumer has them all. */
export const flow = (messages: number, window: number, batch: number) =>
  Effect.gen(function*() {
    const producer = yield* Producer.make({ name: "bench-out", consumer: "bench-in", payload: Order })
    const consumer = yield* Consumer.make({ name: "bench-in", producer: "bench-out", payload: Order, window })
    const done = yield* Deferred.make<void>()
    let received = 0
    yield* Effect.forkScoped(consumer.run(() =>
      Effect.sync(() => {
        if (++received === messages) Deferred.unsafeDone(done, Effect.void)
      })
    ))
    const payload = (orderId: number) => ({ orderId, customer: "c-42" })
    if (batch === 1) {
      for (let orderId = 0; orderId < messages; orderId++) yield* producer.send(payload(orderId))
    } else {
      for (let first = 0; first < messages; first += batch) {
        const count = Math.min(batch, messages - first)
        yield* producer.sendAll(Array.from({ length: count }, (_, index) => ({ payload: payload(first + index) })))
      }
    }
    yield* Deferred.await(done)
  }).pipe(
    Effect.scoped,
    Effect.provide(ReliableSystem.layer().pipe(Layer.provide(MemoryTransport.layerMemory)))
  )

export const send = (messages: number, window = 50) =>
  measure(`point-to-point send loop, window ${window}, ${messages.toLocaleString("en")} msgs`, messages, flow(messages, window, 1))

export const sendAll = (messages: number, window = 50) =>
  measure(`point-to-point sendAll batches of 1000, window ${window}, ${messages.toLocaleString("en")} msgs`, messages, flow(messages, window, 1000))
