/**
 * Errors of cluster mode: registry backend trouble, placement refusals, and the cause of the
 * terminal event an endpoint publishes when its node lost it to another node.
 */
import { Data } from "effect"

/** The registry's backend failed (connection lost, timeout). Retried on the next lease tick. */
export class ClusterRegistryError extends Data.TaggedError("ClusterRegistryError")<{
  readonly operation: string
  readonly cause: unknown
}> {
  override get message(): string {
    const reason = this.cause instanceof Error ? this.cause.message : String(this.cause)
    return `cluster registry ${this.operation} failed: ${reason}`
  }
}

/** Why a placement (`Cluster.spawn`) was refused. */
export type PlacementRefusal =
  /** The target node is not a live member of the cluster. */
  | "NodeUnavailable"
  /** The target node registered no relocatable factory under the key. */
  | "UnknownFactory"
  /** A live node already hosts an endpoint of that name. */
  | "NameTaken"
  /** The target node did not start the endpoint in time. */
  | "Timeout"
  /** `Cluster.stop` named an endpoint pinned to its node (not made by a relocatable factory). */
  | "NotRelocatable"

/** A placement (or `Cluster.stop`) the cluster refused; nothing was started or stopped. */
export class ClusterPlacementError extends Data.TaggedError("ClusterPlacementError")<{
  readonly reason: PlacementRefusal
  readonly name: string
  readonly message: string
}> {}

/**
 * The cause of a terminal `ReliableDeliveryFailed` (stage `Protocol`) on a node that lost its
 * lease (paused, partitioned from the registry) while another node took the endpoint over: the
 * stale controller stops so only the endpoint's new home acts on it.
 */
export class ReliableOwnershipLost extends Data.TaggedError("ReliableOwnershipLost")<{
  readonly endpointName: string
  /** The node that holds the endpoint now, when the registry names one. */
  readonly owner: string | undefined
}> {
  override get message(): string {
    return `endpoint "${this.endpointName}" is no longer owned by this node` +
      (this.owner === undefined ? "" : ` (now on ${this.owner})`)
  }
}
