/**
 * The payload of the remote benchmark: about 100 bytes of JSON per message.
 */
import { Schema } from "effect"

export const BenchOrder = Schema.Struct({ orderId: Schema.Number, customer: Schema.String, sku: Schema.String, quantity: Schema.Number })

/** An order whose encoded JSON is about 100 bytes. */
export const benchOrder = (orderId: number) => ({
  orderId,
  customer: "customer-0000042",
  sku: "sku-padding-to-reach-about-a-hundred-bytes",
  quantity: 3
})
