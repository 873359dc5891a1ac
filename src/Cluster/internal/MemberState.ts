/**
 * What one cluster member knows about itself: its node incarnation, the names it holds in the
 * registry (with the generation it holds them at), and the relocatable endpoints it hosts.
 * Plain mutable data shared by the member's modules; the JS thread serializes every change.
 */
import type { Effect, Scope } from "effect"
import type { ReliableOwnershipLost } from "../ClusterErrors.js"
import type { ClaimRequest, ClusterRegistryService } from "../ClusterRegistry.js"

/** A relocatable factory as the member runs it, with the system and the user's services provided. */
export type HostedFactory = (name: string) => Effect.Effect<unknown, unknown, any>

/** A name this node holds in the registry for one of its endpoints. */
export interface HeldName {
  readonly request: ClaimRequest
  /** The registry generation this node holds the record at. */
  generation: number
  /** The node incarnation the record names (behind `MemberState.incarnation` until reclaimed). */
  incarnation: string
  /** Another node took the record over: the endpoint must not act any more. */
  lost: boolean
  /** Stops the endpoint's controller with a terminal event. */
  readonly fence: (cause: ReliableOwnershipLost) => void
}

export interface MemberState {
  readonly node: string
  /** Fresh per join: a member that lost its lease joins again as a new incarnation. */
  incarnation: string
  readonly registry: ClusterRegistryService
  readonly leaseMs: number
  readonly renewMs: number
  readonly factories: ReadonlyMap<string, HostedFactory>
  readonly held: Map<string, HeldName>
  /** Scopes of the relocatable endpoints this node runs through their factories, by name. */
  readonly hosted: Map<string, Scope.CloseableScope>
  /** Set while the node shuts down: relocatable names stay in the registry for others to take over. */
  leaving: boolean
  /**
   * Until when (monotonic clock ms) the node's lease surely lasts: the send time of the latest
   * renewal (or join) that succeeded, plus the lease. The registry started that lease no earlier.
   */
  leaseUntil: number
  /**
   * The lease ran out unrenewed and the node gave its relocatable endpoints up: the next lease
   * tick joins again as a new incarnation instead of renewing.
   */
  surrendered: boolean
}
