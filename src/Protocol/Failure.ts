/**
 * The one event a controller publishes when it stops for a reason no retry can fix.
 */
import { Data } from "effect"

/** Where the failure happened, as in the seeds' failure table. */
export type ReliableDeliveryStage = "Load" | "Store" | "Accept" | "Confirm" | "Protocol"

/** Which controller stopped. */
export type ReliableControllerRole = "Producer" | "Consumer"

/**
 * A controller stopped for a deterministic reason. The endpoint stays usable; the flow stays
 * disabled until an operator fixes the cause and calls `ReliableSystem.respawn(endpointName)`.
 */
export class ReliableDeliveryFailed extends Data.TaggedClass("ReliableDeliveryFailed")<{
  readonly endpointName: string
  readonly role: ReliableControllerRole
  readonly stage: ReliableDeliveryStage
  readonly cause: unknown
}> {
  get message(): string {
    const reason = this.cause instanceof Error ? this.cause.message : String(this.cause)
    return `reliable ${this.role.toLowerCase()} "${this.endpointName}" stopped at stage ${this.stage}: ${reason}`
  }
}
