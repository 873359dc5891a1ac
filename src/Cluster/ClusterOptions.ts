/**
 * The options that make a reliable system a cluster member (`ReliableSystem.layerCluster`).
 */
import type { Duration } from "effect"
import type { Relocatable } from "./Relocatable.js"

export interface ClusterOptions<R = never> {
  /** How long a node stays a member without renewing; default 3 seconds (`DefaultLease`). */
  readonly lease?: Duration.DurationInput
  /** Lease renewal, orphan and placement checks; default a third of the lease. */
  readonly renewInterval?: Duration.DurationInput
  /** The relocatable factories this node can host endpoints with. */
  readonly relocatable?: ReadonlyArray<Relocatable<R>>
}
