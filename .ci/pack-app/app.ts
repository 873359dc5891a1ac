/**
 * The app the pack check (`.ci/pack-check`) builds against the packed tarball, as a user would:
 * it imports the package by its name, is compiled with declaration emit, and runs.
 *
 * The exported values below make declaration emit name the package's types: a type that appears
 * in a public signature but is not exported fails the build with TS2742. The run sends orders
 * through a durable point-to-point flow and jobs through a work-pulling pool on the in-process
 * transport, then sends a flow over the TCP transport.
 */
import { Config, Context, Deferred, Effect, Layer, Ref, Schema } from "effect"
import type { Scope } from "effect"
import { Cluster, Consumer, DurableQueue, Producer, ReliableSystem, Transport, WorkPulling } from "effect-reliable"
import * as Ops from "effect-reliable/ops"
import * as Testing from "effect-reliable/testing"
import * as Assert from "node:assert/strict"

const Order = Schema.Struct({ id: Schema.Number, item: Schema.String })

export const makeProducer = Producer.make({ name: "orders-out", consumer: "orders-in", payload: Order })
export const sendOne = Effect.flatMap(makeProducer, (producer) => producer.send({ id: 0, item: "probe" }))
export const sendMany = Effect.flatMap(makeProducer, (producer) => producer.sendAll([{ payload: { id: 1, item: "a" } }]))
export const producerStats = Effect.flatMap(makeProducer, (producer) => producer.stats)
export const makeConsumer = Consumer.make({ name: "orders-in", producer: "orders-out", payload: Order })
export const consumerStats = Effect.flatMap(makeConsumer, (consumer) => consumer.stats)
export const confirmations = Effect.map(makeProducer, (producer) => producer.confirmations)
export const deliveries = Effect.map(makeConsumer, (consumer) => consumer.deliveries)
export const makeWorkProducer = WorkPulling.producer({ name: "jobs", payload: Order })
export const sendJob = Effect.flatMap(makeWorkProducer, (producer) => producer.send({ id: 1, item: "job" }))
export const makeWorker = WorkPulling.worker({ name: "worker", producer: "jobs", payload: Order })
export const workStats = WorkPulling.stats("jobs")
export const durableQueue = DurableQueue.makeMemory
export const sqlQueue = DurableQueue.makeSql({ queueName: "orders" })
export const sqlWorkQueue = DurableQueue.layerWorkSql({ queueName: "jobs" })
export const flakyQueue = Effect.flatMap(DurableQueue.makeMemory, (queue) => DurableQueue.flakyProducerQueue(queue, { seed: 1, failureRate: 0.1 }))
export const memoryNode = ReliableSystem.layer().pipe(Layer.provideMerge(Transport.layerMemory))
export const faultyNode = ReliableSystem.layer().pipe(Layer.provideMerge(Transport.layerFaulty({ seed: 7, drop: 0.1 })))
export const faultStats = Effect.map(Transport.FaultInjector, (injector) => injector.stats())
export const failures = ReliableSystem.failures
export const respawn = ReliableSystem.respawn("orders-out")
export const clusterNode = ReliableSystem.layerCluster({ relocatable: [Cluster.relocatable("jobs", (name) => WorkPulling.producer({ name, payload: Order }))] })
  .pipe(Layer.provide(Cluster.layerPg()))
export const spawnJobs = Cluster.spawn("jobs", "jobs-1")
export const clusterEndpoints = Cluster.endpoints
export const systemFromConfig = ReliableSystem.layerConfig({ lookupTimeout: Config.duration("LOOKUP_TIMEOUT") })
export const socketFromConfig = Transport.layerSocketConfig({ host: Config.string("HOST"), port: Config.port("PORT") })
export const snapshot = ReliableSystem.snapshot
export const opsPage = Ops.layer({ port: 0 })
export const opsHandler = Ops.webHandler({ actions: true })
export const waitForDelivery = Testing.advanceUntil(() => true, { label: "a delivery" })
export const recorder = Testing.recorder()
export const faultRun = Testing.faultRun({
  plan: Testing.faultPlan(1),
  producer: () => Producer.make({ name: "orders-out", consumer: "orders-in", payload: Order }),
  consumer: () => Consumer.make({ name: "orders-in", producer: "orders-out", payload: Order }),
  message: (id) => ({ id, item: `item-${id}` })
})

/** Runs `count` deliveries through `consumer`, resolving once all have been handled. */
const receive = (consumer: Consumer.Consumer<{ readonly id: number }>, count: number) =>
  Effect.gen(function*() {
    const seen = yield* Ref.make(new Set<number>())
    const done = yield* Deferred.make<void>()
    yield* Effect.forkScoped(consumer.run((delivery) =>
      Effect.flatMap(Ref.updateAndGet(seen, (ids) => new Set(ids).add(delivery.payload.id)), (ids) =>
        ids.size === count ? Deferred.succeed(done, undefined) : Effect.void)
    ))
    return Deferred.await(done).pipe(Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error(`${count} deliveries not received in 20s`) }))
  })

const orders = (count: number) => Array.from({ length: count }, (_, i) => ({ payload: { id: i + 1, item: `item-${i + 1}` } }))

const pointToPoint = Effect.gen(function*() {
  const received = yield* receive(yield* makeConsumer, 500)
  const producer = yield* Producer.make({
    name: "orders-out",
    consumer: "orders-in",
    payload: Order,
    durableQueue: yield* DurableQueue.makeMemory
  })
  const stored = yield* producer.sendAll(orders(500))
  Assert.equal(stored.length, 500)
  yield* received
  console.log("point-to-point: 500 orders stored and delivered")
  const page = yield* Ops.make({ port: 0 })
  const state = yield* Effect.promise(() => fetch(`${page.url}api/snapshot`).then((response) => response.json() as Promise<{ endpoints: Array<{ name: string }> }>))
  Assert.deepEqual(state.endpoints.map((endpoint) => endpoint.name), ["orders-in", "orders-out"])
  console.log(`operations page: ${page.url} lists the flow`)
})

const workPulling = Effect.gen(function*() {
  const Job = Schema.Struct({ id: Schema.Number })
  const producer = yield* WorkPulling.producer({ name: "jobs", payload: Job, durableWorkQueue: yield* DurableQueue.makeWorkMemory })
  const seen = yield* Ref.make(new Set<number>())
  const done = yield* Deferred.make<void>()
  for (const name of ["worker-1", "worker-2"]) {
    const worker = yield* WorkPulling.worker({ name, producer: "jobs", payload: Job, window: 10 })
    yield* Effect.forkScoped(worker.run((delivery) =>
      Effect.flatMap(Ref.updateAndGet(seen, (ids) => new Set(ids).add(delivery.payload.id)), (ids) =>
        ids.size === 200 ? Deferred.succeed(done, undefined) : Effect.void)
    ))
  }
  yield* producer.sendAll(Array.from({ length: 200 }, (_, i) => ({ payload: { id: i + 1 } })))
  yield* Deferred.await(done).pipe(Effect.timeout("20 seconds"))
  console.log(`work-pulling: 200 jobs done, ${(yield* WorkPulling.stats("jobs")).confirmed} confirmed`)
})

const socketNode = Layer.build(ReliableSystem.layer().pipe(Layer.provideMerge(Transport.layerSocket({ host: "127.0.0.1", port: 0 }))))

const portOf = (node: Context.Context<ReliableSystem.ReliableSystem>) =>
  Number(Context.get(node, ReliableSystem.ReliableSystem).node.split(":")[1])

/** A remoting-only flow between two socket transports in this process. */
const overTcp = Effect.gen(function*() {
  const producerNode = yield* socketNode
  const consumerNode = yield* socketNode
  const peer = (node: typeof producerNode) => ({ host: "127.0.0.1", port: portOf(node) })
  const consumer = yield* Consumer.make({ name: "orders-in", producer: "orders-out", payload: Order, remoteProducer: peer(producerNode) })
    .pipe(Effect.provide(consumerNode))
  const received = yield* receive(consumer, 300)
  const producer = yield* Producer.make({ name: "orders-out", consumer: "orders-in", payload: Order, remoteConsumer: peer(consumerNode) })
    .pipe(Effect.provide(producerNode))
  yield* producer.sendAll(orders(300))
  yield* received
  console.log("socket transport: 300 orders over TCP")
})

const inMemory = <A, E>(effect: Effect.Effect<A, E, ReliableSystem.ReliableSystem | Scope.Scope>) =>
  effect.pipe(Effect.scoped, Effect.provide(memoryNode))

await Effect.runPromise(Effect.gen(function*() {
  yield* inMemory(pointToPoint)
  yield* inMemory(workPulling)
  yield* Effect.scoped(overTcp)
}))
