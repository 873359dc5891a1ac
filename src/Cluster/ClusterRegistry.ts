/**
 * The cluster registry contract: the shared, linearizable record of which nodes are members and
 * which node hosts each named endpoint. Cluster mode coordinates through it and nothing else (no
 * consensus of our own): every ownership change is one conditional write, so concurrent writers
 * are settled by the store and exactly one wins.
 *
 * Rules every implementation keeps:
 * - A node is a live member while its lease has not expired, judged by the registry's own clock
 *   (so node clocks never need to agree). `join` starts a lease for a node incarnation and
 *   replaces any earlier incarnation of the same node; `renew` extends a live lease only (an
 *   expired or replaced lease stays lost: the node must `join` again with a fresh incarnation).
 * - An endpoint record is *live* when its `(node, nodeIncarnation)` is a live member. A name has
 *   at most one record; a claim succeeds on a free name or over a record that is not live, and is
 *   refused (`Taken`) while a live record holds the name.
 * - Every ownership change bumps the record's `generation`; the conditional operations (`adopt`,
 *   `reclaim`, `abandon`, `release`, `takeOver`) name the generation they expect and do nothing
 *   otherwise.
 * - A record with a `factory` is relocatable: when it is not live, `takeOver` moves it to another
 *   node, unstarted (`kind` undefined) until that node's factory `adopt`s it. Of concurrent
 *   `takeOver`s of one record, exactly one succeeds.
 */
import { Context } from "effect"
import type { Effect, Option } from "effect"
import type { EndpointKind } from "../Protocol/WireMessage.js"
import type { ClusterRegistryError } from "./ClusterErrors.js"

/** A live member of the cluster. */
export interface ClusterNode {
  /** The node's transport address (`host:port`). */
  readonly node: string
  /** Fresh per join: a node that lost its lease comes back as a new incarnation. */
  readonly incarnation: string
  /** The relocatable factory keys this node can host. */
  readonly factories: ReadonlyArray<string>
  /** When the lease ends unless renewed, in milliseconds on the registry's clock. */
  readonly leaseExpiresAt: number
}

/** Where an endpoint lives, as the registry records it. */
export interface ClusterRecord {
  readonly name: string
  /** Undefined while the record is placed on a node that has not started the endpoint yet. */
  readonly kind: EndpointKind | undefined
  /** The peer endpoint its configuration names. */
  readonly peer: string | undefined
  /** The relocatable factory key; undefined for endpoints pinned to their node. */
  readonly factory: string | undefined
  readonly node: string
  /** Empty once the record was abandoned: no incarnation is empty, so it is an orphan. */
  readonly nodeIncarnation: string
  /** Bumped by every ownership change: the fencing token of conditional writes. */
  readonly generation: number
}

/** A record as listed for operators and tests, with whether its node is a live member. */
export interface ClusterRecordStatus extends ClusterRecord {
  readonly live: boolean
}

/** What a claim asks for. */
export interface ClaimRequest {
  readonly name: string
  readonly kind: EndpointKind
  readonly peer: string | undefined
  readonly factory: string | undefined
  readonly node: string
  readonly nodeIncarnation: string
}

export type ClaimResult =
  | { readonly _tag: "Claimed"; readonly generation: number }
  | { readonly _tag: "Taken"; readonly owner: string }

export type PlaceResult =
  | { readonly _tag: "Placed"; readonly generation: number }
  | { readonly _tag: "Taken"; readonly owner: string }
  | { readonly _tag: "NodeUnavailable" }
  | { readonly _tag: "UnknownFactory" }

export interface ClusterRegistryService {
  /** Starts a lease of `leaseMs` for this node incarnation, replacing any earlier incarnation of the node. */
  readonly join: (member: {
    readonly node: string
    readonly incarnation: string
    readonly factories: ReadonlyArray<string>
  }, leaseMs: number) => Effect.Effect<void, ClusterRegistryError>
  /** Extends a live lease by `leaseMs` from now; false when it had expired or was replaced. */
  readonly renew: (node: string, incarnation: string, leaseMs: number) => Effect.Effect<boolean, ClusterRegistryError>
  /** Ends the lease at once (a graceful leave); the node's relocatable endpoints become orphans. */
  readonly leave: (node: string, incarnation: string) => Effect.Effect<void, ClusterRegistryError>
  /** The live members. */
  readonly members: Effect.Effect<ReadonlyArray<ClusterNode>, ClusterRegistryError>
  /** Claims a name for a started endpoint: a free name, or one whose record is not live. */
  readonly claim: (request: ClaimRequest) => Effect.Effect<ClaimResult, ClusterRegistryError>
  /**
   * Starts a record placed on this node incarnation (a relocation or a placement): records the
   * endpoint's kind and peer. False when the record moved on since.
   */
  readonly adopt: (request: ClaimRequest & { readonly generation: number }) => Effect.Effect<boolean, ClusterRegistryError>
  /**
   * Moves a record of an earlier incarnation of `node` to `incarnation` (a node that lost its
   * lease and joined again keeps what nobody took over); the new generation, or none.
   */
  readonly reclaim: (
    name: string,
    generation: number,
    node: string,
    incarnation: string
  ) => Effect.Effect<Option.Option<number>, ClusterRegistryError>
  /**
   * Gives a relocatable record still at `generation` up: it names no node incarnation any more,
   * so it is an orphan at once and a survivor takes it over (its node stopped the endpoint for a
   * reason a move cures); the new generation, or none.
   */
  readonly abandon: (name: string, generation: number) => Effect.Effect<Option.Option<number>, ClusterRegistryError>
  /** Deletes the record if it is still at `generation` (the endpoint was closed on purpose). */
  readonly release: (name: string, generation: number) => Effect.Effect<void, ClusterRegistryError>
  /** The record of `name` if it is live and started. */
  readonly resolve: (name: string) => Effect.Effect<Option.Option<ClusterRecord>, ClusterRegistryError>
  /** The record of `name` whatever its state. */
  readonly get: (name: string) => Effect.Effect<Option.Option<ClusterRecordStatus>, ClusterRegistryError>
  /** Relocatable records, with a factory among `factories`, that are not live. */
  readonly orphans: (factories: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<ClusterRecord>, ClusterRegistryError>
  /**
   * Moves an orphan still at `generation` to this node incarnation, unstarted; the new
   * generation, or none (a live node holds it, or another caller won).
   */
  readonly takeOver: (
    name: string,
    generation: number,
    node: string,
    incarnation: string
  ) => Effect.Effect<Option.Option<number>, ClusterRegistryError>
  /** Places a relocatable endpoint, unstarted, on a live node that has the factory. */
  readonly place: (name: string, factory: string, node: string) => Effect.Effect<PlaceResult, ClusterRegistryError>
  /** Every record naming this node incarnation, started or not. */
  readonly owned: (node: string, incarnation: string) => Effect.Effect<ReadonlyArray<ClusterRecord>, ClusterRegistryError>
  /** Every record, live or not. */
  readonly endpoints: Effect.Effect<ReadonlyArray<ClusterRecordStatus>, ClusterRegistryError>
}

export class ClusterRegistry extends Context.Tag("effect-reliable/ClusterRegistry")<
  ClusterRegistry,
  ClusterRegistryService
>() {}
