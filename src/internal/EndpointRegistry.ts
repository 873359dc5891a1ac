/**
 * The endpoints one system hosts, by name: what each is, which peer its configuration names, and
 * the address of its live controller. Resolution and registration fencing read it.
 */
import { Effect } from "effect"
import type { Schema, Scope } from "effect"
import type { QueueOperatorService } from "../DurableQueue/DurableProducerQueue.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import { ReliableConfigError } from "../Protocol/Errors.js"
import type { EndpointKind } from "../Protocol/WireMessage.js"
import type { WorkPullingStats } from "../Controller/WorkPullingStats.js"

export type { EndpointKind } from "../Protocol/WireMessage.js"

/** What a lookup answers about an endpoint. */
export interface EndpointRecord {
  readonly name: string
  readonly kind: EndpointKind
  /** The peer endpoint its configuration names (a worker's producer, a consumer's producer...). */
  readonly peer: string | undefined
  /** The live controller; undefined while the controller is stopped. */
  readonly address: ControllerAddress | undefined
}

/** What an endpoint tells about itself beyond its record (for `WorkPulling.stats` and operators). */
export interface EndpointDetails {
  /** A work-pulling producer's view of its pool. */
  readonly workStats?: (() => WorkPullingStats | undefined) | undefined
}

/**
 * What an endpoint shows operators (`ReliableSystem.snapshot`, the operations page), set by the
 * public constructors once the endpoint is made. `stats` is the endpoint's own `stats` (its type
 * follows from the record's kind; the snapshot names it).
 */
export interface EndpointView {
  readonly stats: Effect.Effect<object>
  /** The endpoint's durable queue, when it has one. */
  readonly queue?: QueueOperatorService | undefined
  /** A consumer's or worker's window (the most messages it holds unconfirmed). */
  readonly window?: number | undefined
  /** The payload Schema, to show a queue's entries decoded. */
  readonly payload?: Schema.Schema<any, any, never> | undefined
}

export interface LocalEndpoint {
  record: EndpointRecord
  /** Replaces the controller with a fresh one (new incarnation, new session, new epoch). */
  readonly respawn: Effect.Effect<void>
  readonly details: EndpointDetails
  view: EndpointView | undefined
}

export class EndpointRegistry {
  private readonly endpoints = new Map<string, LocalEndpoint>()

  /** Claims a name for the life of the scope; a taken name is a configuration error. */
  claim(
    record: EndpointRecord,
    respawn: Effect.Effect<void>,
    details: EndpointDetails = {}
  ): Effect.Effect<LocalEndpoint, ReliableConfigError, Scope.Scope> {
    return Effect.acquireRelease(
      Effect.suspend(() => {
        if (this.endpoints.has(record.name)) {
          return Effect.fail(
            new ReliableConfigError({ option: "name", message: `a reliable endpoint named "${record.name}" already exists on this system` })
          )
        }
        const entry: LocalEndpoint = { record, respawn, details, view: undefined }
        this.endpoints.set(record.name, entry)
        return Effect.succeed(entry)
      }),
      (entry) => Effect.sync(() => {
        if (this.endpoints.get(record.name) === entry) this.endpoints.delete(record.name)
      })
    )
  }

  get(name: string): LocalEndpoint | undefined {
    return this.endpoints.get(name)
  }

  setAddress(entry: LocalEndpoint, address: ControllerAddress | undefined): void {
    entry.record = { ...entry.record, address }
  }

  /** Sets what the endpoint `name` shows operators (no-op once it is gone). */
  setView(name: string, view: EndpointView): void {
    const entry = this.endpoints.get(name)
    if (entry !== undefined) entry.view = view
  }

  /** Every endpoint hosted now. */
  entries(): ReadonlyArray<LocalEndpoint> {
    return [...this.endpoints.values()]
  }

  names(): ReadonlyArray<string> {
    return [...this.endpoints.keys()]
  }
}
