/**
 * Relocatable endpoint factories. A factory registered under the same key on every node eligible
 * to host an endpoint lets the cluster re-create that endpoint on a surviving node when its node
 * dies, and create it on a named node (`Cluster.spawn`).
 */
import type { Effect, Scope } from "effect"
import type { ReliableSystem } from "../internal/ReliableSystemTag.js"

/**
 * Creates the endpoint named `name` (a producer, consumer, worker or work-pulling producer made
 * with that name) together with whatever application code drives it, in the given scope. The
 * scope lasts as long as this node hosts the endpoint; it closes when the node shuts down or
 * loses the endpoint to another node.
 */
export type RelocatableFactory<R> = (name: string) => Effect.Effect<unknown, unknown, R | ReliableSystem | Scope.Scope>

export interface Relocatable<R = never> {
  readonly key: string
  readonly make: RelocatableFactory<R>
}

/** A factory under `key`; register the same key on every node that may host its endpoints. */
export const relocatable = <R = never>(key: string, make: RelocatableFactory<R>): Relocatable<R> => ({ key, make })
