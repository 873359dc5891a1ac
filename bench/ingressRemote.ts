/**
 * Remote and durable together, beside the broker a user would otherwise pick for the same
 * guarantee. Ours: this process hosts a producer on a PostgreSQL queue (`sendAll` in batches of
 * 1,000, each resolving once stored), a child process (`remoteConsumer.ts`) the consumer over TCP
 * on 127.0.0.1. RabbitMQ: this process publishes to a durable queue (persistent messages, batches
 * of 1,000, each awaited with publisher confirms), a child process (`rabbitConsumer.ts`) consumes
 * with manual acks. Both timed from the first send until the consumer reports the last message.
 */
import { PgClient } from "@effect/sql-pg"
import * as Amqp from "amqplib"
import { Deferred, Duration, Effect, Layer, Redacted } from "effect"
import * as SqlProducerQueue from "../src/DurableQueue/SqlProducerQueue.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as SocketTransport from "../src/Transport/SocketTransport.js"
import { Transport } from "../src/Transport/Transport.js"
import { dropTables, freshPrefix } from "./pgTables.js"
import { spawnConsumer } from "./remote.js"
import { benchOrder, BenchOrder } from "./remoteOrder.js"
import { peakRssMiB } from "./Row.js"
import type { Row } from "./Row.js"

const host = "127.0.0.1"
const Batch = 1000
const pgUrl = process.env.RELIABLE_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"
const rabbitUrl = process.env.RABBITMQ_URL ?? "amqp://guest:guest@127.0.0.1:5672"

const row = (name: string, messages: number, seconds: number, consumer: { readonly rssMiB: number; readonly cpuMs: number }, cpu: NodeJS.CpuUsage): Row => ({
  name,
  messages,
  seconds,
  rate: messages / seconds,
  unit: "msgs/s",
  peakRssMiB: Math.max(peakRssMiB(), consumer.rssMiB),
  note: `CPU/msg: producer ${((cpu.user + cpu.system) / messages).toFixed(1)} µs, consumer ${(consumer.cpuMs * 1000 / messages).toFixed(1)} µs (incl. startup)`
})

const durableFlow = (messages: number, window: number, tablePrefix: string) =>
  Effect.gen(function*() {
    const transport = (yield* Transport) as SocketTransport.SocketTransportService
    const queue = yield* SqlProducerQueue.makeSql({ queueName: "bench", tablePrefix })
    const consumer = yield* spawnConsumer(transport.port, messages, window, {})
    const producer = yield* Producer.make({
      name: "bench-out",
      consumer: "bench-in",
      payload: BenchOrder,
      durableQueue: queue,
      remoteConsumer: { host, port: consumer.port }
    })
    const started = performance.now()
    const cpuBefore = process.cpuUsage()
    for (let first = 0; first < messages; first += Batch) {
      const count = Math.min(Batch, messages - first)
      yield* producer.sendAll(Array.from({ length: count }, (_, index) => ({ payload: benchOrder(first + index) })))
    }
    const done = yield* Deferred.await(consumer.done)
    const seconds = (performance.now() - started) / 1000
    return row(
      `remote and durable: PostgreSQL queue, consumer in another process over TCP, sendAll batches of ${Batch}, window ${window}, ${messages.toLocaleString("en")} msgs of ~100 B`,
      messages,
      seconds,
      done,
      process.cpuUsage(cpuBefore)
    )
  }).pipe(Effect.scoped)

/** A producer on a PostgreSQL queue in this process, its consumer (with `window`) in another over TCP. */
export const remoteDurable = (messages: number, window: number): Effect.Effect<Row, Error> => {
  const tablePrefix = freshPrefix()
  const client = PgClient.layer({ url: Redacted.make(pgUrl), connectTimeout: Duration.seconds(5) })
  return Effect.ensuring(durableFlow(messages, window, tablePrefix), dropTables(tablePrefix)).pipe(
    Effect.provide(Layer.mergeAll(
      ReliableSystem.layer().pipe(Layer.provideMerge(SocketTransport.layerSocket({ host, port: 0 }))),
      client
    )),
    Effect.mapError((error) => error instanceof Error ? error : new Error(String(error)))
  )
}

/** A RabbitMQ confirm channel on a fresh durable queue, deleted with the scope. */
const rabbitChannel = (queue: string) =>
  Effect.acquireRelease(
    Effect.tryPromise(async () => {
      const connection = await Amqp.connect(rabbitUrl)
      const channel = await connection.createConfirmChannel()
      await channel.assertQueue(queue, { durable: true })
      return { connection, channel }
    }),
    ({ channel, connection }) => Effect.promise(async () => {
      await channel.deleteQueue(queue)
      await connection.close()
    })
  )

/** The same workload on RabbitMQ: durable queue, persistent messages, publisher confirms, manual acks (`prefetch` unacked). */
export const rabbitMq = (messages: number, prefetch: number): Effect.Effect<Row, Error> =>
  Effect.gen(function*() {
    const queue = `bench-${Date.now().toString(36)}`
    const { channel } = yield* rabbitChannel(queue)
    const consumer = yield* spawnConsumer(0, messages, prefetch, { QUEUE: queue, RABBITMQ_URL: rabbitUrl }, "rabbitConsumer")
    const started = performance.now()
    const cpuBefore = process.cpuUsage()
    for (let first = 0; first < messages; first += Batch) {
      const count = Math.min(Batch, messages - first)
      for (let index = 0; index < count; index++) {
        channel.sendToQueue(queue, Buffer.from(JSON.stringify(benchOrder(first + index))), { persistent: true })
      }
      yield* Effect.tryPromise(() => channel.waitForConfirms())
    }
    const done = yield* Deferred.await(consumer.done)
    const seconds = (performance.now() - started) / 1000
    return row(
      `RabbitMQ: durable queue, persistent, publisher confirms per batch of ${Batch}, consumer in another process, prefetch ${prefetch}, ack multiple every 100, ${messages.toLocaleString("en")} msgs of ~100 B`,
      messages,
      seconds,
      done,
      process.cpuUsage(cpuBefore)
    )
  }).pipe(
    Effect.scoped,
    Effect.mapError((error) => error instanceof Error ? error : new Error(String(error)))
  )
