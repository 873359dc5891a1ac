/**
 * A producer-side controller whose scope has closed (a respawn replaces it, or its endpoint ends)
 * is over: it reports not running and refuses a call on a grant it offered with `StaleGrant` at
 * once, so the endpoint's `send` takes a grant of the new controller. Folded instead, such a
 * call started a store that no fiber ran any more and waited for it forever: a randomized
 * durable run (seed 21023) hung that way when a store completed while its controller's scope
 * was closing and re-offered a grant the sender then took.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either, Exit, Layer, Schema, Scope } from "effect"
import * as Consumer from "../src/Consumer.js"
import * as ProducerController from "../src/Controller/ProducerController.js"
import * as WorkPullingController from "../src/Controller/WorkPullingController.js"
import * as MemoryProducerQueue from "../src/DurableQueue/MemoryProducerQueue.js"
import * as MemoryWorkQueue from "../src/DurableQueue/MemoryWorkQueue.js"
import { isEitherOf } from "../src/internal/IsEither.js"
import * as Metrics from "../src/Observability/Metrics.js"
import type { ControllerAddress } from "../src/Protocol/Address.js"
import type { RequestNext } from "../src/Protocol/Contract.js"
import * as PayloadCodec from "../src/Protocol/PayloadCodec.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as WorkPulling from "../src/WorkPulling.js"
import { advanceUntil } from "./support/Harness.js"

const Order = Schema.Struct({ id: Schema.Number })
const codec = PayloadCodec.make(Order)
const queueRetry = { attempts: 3, interval: Duration.millis(100) }

/** Hooks that keep every grant a controller offers. */
const keepGrants = (offered: Array<RequestNext>) => ({
  offerGrant: (grant: RequestNext) => void offered.push(grant),
  notify: () => {},
  stopped: () => {},
  health: { degraded: () => {}, healthy: () => {} },
  metrics: Metrics.off
})

/** Publishes a controller made by hand under an endpoint name, so real peers find it. */
const publish = (name: string, kind: "Producer" | "WorkProducer", peer: string | undefined, address: ControllerAddress) =>
  Effect.flatMap(ReliableSystem.ReliableSystem, (system) => Effect.orDie(system.internal.registry.claim({ name, kind, peer, address }, Effect.void)))

/**
 * Once the controller has offered a grant to its peer, closes its scope, then calls it on that
 * grant: it must report not running and answer `StaleGrant` at once.
 */
const closeThenCall = (
  controller: Pick<ProducerController.ProducerController<typeof Order.Type>, "running" | "submit">,
  scope: Scope.CloseableScope,
  offered: ReadonlyArray<RequestNext>
) =>
  Effect.gen(function*() {
    yield* advanceUntil(() => offered.length > 0, 50, 5_000)
    const grant = offered[offered.length - 1]
    expect(controller.running()).toBe(true)
    yield* Scope.close(scope, Exit.void)
    expect(controller.running()).toBe(false)
    const answer = controller.submit(grant, [{ messageId: "m1", payload: new TextEncoder().encode(`{"id":1}`) }])
    expect(isEitherOf(answer)).toBe(true)
    const settled = answer as Either.Either<unknown, { readonly _tag: string; readonly reason?: string }>
    expect(Either.isLeft(settled) && settled.left).toMatchObject({ _tag: "ProducerContractError", reason: "StaleGrant" })
  })

describe("a producer-side controller whose scope has closed", () => {
  it.scoped("point-to-point, durable: not running, and a call on its grant is StaleGrant at once", () =>
    Effect.gen(function*() {
      const system = (yield* ReliableSystem.ReliableSystem).internal
      const offered: Array<RequestNext> = []
      const scope = yield* Scope.make()
      const controller = yield* ProducerController.make({
        endpoint: "p",
        consumer: "c",
        deliveryConfirmation: false,
        retryInterval: Duration.millis(100),
        chunkSize: undefined,
        durableQueue: yield* MemoryProducerQueue.makeMemory,
        queueRetry,
        drainTimeout: Duration.seconds(1)
      }, codec, system, keepGrants(offered)).pipe(Scope.extend(scope))
      yield* publish("p", "Producer", "c", controller.address)
      yield* Consumer.make({ name: "c", producer: "p", payload: Order, resendInterval: "100 millis" })
      yield* closeThenCall(controller, scope, offered)
    }).pipe(Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory)))))

  it.scoped("work-pulling, durable: not running, and a call on its grant is StaleGrant at once", () =>
    Effect.gen(function*() {
      const system = (yield* ReliableSystem.ReliableSystem).internal
      const offered: Array<RequestNext> = []
      const scope = yield* Scope.make()
      const controller = yield* WorkPullingController.make({
        endpoint: "jobs",
        deliveryConfirmation: false,
        retryInterval: Duration.millis(100),
        durableQueue: yield* MemoryWorkQueue.makeWorkMemory,
        queueRetry,
        drainTimeout: Duration.seconds(1)
      }, codec, system, keepGrants(offered)).pipe(Scope.extend(scope))
      yield* publish("jobs", "WorkProducer", undefined, controller.address)
      yield* WorkPulling.worker({ name: "w1", producer: "jobs", payload: Order, resendInterval: "100 millis" })
      yield* closeThenCall(controller, scope, offered)
    }).pipe(Effect.provide(ReliableSystem.layer().pipe(Layer.provideMerge(MemoryTransport.layerMemory)))))
})
