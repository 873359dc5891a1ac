/**
 * Bad options are typed errors, never defects, in every constructor that takes an options object:
 * an unknown (e.g. misspelt) option is refused with `ReliableConfigError` naming it (the socket
 * transport with its own `SocketTransportError`, reason "InvalidOptions"), and so are values no
 * option accepts: probabilities outside [0, 1], durations that are not durations, table
 * prefixes that are not SQL identifiers, payloads that are not Schemas.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import * as Cluster from "../src/Cluster.js"
import * as Consumer from "../src/Consumer.js"
import * as DurableQueue from "../src/DurableQueue.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as Transport from "../src/Transport.js"
import * as WorkPulling from "../src/WorkPulling.js"

const Order = Schema.Struct({ id: Schema.Number })

/** What an effect fails with: the error's tag and the option it names. */
const refusal = (effect: Effect.Effect<unknown, { readonly _tag: string; readonly option?: string }, any>) =>
  Effect.map(Effect.flip(effect), (error) => [error._tag, error.option])

/** Options as a user might misspell them: the type checker would catch it, a JS caller would not. */
const untyped = (options: unknown): never => options as never

const system = ReliableSystem.layer().pipe(Layer.provide(Transport.layerMemory))
const sqlite = SqliteClient.layer({ filename: ":memory:" })

describe("option checks", () => {
  it.scoped("endpoints refuse unknown options", () =>
    Effect.gen(function*() {
      expect(yield* refusal(Consumer.make(untyped({ name: "c", producer: "p", payload: Order, windwo: 5 }))))
        .toEqual(["ReliableConfigError", "windwo"])
      expect(yield* refusal(Producer.make(untyped({ name: "p", consumer: "c", payload: Order, retryIntervall: "1 second" }))))
        .toEqual(["ReliableConfigError", "retryIntervall"])
      expect(yield* refusal(WorkPulling.worker(untyped({ name: "w", producer: "d", payload: Order, lendPayloads: true }))))
        .toEqual(["ReliableConfigError", "lendPayloads"])
      expect(yield* refusal(WorkPulling.worker(untyped({ name: "w", producer: "d", payload: Order, remoteProducer: { host: "h", port: 1 } }))))
        .toEqual(["ReliableConfigError", "remoteProducer"])
      // An option given as undefined counts as not given.
      yield* Consumer.make(untyped({ name: "c", producer: "p", payload: Order, windwo: undefined }))
    }).pipe(Effect.provide(system)))

  it.scoped("the refusal names the constructor and the options it takes", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Consumer.make(untyped({ name: "c", producer: "p", payload: Order, windwo: 5 })))
      expect(error.message).toContain(`Consumer.make takes no option "windwo"`)
      expect(error.message).toContain("window")
    }).pipe(Effect.provide(system)))

  it.scoped("endpoints refuse a payload that is not a Schema and flags that are not booleans", () =>
    Effect.gen(function*() {
      expect(yield* refusal(Consumer.make(untyped({ name: "c", producer: "p", payload: undefined }))))
        .toEqual(["ReliableConfigError", "payload"])
      expect(yield* refusal(Producer.make(untyped({ name: "p", consumer: "c", payload: { id: 1 } }))))
        .toEqual(["ReliableConfigError", "payload"])
      expect(yield* refusal(WorkPulling.producer(untyped({ name: "d", payload: Order, deliveryConfirmation: "yes" }))))
        .toEqual(["ReliableConfigError", "deliveryConfirmation"])
      expect(yield* refusal(Producer.make(untyped({ name: "p", consumer: "c", payload: Order, queueRetry: null }))))
        .toEqual(["ReliableConfigError", "options"])
      expect(yield* refusal(Producer.make(untyped({ name: "p", consumer: "c", payload: Order, queueRetry: { attempts: 2, intervall: "1 second" } }))))
        .toEqual(["ReliableConfigError", "intervall"])
    }).pipe(Effect.provide(system)))

  it.scoped("the system refuses unknown options and a lookup timeout that is not a duration", () =>
    Effect.gen(function*() {
      const build = (options: ReliableSystem.ReliableSystemOptions) =>
        Layer.build(ReliableSystem.layer(options).pipe(Layer.provide(Transport.layerMemory)))
      expect(yield* refusal(build(untyped({ lookupTimout: "1 second" })))).toEqual(["ReliableConfigError", "lookupTimout"])
      expect(yield* refusal(build(untyped({ lookupTimeout: "soon" })))).toEqual(["ReliableConfigError", "lookupTimeout"])
      expect(yield* refusal(build({ lookupTimeout: 0 }))).toEqual(["ReliableConfigError", "lookupTimeout"])
    }))

  it.scoped("a cluster member refuses unknown options and bad relocatable factories", () =>
    Effect.gen(function*() {
      const build = (options: ReliableSystem.ClusterSystemOptions) =>
        Layer.build(ReliableSystem.layerCluster(options).pipe(Layer.provide(Transport.layerMemory), Layer.provide(Cluster.layerMemory)))
      const factory = Cluster.relocatable("dispatcher", () => Effect.void)
      expect(yield* refusal(build(untyped({ leese: "1 second" })))).toEqual(["ReliableConfigError", "leese"])
      expect(yield* refusal(build({ relocatable: [factory, factory] }))).toEqual(["ReliableConfigError", "relocatable"])
      expect(yield* refusal(build({ relocatable: [untyped({ key: "dispatcher", make: "not a function" })] })))
        .toEqual(["ReliableConfigError", "relocatable"])
      expect(yield* refusal(build({ relocatable: [Cluster.relocatable(" ", () => Effect.void)] })))
        .toEqual(["ReliableConfigError", "relocatable.key"])
    }))

  it.scoped("Cluster.spawn refuses unknown options and a timeout that is not a duration", () =>
    Effect.gen(function*() {
      const member = yield* Layer.build(ReliableSystem.layerCluster({ lease: "1 second" }).pipe(
        Layer.provide(Transport.layerMemory),
        Layer.provide(Cluster.layerMemory)
      ))
      const spawn = (options: Cluster.SpawnOptions) => Effect.provide(Cluster.spawn("dispatcher", "d", options), member)
      expect(yield* refusal(spawn(untyped({ nod: "elsewhere:1" })))).toEqual(["ReliableConfigError", "nod"])
      expect(yield* refusal(spawn(untyped({ timeout: "whenever" })))).toEqual(["ReliableConfigError", "timeout"])
      expect(yield* refusal(spawn({ node: "" }))).toEqual(["ReliableConfigError", "node"])
    }))

  it.scoped("the faulty transport refuses probabilities outside [0, 1], bad durations and unknown options", () =>
    Effect.gen(function*() {
      const build = (options: Transport.FaultOptions) => Layer.build(Transport.layerFaulty(options))
      expect(yield* refusal(build({ seed: 1, drop: 2 }))).toEqual(["ReliableConfigError", "drop"])
      expect(yield* refusal(build({ seed: 1, drop: { toConsumer: -0.5 } }))).toEqual(["ReliableConfigError", "drop.toConsumer"])
      expect(yield* refusal(build({ seed: 1, drop: untyped({ toConsumr: 0.5 }) }))).toEqual(["ReliableConfigError", "toConsumr"])
      expect(yield* refusal(build({ seed: 1, duplicate: Number.NaN }))).toEqual(["ReliableConfigError", "duplicate"])
      expect(yield* refusal(build({ seed: 1, reorderWindow: untyped("a while") }))).toEqual(["ReliableConfigError", "reorderWindow"])
      expect(yield* refusal(build({ seed: 1, delay: Infinity }))).toEqual(["ReliableConfigError", "delay"])
      expect(yield* refusal(build(untyped({ seed: "seven" })))).toEqual(["ReliableConfigError", "seed"])
      expect(yield* refusal(build(untyped({ seed: 1, dropp: 0.1 })))).toEqual(["ReliableConfigError", "dropp"])
      expect(yield* refusal(Layer.build(Transport.layerWithFaults({ seed: 1, reorder: 1.01 }).pipe(Layer.provide(Transport.layerMemory)))))
        .toEqual(["ReliableConfigError", "reorder"])
      yield* build({ seed: 1, drop: 1, duplicate: 0, delay: 0 })
    }))

  it.scoped("the socket transport refuses unknown options with its own typed error", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Layer.build(Transport.layerSocket(untyped({ host: "127.0.0.1", port: 0, maxFrameSise: 4096 }))))
      expect([error._tag, error.reason]).toEqual(["SocketTransportError", "InvalidOptions"])
      expect(error.message).toContain(`"maxFrameSise"`)
    }))

  it.scoped("SQL queues and the PostgreSQL registry refuse a bad table prefix, a blank queue name and unknown options before touching the database", () =>
    Effect.gen(function*() {
      expect(yield* refusal(DurableQueue.makeSql({ queueName: "q", tablePrefix: "bad-prefix" }))).toEqual(["ReliableConfigError", "tablePrefix"])
      expect(yield* refusal(DurableQueue.makeWorkSql({ queueName: "q", tablePrefix: "9lives" }))).toEqual(["ReliableConfigError", "tablePrefix"])
      expect(yield* refusal(DurableQueue.makeSql({ queueName: " " }))).toEqual(["ReliableConfigError", "queueName"])
      expect(yield* refusal(DurableQueue.makeWorkSql(untyped({ queueName: "q", prefix: "x_" })))).toEqual(["ReliableConfigError", "prefix"])
      expect(yield* refusal(Cluster.makePg({ tablePrefix: "bad-prefix" }))).toEqual(["ReliableConfigError", "tablePrefix"])
      expect(yield* refusal(Cluster.makePg(untyped({ tablePrefx: "x_" })))).toEqual(["ReliableConfigError", "tablePrefx"])
      yield* DurableQueue.makeSql({ queueName: "q", tablePrefix: "good_prefix_" })
    }).pipe(Effect.provide(sqlite)))
})
