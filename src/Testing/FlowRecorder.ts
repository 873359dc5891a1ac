/**
 * A recorder of what a system publishes while a test runs: terminal failures, health events,
 * dead letters, and the confirmations of the producers it is asked to watch. It subscribes at
 * once (nothing published after it is made is missed) and records for the life of the scope,
 * keeping the latest `limit` events of each kind.
 */
import { Effect, Queue } from "effect"
import type { Scope } from "effect"
import type { Producer } from "../internal/ProducerEndpoint.js"
import { ReliableSystem } from "../internal/ReliableSystemTag.js"
import type { DeliveryConfirmed } from "../Protocol/Contract.js"
import type { DeliveryDeadLettered } from "../Protocol/DeadLetter.js"
import type { ReliableDeliveryFailed } from "../Protocol/Failure.js"
import type { ReliableHealthEvent } from "../Protocol/Health.js"

export interface FlowRecorder {
  /** `ReliableDeliveryFailed` events, oldest first. */
  readonly failures: ReadonlyArray<ReliableDeliveryFailed>
  /** `ReliableDegraded` / `ReliableRecovered` events, oldest first. */
  readonly health: ReadonlyArray<ReliableHealthEvent>
  readonly deadLetters: ReadonlyArray<DeliveryDeadLettered>
  /** Confirmations of the watched producers (made with `deliveryConfirmation: true`). */
  readonly confirmations: ReadonlyArray<DeliveryConfirmed>
  /** Records the confirmations of `producer` from now on, for the life of the scope. */
  readonly watch: (producer: Producer<any>) => Effect.Effect<void, never, Scope.Scope>
  /** Events left out because a list was at its limit. */
  readonly dropped: () => number
}

export interface FlowRecorderOptions {
  /** The most events kept of each kind (the oldest go first); default 10,000. */
  readonly limit?: number
}

/** Records the events of the system in context for the life of the scope. */
export const recorder = (options: FlowRecorderOptions = {}): Effect.Effect<FlowRecorder, never, ReliableSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const system = yield* ReliableSystem
    const limit = Math.max(1, options.limit ?? 10_000)
    let dropped = 0
    const keep = <A>(list: Array<A>) => (event: A) => {
      if (list.length >= limit) {
        list.shift()
        dropped++
      }
      list.push(event)
    }
    const record = <A>(subscribe: Effect.Effect<Queue.Dequeue<A>, never, Scope.Scope>, list: Array<A>) =>
      Effect.flatMap(subscribe, (queue) => Effect.forkScoped(Effect.forever(Effect.map(Queue.take(queue), keep(list)))))
    const failures: Array<ReliableDeliveryFailed> = []
    const health: Array<ReliableHealthEvent> = []
    const deadLetters: Array<DeliveryDeadLettered> = []
    const confirmations: Array<DeliveryConfirmed> = []
    yield* record(system.subscribeFailures, failures)
    yield* record(system.subscribeHealth, health)
    yield* record(system.subscribeDeadLetters, deadLetters)
    return {
      failures,
      health,
      deadLetters,
      confirmations,
      watch: (producer) => Effect.asVoid(record(producer.subscribeConfirmations, confirmations)),
      dropped: () => dropped
    }
  })
