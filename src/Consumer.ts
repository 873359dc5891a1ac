/**
 * The consumer endpoint of a point-to-point flow. `run(handler)` processes deliveries one at a
 * time and confirms each after the handler succeeds; `deliveries` hands them out as a Stream
 * for full control, each with its own `confirm`.
 */
import type { Effect, Scope } from "effect"
import * as ConsumerEndpoint from "./internal/ConsumerEndpoint.js"
import type { Consumer, ConsumerOptions } from "./internal/ConsumerEndpoint.js"
import type { ReliableEndpointConfigError } from "./Protocol/Errors.js"
import type { ReliableSystem } from "./ReliableSystem.js"

export type { Consumer, ConsumerOptions } from "./internal/ConsumerEndpoint.js"
export type { ConsumerStats } from "./Controller/ConsumerController.js"

/** A point-to-point consumer endpoint. */
export const make = <A, I>(
  options: ConsumerOptions<A, I>
): Effect.Effect<Consumer<A>, ReliableEndpointConfigError, ReliableSystem | Scope.Scope> =>
  ConsumerEndpoint.make(options, "Consumer", ["Producer"])
