/**
 * The transactional outbox on SQLite (`npx tsx examples/outbox.ts`).
 *
 * An order service writes each order row and its `OrderPlaced` message in one transaction:
 * `DurableQueue.writer` writes through the same `SqlClient`, so a declined order (the
 * transaction fails after both writes) leaves neither the row nor the message. A durable producer
 * on the same queue takes what committed from the backlog and delivers it, in order, to a
 * consumer, which prints it. The database is a temp file, removed at the end.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { SqlClient } from "@effect/sql/SqlClient"
import { Console, Deferred, Duration, Effect, Layer, Schema } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Consumer, DurableQueue, Producer, ReliableSystem, Transport } from "effect-reliable"

const OrderPlaced = Schema.Struct({ orderId: Schema.Number, customer: Schema.String, total: Schema.Number })
type OrderPlaced = typeof OrderPlaced.Type

const orders: ReadonlyArray<OrderPlaced> = Array.from({ length: 10 }, (_, index) => ({
  orderId: index + 1,
  customer: ["ada", "bob", "cy"][index % 3],
  total: 40 * (index + 1)
}))
// The service declines orders of customers without credit after it wrote them: the transaction rolls back.
const withoutCredit = new Set(["cy"])

class Declined extends Schema.TaggedError<Declined>()("Declined", { orderId: Schema.Number }) {}

/** The order service: the order row and its message commit together, or neither does. */
const orderService = Effect.gen(function*() {
  const sql = yield* SqlClient
  yield* sql`CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total INTEGER NOT NULL)`
  const outbox = yield* DurableQueue.writer({ queueName: "orders", payload: OrderPlaced })
  const placeOrder = (order: OrderPlaced) =>
    sql.withTransaction(Effect.gen(function*() {
      yield* sql`INSERT INTO orders (id, customer, total) VALUES (${order.orderId}, ${order.customer}, ${order.total})`
      yield* outbox.enqueue(order, { messageId: `order-${order.orderId}` })
      if (withoutCredit.has(order.customer)) return yield* new Declined({ orderId: order.orderId })
    }))
  const committedOrders = Effect.map(sql<{ readonly id: number }>`SELECT id FROM orders ORDER BY id`, (rows) => rows.map((row) => row.id))
  return { placeOrder, committedOrders }
})

const program = Effect.gen(function*() {
  const service = yield* orderService
  const queue = yield* DurableQueue.makeSql({ queueName: "orders" })
  // SQLite has no backlog signal: the producer polls its backlog (default every second).
  yield* Producer.make({ name: "order-events", consumer: "shipping", payload: OrderPlaced, durableQueue: queue, backlogPollInterval: "100 millis" })
  const shipping = yield* Consumer.make({ name: "shipping", producer: "order-events", payload: OrderPlaced })

  let committed = 0
  for (const order of orders) {
    const placed = yield* Effect.either(service.placeOrder(order))
    if (placed._tag === "Right") committed++
    yield* Console.log(placed._tag === "Right" ? `placed order ${order.orderId} (${order.customer}, ${order.total})` : `declined order ${order.orderId} (${order.customer} has no credit): rolled back`)
  }

  const delivered: Array<number> = []
  const all = yield* Deferred.make<void>()
  yield* Effect.forkScoped(shipping.run((delivery) =>
    Effect.gen(function*() {
      delivered.push(delivery.payload.orderId)
      yield* Console.log(`shipping got ${delivery.messageId}: ${delivery.payload.customer}, ${delivery.payload.total}`)
      if (delivered.length === committed) yield* Deferred.succeed(all, undefined)
    })
  ))
  yield* Deferred.await(all).pipe(Effect.timeoutFail({ duration: Duration.seconds(30), onTimeout: () => new Error("not every placed order was delivered") }))
  yield* Console.log(`order rows committed: ${(yield* service.committedOrders).join(", ")}; messages delivered: ${delivered.join(", ")}`)
})

/** A temp directory for the database, removed with the scope. */
const tempDirectory = Effect.acquireRelease(
  Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-reliable-outbox-"))),
  (directory) => Effect.sync(() => Fs.rmSync(directory, { recursive: true, force: true }))
)

const main = Effect.gen(function*() {
  const directory = yield* tempDirectory
  const layer = Layer.merge(
    ReliableSystem.layer().pipe(Layer.provide(Transport.layerMemory)),
    SqliteClient.layer({ filename: Path.join(directory, "shop.sqlite") })
  )
  yield* program.pipe(Effect.scoped, Effect.provide(layer))
}).pipe(Effect.scoped)

Effect.runPromise(main).catch((error) => {
  console.error(error)
  process.exit(1)
})
