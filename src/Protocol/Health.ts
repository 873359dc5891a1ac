/**
 * The two events an endpoint publishes about its durable queue's health: once when it becomes
 * degraded (its queue stopped answering and the flow waits while the calls are retried), once
 * when it recovers. A degraded flow is not failed: nobody needs to act, it heals by itself.
 */
import { Data } from "effect"
import type { ReliableControllerRole, ReliableDeliveryStage } from "./Failure.js"

/** The endpoint's durable queue stopped answering; its calls are being retried. */
export class ReliableDegraded extends Data.TaggedClass("ReliableDegraded")<{
  readonly endpointName: string
  readonly role: ReliableControllerRole
  /** The durable operation that could not complete. */
  readonly stage: ReliableDeliveryStage
  readonly cause: unknown
}> {
  get message(): string {
    const reason = this.cause instanceof Error ? this.cause.message : String(this.cause)
    return `reliable ${this.role.toLowerCase()} "${this.endpointName}" is degraded at stage ${this.stage} (retrying): ${reason}`
  }
}

/** The endpoint's durable queue answers again; the flow goes on. */
export class ReliableRecovered extends Data.TaggedClass("ReliableRecovered")<{
  readonly endpointName: string
  readonly role: ReliableControllerRole
  /** How long it was degraded. */
  readonly degradedForMs: number
}> {
  get message(): string {
    return `reliable ${this.role.toLowerCase()} "${this.endpointName}" recovered after ${this.degradedForMs}ms`
  }
}

export type ReliableHealthEvent = ReliableDegraded | ReliableRecovered
