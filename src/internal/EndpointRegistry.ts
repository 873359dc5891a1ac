/**
 * The endpoints one system hosts, by name: what each is, which peer its configuration names, and
 * the address of its live controller. Resolution and registration fencing read it.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
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

export interface LocalEndpoint {
  record: EndpointRecord
  /** Replaces the controller with a fresh one (new incarnation, new session, new epoch). */
  readonly respawn: Effect.Effect<void>
  readonly details: EndpointDetails
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
        const entry: LocalEndpoint = { record, respawn, details }
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

  names(): ReadonlyArray<string> {
    return [...this.endpoints.keys()]
  }
}
