/**
 * A producer process crashes; a new one finishes the work (`npx tsx examples/durable-crash.ts`).
 *
 * This process is the order processor (a consumer node on TCP). It starts a publisher process
 * whose durable producer queue lives in PostgreSQL (RELIABLE_PG_URL, default
 * postgres://postgres@127.0.0.1:5432/test), lets it send part of the orders, kills it with
 * SIGKILL, then starts a second publisher process on the same queue and address. The second one
 * reloads what the first stored, redelivers what was not confirmed, resubmits its whole source
 * (the queue recognises every order already stored: first write wins) and finishes. The
 * queue's tables have a fresh prefix per run and are dropped at the end.
 */
import { PgClient } from "@effect/sql-pg"
import { SqlClient } from "@effect/sql/SqlClient"
import { Console, Deferred, Duration, Effect, Layer, Redacted, Schema } from "effect"
import * as ChildProcess from "node:child_process"
import { randomUUID } from "node:crypto"
import { fileURLToPath } from "node:url"
import { Consumer, DurableQueue, Producer, ReliableSystem, Transport } from "effect-reliable"

const OrderCreated = Schema.Struct({ orderId: Schema.Number, customer: Schema.String })
const orders = 5_000
const host = "127.0.0.1"
const pgUrl = process.env.RELIABLE_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"
// A fresh prefix per run, so runs never share tables; the processor drops them at the end.
const tablePrefix = process.argv[2] === "publisher" ? process.argv[5] : `example_crash_${randomUUID().replaceAll("-", "").slice(0, 8)}_`

/** The publisher process: sends every order (its "source" never forgets one) through PostgreSQL. */
const publisher = (port: number, processorPort: number) =>
  Effect.gen(function*() {
    const queue = yield* DurableQueue.makeSql({ queueName: "orders", tablePrefix })
    const producer = yield* Producer.make({
      name: "order-publisher",
      consumer: "order-processor",
      payload: OrderCreated,
      durableQueue: queue,
      remoteConsumer: { host, port: processorPort }
    })
    for (let first = 1; first <= orders; first += 250) {
      yield* producer.sendAll(Array.from({ length: 250 }, (_, index) => ({
        payload: { orderId: first + index, customer: `customer-${(first + index) % 31}` },
        messageId: `order-${first + index}`
      })))
    }
    console.log("PUBLISHED")
    return yield* Effect.never
  }).pipe(
    Effect.scoped,
    Effect.provide(ReliableSystem.layer().pipe(
      Layer.provideMerge(Transport.layerSocket({ host, port })),
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(pgUrl) }))
    ))
  )

const spawnPublisher = (port: number, processorPort: number) =>
  ChildProcess.spawn(process.execPath, ["--import", "tsx", fileURLToPath(import.meta.url), "publisher", String(port), String(processorPort), tablePrefix], {
    stdio: ["ignore", "inherit", "inherit"]
  })

/** Drops every table of this run (they all start with its prefix), after the publishers are gone. */
const dropTables = Effect.gen(function*() {
  const sql = yield* SqlClient
  const tables = yield* sql<{ readonly tablename: string }>`
    SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, ${tablePrefix})`
  for (const { tablename } of tables) yield* sql`DROP TABLE IF EXISTS ${sql(tablename)}`
}).pipe(Effect.catchAllCause((cause) => Effect.logError(`could not drop the tables ${tablePrefix}*`, cause)))

/** The processor (this process): idempotent by messageId, records what it saw. */
const processor = Effect.gen(function*() {
  yield* Effect.addFinalizer(() => dropTables)
  const publisherPort = 17_000 + Math.floor(Math.random() * 20_000)
  const consumer = yield* Consumer.make({
    name: "order-processor",
    producer: "order-publisher",
    payload: OrderCreated,
    window: 200,
    resendInterval: "200 millis",
    remoteProducer: { host, port: publisherPort }
  })
  const processed = new Set<string>()
  let deliveries = 0
  const half = yield* Deferred.make<void>()
  const all = yield* Deferred.make<void>()
  yield* Effect.forkScoped(consumer.run((delivery) =>
    Effect.sync(() => {
      deliveries++
      processed.add(delivery.messageId)
      if (processed.size >= orders / 2) Deferred.unsafeDone(half, Effect.void)
      if (processed.size === orders) Deferred.unsafeDone(all, Effect.void)
    })
  ))
  const transport = yield* Transport.Transport
  const processorPort = Number(transport.node.split(":")[1])

  const first = spawnPublisher(publisherPort, processorPort)
  yield* Effect.addFinalizer(() => Effect.sync(() => first.kill("SIGKILL")))
  yield* Deferred.await(half)
  first.kill("SIGKILL")
  yield* Console.log(`publisher 1 killed with SIGKILL after ${processed.size} of ${orders} orders were processed`)
  const second = spawnPublisher(publisherPort, processorPort)
  yield* Effect.addFinalizer(() => Effect.sync(() => second.kill("SIGKILL")))
  yield* Deferred.await(all).pipe(Effect.timeoutFail({ duration: Duration.seconds(60), onTimeout: () => new Error("the orders did not all arrive") }))
  yield* Console.log(`publisher 2 (same queue, same address) finished: ${processed.size} of ${orders} orders processed`)
  yield* Console.log(`deliveries: ${deliveries} (${deliveries - orders} redelivered after the crash, skipped by messageId)`)
}).pipe(
  Effect.scoped,
  Effect.provide(ReliableSystem.layer().pipe(
    Layer.provideMerge(Transport.layerSocket({ host, port: 0 })),
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(pgUrl) }))
  ))
)

if (process.argv[2] === "publisher") {
  Effect.runPromise(publisher(Number(process.argv[3]), Number(process.argv[4]))).catch((error) => {
    console.error(error)
    process.exit(1)
  })
} else {
  Effect.runPromise(processor).then(() => process.exit(0), (error) => {
    console.error(error)
    process.exit(1)
  })
}
