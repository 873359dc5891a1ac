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

/** A payload of the size most apps send: about 300 bytes of JSON, a few fields and one longer text. */
const OrderWithNote = Schema.Struct({
  orderId: Schema.Number,
  customer: Schema.String,
  note: Schema.String,
  total: Schema.Number,
  rush: Schema.Boolean
})
const note = "deliver to the back door, ring twice; ".repeat(6)

interface Shape<A, I> {
  readonly schema: Schema.Schema<A, I>
  readonly payload: (orderId: number) => A
}

const small: Shape<typeof Order.Type, typeof Order.Encoded> = { schema: Order, payload: (orderId) => ({ orderId, customer: "c-42" }) }
const withNote: Shape<typeof OrderWithNote.Type, typeof OrderWithNote.Encoded> = {
  schema: OrderWithNote,
  payload: (orderId) => ({ orderId, customer: "customer-42", note, total: 3 * orderId, rush: true })
}

/** Binary payloads of 1 KiB (protobuf or MessagePack bytes, say): one array, copied by every send. */
const kibibyte = new Uint8Array(1024).fill(7)
const binary: Shape<Uint8Array, Uint8Array> = { schema: Schema.Uint8ArrayFromSelf, payload: () => kibibyte }

/** `messages` of `shape` sent on one flow, `batch` per call (1: `send`), until the consumer has them all. */
const flowOf = <A, I>(messages: number, window: number, batch: number, shape: Shape<A, I>) =>
  Effect.gen(function*() {
    const producer = yield* Producer.make({ name: "bench-out", consumer: "bench-in", payload: shape.schema })
    const consumer = yield* Consumer.make({ name: "bench-in", producer: "bench-out", payload: shape.schema, window })
    const done = yield* Deferred.make<void>()
    let received = 0
    yield* Effect.forkScoped(consumer.run(() =>
      Effect.sync(() => {
        if (++received === messages) Deferred.unsafeDone(done, Effect.void)
      })
    ))
    const payload = shape.payload
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

/** `flowOf` with the small payload most rows use. */
export const flow = (messages: number, window: number, batch: number) => flowOf(messages, window, batch, small)

export const send = (messages: number, window = 50) =>
  measure(`point-to-point send loop, window ${window}, ${messages.toLocaleString("en")} msgs`, messages, flow(messages, window, 1))

export const sendAll = (messages: number, window = 50) =>
  measure(`point-to-point sendAll batches of 1000, window ${window}, ${messages.toLocaleString("en")} msgs`, messages, flow(messages, window, 1000))

/** The `send` loop with payloads of about 300 bytes. */
export const sendWithNote = (messages: number, window = 50) =>
  measure(
    `point-to-point send loop, window ${window}, ~300-byte payloads, ${messages.toLocaleString("en")} msgs`,
    messages,
    flowOf(messages, window, 1, withNote)
  )

/** The `send` loop with binary payloads of 1 KiB. */
export const sendBinary = (messages: number, window = 50) =>
  measure(
    `point-to-point send loop, window ${window}, 1 KiB binary payloads, ${messages.toLocaleString("en")} msgs`,
    messages,
    flowOf(messages, window, 1, binary)
  )
