/**
 * The consumer endpoint of a point-to-point flow. `run(handler)` processes deliveries one at a
 * time and confirms each after the handler succeeds; `deliveries` hands them out as a Stream
 * for full control, each with its own `confirm`.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as ConsumerEndpoint from "./internal/ConsumerEndpoint.js"
import type { Consumer, ConsumerOptions } from "./internal/ConsumerEndpoint.js"
import * as Config from "./Protocol/Config.js"
import type { ReliableEndpointConfigError } from "./Protocol/Errors.js"
import { ReliableSystem } from "./ReliableSystem.js"

export type { Consumer, ConsumerOptions, FailureDecision, HandlerFailure, RunOptions } from "./internal/ConsumerEndpoint.js"
export type { ConsumerStats } from "./Controller/ConsumerController.js"

const consumerKeys = Config.optionKeys<ConsumerOptions<unknown, unknown>>({
  name: true,
  producer: true,
  payload: true,
  window: true,
  resendInterval: true,
  lendPayloads: true,
  remoteProducer: true,
  drainTimeout: true,
  retry: true,
  maxAttempts: true,
  handlerTimeout: true
})

/** A point-to-point consumer endpoint. */
export const make = <A, I>(
  options: ConsumerOptions<A, I>
): Effect.Effect<Consumer<A>, ReliableEndpointConfigError, ReliableSystem | Scope.Scope> =>
  Effect.zipRight(
    Config.checkKeys("Consumer.make", options, consumerKeys),
    Effect.tap(ConsumerEndpoint.make(options, "Consumer", ["Producer"]), (consumer) =>
      // What operators see of it (`ReliableSystem.snapshot`).
      Effect.map(ReliableSystem, (system) => system.internal.registry.setView(options.name, {
        stats: consumer.stats,
        payload: options.payload,
        window: options.window ?? Config.DefaultWindow
      })))
  )
