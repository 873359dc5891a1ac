/**
 * The parts of a reliable system the endpoint modules of this library use: its transport, its
 * endpoint names, peer lookup, cluster membership and failure events. Not part of the public
 * contract; it lives here so the controllers and endpoint internals reach it without importing
 * the public `ReliableSystem` module.
 */
import type { Effect } from "effect"
import type { ClusterMember } from "../Cluster/internal/ClusterMember.js"
import type { ReliableDeliveryFailed } from "../Protocol/Failure.js"
import type { ReliableHealthEvent } from "../Protocol/Health.js"
import type { DeliveryDeadLettered } from "../Protocol/DeadLetter.js"
import type { TransportService } from "../Transport/Transport.js"
import type { EndpointRecord, EndpointRegistry } from "./EndpointRegistry.js"
import type { LookupStats } from "./NodeLookup.js"

export interface SystemInternals {
  readonly transport: TransportService
  readonly registry: EndpointRegistry
  /**
   * Finds an endpoint's record: in this system's registry, or, when `node` names another node,
   * by asking that node (a remoting-only flow). Undefined when unknown or unanswered in time.
   */
  readonly lookup: (name: string, node?: string | undefined) => Effect.Effect<EndpointRecord | undefined>
  /** Counters of lookups asked of and served to other nodes. */
  readonly lookupStats: () => LookupStats
  /** True when peers are resolved through a cluster registry (peer addresses are rejected then). */
  readonly clustered: boolean
  /** The node's cluster membership; undefined on a system that is not clustered. */
  readonly cluster: ClusterMember | undefined
  readonly publishFailure: (failure: ReliableDeliveryFailed) => void
  readonly publishHealth: (event: ReliableHealthEvent) => void
  readonly publishDeadLetter: (event: DeliveryDeadLettered) => void
  /** A fresh id for incarnations and sessions, unique across processes. */
  readonly newId: () => string
}
