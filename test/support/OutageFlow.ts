/**
 * Flows for the database outage tests, on real PostgreSQL and the live clock: a durable
 * point-to-point or work-pulling flow whose queue's client goes through a given URL (a proxy that
 * can cut, or a throwaway cluster), senders that keep sending, a delivery log with times, and
 * the health and failure events. `check` asserts what every outage must keep; `resumeMs` is the
 * figure each scenario prints.
 */
import { PgClient } from "@effect/sql-pg"
import type { SqlClient } from "@effect/sql/SqlClient"
import { Context, Duration, Effect, Exit, Fiber, Layer, Queue, Redacted, Schedule, Schema, Scope } from "effect"
import * as Consumer from "../../src/Consumer.js"
import { DurableProducerQueue } from "../../src/DurableQueue/DurableProducerQueue.js"
import { DurableWorkQueue } from "../../src/DurableQueue/DurableWorkQueue.js"
import * as SqlProducerQueue from "../../src/DurableQueue/SqlProducerQueue.js"
import * as SqlWorkQueue from "../../src/DurableQueue/SqlWorkQueue.js"
import type * as Config from "../../src/Protocol/Config.js"
import * as Producer from "../../src/Producer.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as MemoryTransport from "../../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../../src/WorkPulling.js"
import { uniqueSuffix } from "../DurableQueue/SqlTestSupport.js"

export const Order = Schema.Struct({ sender: Schema.Number, n: Schema.Number })

export interface Delivery {
  readonly messageId: string
  readonly at: number
}

export interface HealthEvent {
  readonly tag: string
  readonly at: number
}

/** Options the flows pass to the producer (the healing ones). */
export interface HealingOptions {
  readonly queueTimeout?: Duration.DurationInput
  readonly queueBackoff?: Config.QueueBackoff
  readonly drainTimeout?: Duration.DurationInput
  readonly backlogPollInterval?: Duration.DurationInput
}

/** A PostgreSQL client on `url` whose connections fail fast when nobody answers. */
export const clientLayer = (url: string): Layer.Layer<SqlClient, unknown> =>
  PgClient.layer({ url: Redacted.make(url), connectTimeout: Duration.seconds(2) })

export const buildClient = (url: string): Effect.Effect<Context.Context<SqlClient>, unknown, Scope.Scope> =>
  Layer.build(clientLayer(url))

/** What a running flow exposes to a scenario. */
export interface Flow {
  readonly deliveries: Array<Delivery>
  readonly health: Array<HealthEvent>
  readonly failures: Array<unknown>
  /** Message ids whose send (or sendAll) returned: stored and accepted. */
  readonly accepted: Set<string>
  readonly degraded: Effect.Effect<boolean>
  /** Starts `count` senders; `batch` > 1 sends with `sendAll` batches of that size. */
  readonly startSenders: (count: number, batch?: number) => Effect.Effect<Senders, never, Scope.Scope>
}

export interface Senders {
  /** Stops after the calls in progress and waits for them (fails if one failed). */
  readonly stop: Effect.Effect<void, unknown>
}

type Sender = (payloads: ReadonlyArray<{ readonly payload: typeof Order.Type; readonly messageId: string }>) => Effect.Effect<unknown, unknown>

const watchEvents = Effect.gen(function*() {
  const health: Array<HealthEvent> = []
  const failures: Array<unknown> = []
  const healthQueue = yield* ReliableSystem.subscribeHealth
  const failureQueue = yield* ReliableSystem.subscribeFailures
  yield* Effect.forkScoped(Effect.forever(Effect.map(Queue.take(healthQueue), (event) => void health.push({ tag: event._tag, at: Date.now() }))))
  yield* Effect.forkScoped(Effect.forever(Effect.map(Queue.take(failureQueue), (failure) => void failures.push(failure))))
  return { health, failures }
})

const sendersOf = (send: () => Sender, accepted: Set<string>) => (count: number, batch = 1) =>
  Effect.gen(function*() {
    let running = true
    const loop = (sender: number) =>
      Effect.gen(function*() {
        let n = 0
        while (running) {
          const payloads = Array.from({ length: batch }, () => {
            n++
            return { payload: { sender, n }, messageId: `s${sender}-${n}` }
          })
          // A producer restarted meanwhile (closed, made again) refuses the call: it goes to the
          // new one, under the same ids, as an application would resubmit.
          yield* Effect.suspend(() => send()(payloads)).pipe(
            Effect.retry({ while: (error) => (error as { readonly _tag?: string })._tag === "EndpointClosed", schedule: Schedule.spaced("50 millis") })
          )
          for (const { messageId } of payloads) accepted.add(messageId)
        }
      })
    const fibers = yield* Effect.forEach(Array.from({ length: count }, (_, sender) => sender), (sender) => Effect.forkScoped(loop(sender)))
    return {
      stop: Effect.zipRight(Effect.sync(() => void (running = false)), Effect.asVoid(Fiber.joinAll(fibers)))
    }
  })

/** The system every flow runs on: one in-process node. */
export const systemLayer = () => ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory))

/**
 * A durable point-to-point flow on `client`, its producer in a scope of its own so a scenario
 * can restart it (`restartProducer`) the way an application restarts.
 */
export const pointToPoint = (client: Context.Context<SqlClient>, tablePrefix: string, healing: HealingOptions = {}) =>
  Effect.gen(function*() {
    // The queue is made once (its migrations need the database); the producer endpoint on it is
    // made again when a scenario restarts it, as an application's would be.
    const queueName = `outage-${uniqueSuffix()}`
    const queue = yield* Layer.build(
      SqlProducerQueue.layerSql({ queueName, tablePrefix }).pipe(Layer.provide(Layer.succeedContext(client)))
    ).pipe(Effect.map((context) => Context.get(context, DurableProducerQueue)))
    const makeProducer = Effect.gen(function*() {
      const scope = yield* Scope.make()
      const producer = yield* Producer.make({ name: "p", consumer: "c", payload: Order, durableQueue: queue, retryInterval: "100 millis", ...healing })
        .pipe(Scope.extend(scope))
      return { scope, producer }
    })
    let current = yield* makeProducer
    const events = yield* watchEvents
    const consumer = yield* Consumer.make({ name: "c", producer: "p", payload: Order, resendInterval: "200 millis" })
    const deliveries: Array<Delivery> = []
    yield* Effect.forkScoped(consumer.run((delivery) => Effect.sync(() => void deliveries.push({ messageId: delivery.messageId, at: Date.now() }))))
    const accepted = new Set<string>()
    const send = (): Sender => (payloads) =>
      payloads.length === 1 ? current.producer.send(payloads[0].payload, { messageId: payloads[0].messageId }) : current.producer.sendAll(payloads)
    const flow: Flow = {
      deliveries,
      ...events,
      accepted,
      degraded: Effect.suspend(() => Effect.map(current.producer.stats, (stats) => stats.degraded)),
      startSenders: sendersOf(send, accepted)
    }
    return {
      flow,
      queueName,
      /** Closes the producer's scope: a clean shutdown. */
      closeProducer: Effect.suspend(() => Scope.close(current.scope, Exit.void)),
      /** Closes the producer's scope (a clean shutdown) and makes it again; senders go on with the new one. */
      restartProducer: Effect.gen(function*() {
        yield* Scope.close(current.scope, Exit.void)
        current = yield* makeProducer
      })
    }
  })

/** A durable work-pulling flow on `client`: one producer, two workers. */
export const workPulling = (client: Context.Context<SqlClient>, tablePrefix: string, healing: HealingOptions = {}) =>
  Effect.gen(function*() {
    const queue = yield* Layer.build(
      SqlWorkQueue.layerWorkSql({ queueName: `outage-${uniqueSuffix()}`, tablePrefix }).pipe(Layer.provide(Layer.succeedContext(client)))
    ).pipe(Effect.map((context) => Context.get(context, DurableWorkQueue)))
    // In a scope of its own, so a scenario can close it (`closeProducer`) before the flow ends.
    const producerScope = yield* Scope.make()
    yield* Effect.addFinalizer(() => Scope.close(producerScope, Exit.void))
    const producer = yield* WorkPulling.producer({ name: "jobs", payload: Order, durableWorkQueue: queue, retryInterval: "100 millis", ...healing })
      .pipe(Scope.extend(producerScope))
    const events = yield* watchEvents
    const system = yield* ReliableSystem.ReliableSystem
    const deliveries: Array<Delivery> = []
    for (const name of ["w1", "w2"]) {
      const worker = yield* WorkPulling.worker({ name, producer: "jobs", payload: Order, window: 5, resendInterval: "200 millis" })
      yield* Effect.forkScoped(worker.run((delivery) => Effect.sync(() => void deliveries.push({ messageId: delivery.messageId, at: Date.now() }))))
    }
    const accepted = new Set<string>()
    const send = (): Sender => (payloads) =>
      payloads.length === 1 ? producer.send(payloads[0].payload, { messageId: payloads[0].messageId }) : producer.sendAll(payloads)
    const flow: Flow = {
      deliveries,
      ...events,
      accepted,
      degraded: WorkPulling.stats("jobs").pipe(
        Effect.map((stats) => stats.degraded),
        Effect.provideService(ReliableSystem.ReliableSystem, system),
        Effect.orDie
      ),
      startSenders: sendersOf(send, accepted)
    }
    return { flow, closeProducer: Scope.close(producerScope, Exit.void) }
  })

/** Polls `done` every 20 ms of real time; fails after `limitMs` saying what it waited for. */
export const waitFor = (what: string, done: () => boolean, limitMs: number): Effect.Effect<void, Error> =>
  Effect.suspend(() => done() ? Effect.void : Effect.zipRight(Effect.sleep("20 millis"), waitFor(what, done, limitMs))).pipe(
    Effect.timeoutFail({ duration: Duration.millis(limitMs), onTimeout: () => new Error(`timed out after ${limitMs}ms waiting for ${what}`) })
  )

/** Time from `healedAt` to the first delivery after it of a message never delivered before. */
export const waitResume = (flow: Flow, healedAt: number, limitMs = 30_000): Effect.Effect<number, Error> =>
  Effect.gen(function*() {
    const firstNew = () => {
      const before = new Set<string>()
      for (const delivery of flow.deliveries) {
        if (delivery.at >= healedAt && !before.has(delivery.messageId)) return delivery.at
        before.add(delivery.messageId)
      }
      return undefined
    }
    yield* waitFor("the first new delivery after the database came back", () => firstNew() !== undefined, limitMs)
    return firstNew()! - healedAt
  })

/**
 * How an outage shows on `ReliableSystem.health`: one degraded and one recovered event, or, for an
 * outage that may be over before a call's retries run out (a crash restart of a small cluster
 * takes a few hundred milliseconds on a fast machine), either that pair or nothing.
 */
export type HealthExpected = "Pair" | "PairOrNone"

/**
 * What every outage keeps, checked on the delivery log once the senders stopped: every accepted
 * message delivered; a message delivered twice only if its first delivery came so shortly before
 * the outage (`graceMs`) that its confirmation may not have been written; the health events
 * `health` expects; no failure.
 */
export const check = (flow: Flow, outageAt: number, graceMs = 3_000, health: HealthExpected = "Pair"): string | undefined => {
  const delivered = new Map<string, number>()
  const firstAt = new Map<string, number>()
  for (const { at, messageId } of flow.deliveries) {
    delivered.set(messageId, (delivered.get(messageId) ?? 0) + 1)
    if (!firstAt.has(messageId)) firstAt.set(messageId, at)
  }
  const lost = [...flow.accepted].filter((id) => !delivered.has(id))
  if (lost.length > 0) return `${lost.length} accepted messages never delivered: ${lost.slice(0, 5).join(", ")}`
  const early = [...delivered].filter(([id, count]) => count > 1 && firstAt.get(id)! < outageAt - graceMs).map(([id]) => id)
  if (early.length > 0) return `confirmed long before the outage and delivered again: ${early.slice(0, 5).join(", ")}`
  const tags = JSON.stringify(flow.health.map((event) => event.tag))
  const pair = tags === JSON.stringify(["ReliableDegraded", "ReliableRecovered"])
  if (!(pair || (health === "PairOrNone" && tags === "[]"))) return `health events: ${tags}`
  if (flow.failures.length > 0) return `failures published: ${flow.failures.map(String).join("; ")}`
  return undefined
}

/** Per sender, ids in the order they were first delivered: increasing (point-to-point keeps order). */
export const orderViolation = (flow: Flow): string | undefined => {
  const seen = new Set<string>()
  const last = new Map<string, number>()
  for (const { messageId } of flow.deliveries) {
    if (seen.has(messageId)) continue
    seen.add(messageId)
    const [sender, n] = messageId.slice(1).split("-")
    if ((last.get(sender) ?? 0) >= Number(n)) return `sender ${sender}: ${n} first delivered after ${last.get(sender)}`
    last.set(sender, Number(n))
  }
  return undefined
}
