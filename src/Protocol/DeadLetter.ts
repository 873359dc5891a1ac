/**
 * The event a consumer or worker publishes when it gives up on a message: its handler's attempts
 * are exhausted (or the application decided so), or its payload cannot be decoded. The message is
 * then confirmed past so the flow moves on; with a durable queue it is also kept there, with its
 * payload, attempts and last error, for an operator to list, requeue or discard.
 */
import { Data } from "effect"

export class DeliveryDeadLettered extends Data.TaggedClass("DeliveryDeadLettered")<{
  /** The consumer or worker endpoint that dead-lettered it. */
  readonly endpointName: string
  readonly messageId: string
  /** Handler attempts made (0 when the payload could not be decoded). */
  readonly attempts: number
  /** The last failure (a `Cause` of the handler, a `HandlerTimeout`, or a `PayloadDecodeError`). */
  readonly cause: unknown
}> {
  get message(): string {
    return `reliable endpoint "${this.endpointName}" dead-lettered message ${this.messageId} after ${this.attempts} attempt(s)`
  }
}
