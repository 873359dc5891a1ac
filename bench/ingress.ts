/**
 * How work enters a flow: many fibers each sending one message at a time (fair hand-off and group
 * commit) against one sequential sender in the same run, `enqueue` with no consumer, outbox
 * writers inside the application's transactions against the same inserts without the library,
 * and `producer.sink` against `sendAll`.
 */
import { PgClient } from "@effect/sql-pg"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { SqlClient } from "@effect/sql/SqlClient"
import { Deferred, Duration, Effect, FiberId, Layer, Redacted, Schema, Stream } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Consumer from "../src/Consumer.js"
import type { DurableProducerQueueService } from "../src/DurableQueue/DurableProducerQueue.js"
import * as SqlProducerQueue from "../src/DurableQueue/SqlProducerQueue.js"
import * as Writer from "../src/DurableQueue/Writer.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { dropTables, freshPrefix } from "./pgTables.js"
import { heapAfterGcMiB, peakRssMiB } from "./Row.js"
import type { Row } from "./Row.js"

const Order = Schema.Struct({ orderId: Schema.Number, customer: Schema.String })
const order = (orderId: number) => ({ orderId, customer: "c-42" })
const Window = 1000

const system = ReliableSystem.layer().pipe(Layer.provide(MemoryTransport.layerMemory))
const pgUrl = process.env.RELIABLE_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"
const pgClient = PgClient.layer({ url: Redacted.make(pgUrl), connectTimeout: Duration.seconds(5), maxConnections: 20 })

/** Runs `effect` on fresh tables of a PostgreSQL prefix, dropped afterwards. */
export const onPostgres = <A, E>(effect: (prefix: string) => Effect.Effect<A, E, SqlClient | ReliableSystem.ReliableSystem>) => {
  const prefix = freshPrefix()
  return Effect.ensuring(effect(prefix), dropTables(prefix)).pipe(Effect.provide(Layer.merge(system, pgClient)))
}

const onSqlite = <A, E>(effect: Effect.Effect<A, E, SqlClient | ReliableSystem.ReliableSystem>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), "effect-reliable-bench-"))),
    (directory) => Effect.provide(effect, Layer.merge(system, SqliteClient.layer({ filename: join(directory, "queue.sqlite") }))),
    (directory) => Effect.sync(() => rmSync(directory, { recursive: true, force: true }))
  )

const format = (value: number, digits = 0) => value.toLocaleString("en", { maximumFractionDigits: digits, minimumFractionDigits: digits })

/** p50 / p99 / max of latencies in milliseconds, as one cell. */
const latencyCell = (latencies: Array<number>): string => {
  const sorted = latencies.sort((a, b) => a - b)
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]
  return `${format(at(0.5), 1)} / ${format(at(0.99), 1)} / ${format(sorted[sorted.length - 1], 0)} ms`
}

/** A producer (durable with `queue`) and a consumer counting deliveries; `received(n)` waits until n arrived. */
const flow = (queue: DurableProducerQueueService | undefined) =>
  Effect.gen(function*() {
    const producer = yield* Producer.make({ name: "bench-out", consumer: "bench-in", payload: Order, ...(queue === undefined ? {} : { durableQueue: queue }) })
    const consumer = yield* Consumer.make({ name: "bench-in", producer: "bench-out", payload: Order, window: Window })
    let count = 0
    let waiting: { readonly until: number; readonly done: Deferred.Deferred<void> } | undefined
    yield* Effect.forkScoped(consumer.run(() =>
      Effect.sync(() => {
        count++
        if (waiting !== undefined && count >= waiting.until) Deferred.unsafeDone(waiting.done, Effect.void)
      })
    ))
    const received = (until: number) =>
      Effect.suspend(() => {
        if (count >= until) return Effect.void
        const done = Deferred.unsafeMake<void>(FiberId.none)
        waiting = { until, done }
        return Deferred.await(done)
      })
    return { producer, received }
  })

/**
 * `fibers` fibers each sending `perFiber` messages one at a time, from `firstId`: the seconds until
 * every one was delivered, and each send's latency.
 */
const sendPhase = (
  producer: Producer.Producer<typeof Order.Type>,
  received: (until: number) => Effect.Effect<void>,
  fibers: number,
  perFiber: number,
  firstId: number
) =>
  Effect.gen(function*() {
    const latencies: Array<number> = []
    const started = performance.now()
    yield* Effect.forEach(Array.from({ length: fibers }, (_, fiber) => fiber), (fiber) =>
      Effect.gen(function*() {
        for (let index = 0; index < perFiber; index++) {
          const sent = performance.now()
          yield* producer.send(order(firstId + fiber * perFiber + index))
          latencies.push(performance.now() - sent)
        }
      }), { concurrency: "unbounded", discard: true })
    yield* received(firstId + fibers * perFiber)
    return { seconds: (performance.now() - started) / 1000, latencies }
  })

interface SendersOptions {
  readonly backend: string
  readonly fibers: number
  readonly perFiber: number
  /** Messages the one sequential sender sends first, in the same run, on the same flow. */
  readonly solo: number
  /** Also measure what the fiber runtime alone lets this shape reach (see `bareWaits`). */
  readonly ceiling?: boolean
}

/**
 * The fiber runtime's own cost of the many-senders shape, with no library in it: `fibers` fibers
 * each waiting `perFiber` times on a bare `Effect.async`, resumed first come, first served, half
 * a window at a time on a microtask, as grants resume waiting senders. Microseconds per wait.
 */
const bareWaits = (fibers: number, perFiber: number, grant: number) =>
  Effect.gen(function*() {
    const waiting: Array<() => void> = []
    let head = 0
    let scheduled = false
    const resumeSome = () => {
      scheduled = false
      const end = Math.min(waiting.length, head + grant)
      while (head < end) waiting[head++]()
      if (head < waiting.length) schedule()
    }
    const schedule = () => {
      if (scheduled) return
      scheduled = true
      queueMicrotask(resumeSome)
    }
    const wait = Effect.async<void>((resume) => {
      waiting.push(() => resume(Effect.void))
      schedule()
    })
    const started = performance.now()
    yield* Effect.forEach(Array.from({ length: fibers }), () =>
      Effect.gen(function*() {
        for (let index = 0; index < perFiber; index++) yield* wait
      }), { concurrency: "unbounded", discard: true })
    return (performance.now() - started) * 1000 / (fibers * perFiber)
  })

/**
 * What the fiber runtime's waits alone leave of one sender's rate: the ratio if each of the many
 * senders' messages cost what one sender's does (the consumer's share of it is the same for
 * both) plus one bare suspend and resume. An estimate of the ceiling, not a bound: a waiting
 * sender's message joins a batch, which makes the producer's share a little cheaper.
 */
const ceilingNote = (soloRate: number, options: SendersOptions) =>
  Effect.map(bareWaits(options.fibers, options.perFiber, Window / 2), (waitMicros) => {
    const soloMicros = 1e6 / soloRate
    return `; with one bare wait per message on top of one sender's cost: ${format(soloMicros / (soloMicros + waitMicros), 2)}x ` +
      `(a bare Effect.async wait of ${options.fibers.toLocaleString("en")} fibers: ${format(waitMicros, 2)} µs, one sender: ${format(soloMicros, 2)} µs per message)`
  })

/** Concurrent senders against one sequential sender on the same producer (durable with `queue`). */
const senders = <R>(options: SendersOptions, queue: Effect.Effect<DurableProducerQueueService | undefined, unknown, R>) =>
  Effect.gen(function*() {
    const { producer, received } = yield* flow(yield* queue)
    const one = yield* sendPhase(producer, received, 1, options.solo, 0)
    const many = yield* sendPhase(producer, received, options.fibers, options.perFiber, options.solo)
    const messages = options.fibers * options.perFiber
    const soloRate = options.solo / one.seconds
    const rate = messages / many.seconds
    const ceiling = options.ceiling === true ? yield* ceilingNote(soloRate, options) : ""
    const heap = heapAfterGcMiB()
    return {
      name: `${options.fibers} fibers x ${options.perFiber} sends one at a time, ${options.backend}, window ${Window}`,
      messages,
      seconds: many.seconds,
      rate,
      unit: "msgs/s",
      peakRssMiB: peakRssMiB(),
      ...(heap === undefined ? {} : { heapAfterGcMiB: heap }),
      note: `${format(rate / soloRate, 2)}x one sequential sender (${format(soloRate)} msgs/s, ${format(options.solo)} msgs); ` +
        `send latency p50/p99/max ${latencyCell(many.latencies)} (one sender: ${latencyCell(one.latencies)})${ceiling}`
    } satisfies Row
  }).pipe(Effect.scoped)

export const postgresSenders = (fibers: number, perFiber: number, solo: number) =>
  onPostgres((tablePrefix) =>
    senders({ backend: "durable PostgreSQL", fibers, perFiber, solo }, SqlProducerQueue.makeSql({ queueName: "bench", tablePrefix })))

export const sqliteSenders = (fibers: number, perFiber: number, solo: number) =>
  onSqlite(senders({ backend: "durable SQLite", fibers, perFiber, solo }, SqlProducerQueue.makeSql({ queueName: "bench", tablePrefix: "reliable_" })))

export const memorySenders = (fibers: number, perFiber: number, solo: number) =>
  Effect.provide(senders({ backend: "memory transport (no queue)", fibers, perFiber, solo, ceiling: true }, Effect.succeed(undefined)), system)

/** Memory at one point of a run: RSS, then the heap in use after a full collection. */
interface MemorySample {
  readonly rss: number
  readonly heapAfterGc: number
}

const sampleMemory = (): MemorySample => ({ rss: process.memoryUsage().rss / 1048576, heapAfterGc: heapAfterGcMiB() ?? NaN })

/**
 * `enqueue` on a durable PostgreSQL producer with no consumer: `fibers` fibers each enqueueing one
 * message at a time (group commit shares their transactions). Memory is sampled at a tenth and at
 * each quarter: RSS (V8 sizes its heap to the garbage 1,000 waiting senders leave behind, and
 * keeps it after collecting), and the heap in use after a full collection, what the process keeps.
 */
export const postgresEnqueue = (messages: number, fibers: number) =>
  onPostgres((tablePrefix) =>
    Effect.gen(function*() {
      const queue = yield* SqlProducerQueue.makeSql({ queueName: "bench", tablePrefix })
      const producer = yield* Producer.make({ name: "bench-out", consumer: "bench-in", payload: Order, durableQueue: queue })
      const perFiber = messages / fibers
      const quarter = messages / 4
      let enqueued = 0
      const samples: Array<MemorySample> = []
      const started = performance.now()
      yield* Effect.forEach(Array.from({ length: fibers }, (_, fiber) => fiber), (fiber) =>
        Effect.gen(function*() {
          for (let index = 0; index < perFiber; index++) {
            yield* producer.enqueue(order(fiber * perFiber + index))
            if (++enqueued === messages / 10 || enqueued % quarter === 0) samples.push(sampleMemory())
          }
        }), { concurrency: "unbounded", discard: true })
      const seconds = (performance.now() - started) / 1000
      const points = [messages / 10, quarter, 2 * quarter, 3 * quarter, messages]
      const at = (pick: (sample: MemorySample) => number, digits = 0) =>
        points.map((point, index) => `${format(point)}: ${format(samples[index] === undefined ? NaN : pick(samples[index]), digits)}`).join(", ")
      const last = samples[samples.length - 1]
      return {
        name: `enqueue with no consumer, ${fibers} fibers one at a time, durable PostgreSQL, ${format(messages)} msgs`,
        messages,
        seconds,
        rate: messages / seconds,
        unit: "msgs/s",
        peakRssMiB: peakRssMiB(),
        ...(last === undefined ? {} : { heapAfterGcMiB: last.heapAfterGc }),
        note: `RSS MiB at ${at((sample) => sample.rss)}; heap after a full GC, MiB: ${at((sample) => sample.heapAfterGc, 1)}`
      } satisfies Row
    }).pipe(Effect.scoped))

const OrderRow = Schema.Struct({ orderId: Schema.Number, customer: Schema.String, total: Schema.Number })

/**
 * Outbox writers: `writers` fibers, each running `perWriter` transactions that insert an order row
 * and its message, through `DurableQueue.writer` and then through a plain INSERT of the same
 * columns and bytes into a table shaped like the backlog (same keys), in the same run.
 */
export const postgresOutbox = (writers: number, perWriter: number) =>
  onPostgres((tablePrefix) =>
    Effect.gen(function*() {
      const sql = yield* SqlClient
      const orders = `${tablePrefix}orders`
      const plain = `${tablePrefix}plain_outbox`
      yield* sql`CREATE TABLE ${sql(orders)} (id TEXT PRIMARY KEY, customer TEXT NOT NULL, total BIGINT NOT NULL)`
      yield* sql`CREATE TABLE ${sql(plain)} (id BIGINT GENERATED ALWAYS AS IDENTITY, queue TEXT NOT NULL, message_id TEXT NOT NULL,
        payload BYTEA NOT NULL, enqueued_at BIGINT NOT NULL, trace TEXT NULL, PRIMARY KEY (queue, id))`
      yield* sql`CREATE UNIQUE INDEX ${sql(`${plain}_message`)} ON ${sql(plain)} (queue, message_id)`
      const outbox = yield* Writer.writer({ queueName: "bench", payload: OrderRow, tablePrefix })
      const encoder = new TextEncoder()
      const transactions = (label: string, message: (id: string, value: typeof OrderRow.Type) => Effect.Effect<unknown, unknown>) =>
        Effect.gen(function*() {
          const started = performance.now()
          yield* Effect.forEach(Array.from({ length: writers }, (_, writer) => writer), (writer) =>
            Effect.gen(function*() {
              for (let index = 0; index < perWriter; index++) {
                const id = `${label}-${writer}-${index}`
                const value = { orderId: writer * perWriter + index, customer: "c-42", total: 1999 }
                yield* sql.withTransaction(Effect.zipRight(
                  sql`INSERT INTO ${sql(orders)} (id, customer, total) VALUES (${id}, ${value.customer}, ${value.total})`,
                  message(id, value)
                ))
              }
            }), { concurrency: "unbounded", discard: true })
          return writers * perWriter / ((performance.now() - started) / 1000)
        })
      const library = yield* transactions("lib", (id, value) => outbox.enqueue(value, { messageId: id }))
      const bare = yield* transactions("plain", (id, value) =>
        sql`INSERT INTO ${sql(plain)} (queue, message_id, payload, enqueued_at)
          VALUES (${"bench"}, ${id}, ${encoder.encode(JSON.stringify(value))}, ${Date.now()})`)
      const messages = writers * perWriter
      return {
        name: `outbox: ${writers} writers, ${format(messages)} transactions of an order row + DurableQueue.writer enqueue, PostgreSQL`,
        messages,
        seconds: messages / library,
        rate: library,
        unit: "msgs/s",
        peakRssMiB: peakRssMiB(),
        note: `${format(library / bare, 2)}x the same transactions with a plain INSERT of the message (${format(bare)} msgs/s)`
      } satisfies Row
    }))

/**
 * `producer.sink` of a stream of `messages` (the stream's own chunks of 4,096 each one `sendAll`)
 * against one `sendAll` of the same messages, on the memory transport; each is run twice and the
 * second run counts (the first warms the JIT).
 */
export const sinkVersusSendAll = (messages: number) =>
  Effect.gen(function*() {
    const { producer, received } = yield* flow(undefined)
    let sent = 0
    const timed = (effect: Effect.Effect<unknown, unknown>) =>
      Effect.gen(function*() {
        const started = performance.now()
        yield* effect
        sent += messages
        yield* received(sent)
        return (performance.now() - started) / 1000
      })
    const viaSink = timed(Stream.run(Stream.map(Stream.range(0, messages - 1), order), producer.sink))
    const viaSendAll = timed(producer.sendAll(Array.from({ length: messages }, (_, orderId) => ({ payload: order(orderId) }))))
    yield* viaSink
    yield* viaSendAll
    const sinkSeconds = yield* viaSink
    const sendAllSeconds = yield* viaSendAll
    return {
      name: `producer.sink of a ${format(messages)}-element stream (chunks of 4,096), memory transport, window ${Window}`,
      messages,
      seconds: sinkSeconds,
      rate: messages / sinkSeconds,
      unit: "msgs/s",
      peakRssMiB: peakRssMiB(),
      note: `${format(sendAllSeconds / sinkSeconds, 2)}x one sendAll of the same ${format(messages)} (${format(messages / sendAllSeconds)} msgs/s)`
    } satisfies Row
  }).pipe(Effect.scoped, Effect.provide(system))
