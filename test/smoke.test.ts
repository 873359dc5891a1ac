import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema, Stream, Fiber, Duration } from "effect"
import { Consumer, Producer, ReliableSystem, Transport } from "../src/index.js"

const Order = Schema.Struct({ id: Schema.Number })
const layer = ReliableSystem.layer().pipe(Layer.provide(Transport.layerMemory))

describe("smoke", () => {
  it.live("delivers in order", () =>
    Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order })
      const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order })
      const got: number[] = []
      const fiber = yield* Effect.fork(consumer.run((d) => Effect.sync(() => { got.push(d.payload.id) })))
      const n = 100000
      const t0 = Date.now()
      for (let i = 0; i < n; i++) yield* producer.send({ id: i })
      while (got.length < n) yield* Effect.sleep(Duration.millis(1))
      console.log("rate", n / ((Date.now() - t0) / 1000))
      expect(got).toEqual(Array.from({ length: n }, (_, i) => i))
      yield* Fiber.interrupt(fiber)
      console.log(yield* producer.stats, yield* consumer.stats)
    }).pipe(Effect.scoped, Effect.provide(layer)))
})
