/**
 * Typed errors. Configuration mistakes fail at construction; contract misuse answers the caller;
 * deterministic trouble inside a controller becomes the `cause` of a `ReliableDeliveryFailed`.
 */
import { Data } from "effect"
import type { ParseResult } from "effect"

/** An option is out of bounds or contradicts another; raised when an endpoint is made. */
export class ReliableConfigError extends Data.TaggedError("ReliableConfigError")<{
  readonly option: string
  readonly message: string
}> {}

/** Why a producer-side contract call was refused. */
export type ProducerContractReason =
  | "BlankMessageId"
  | "ReservedMessageId"
  | "MissingPayload"
  | "ForeignGrant"
  | "StaleGrant"
  | "TokenAlreadyAnswered"
  | "UnknownStored"

/** A `Produced` or `StoredAck` the controller cannot accept; nothing was stored or emitted. */
export class ProducerContractError extends Data.TaggedError("ProducerContractError")<{
  readonly reason: ProducerContractReason
  readonly message: string
}> {}

/** A payload its Schema could not encode; deterministic, so the flow stops (stage Protocol). */
export class PayloadEncodeError extends Data.TaggedError("PayloadEncodeError")<{
  readonly endpointName: string
  readonly messageId: string
  readonly cause: ParseResult.ParseError | unknown
}> {
  override get message(): string {
    return `payload of message ${this.messageId} at ${this.endpointName} could not be encoded: ${String(this.cause)}`
  }
}

/** Received payload bytes the consumer's Schema could not decode (stage Protocol). */
export class PayloadDecodeError extends Data.TaggedError("PayloadDecodeError")<{
  readonly endpointName: string
  readonly messageId: string
  readonly cause: ParseResult.ParseError | unknown
}> {
  override get message(): string {
    return `payload of message ${this.messageId} at ${this.endpointName} could not be decoded: ${String(this.cause)}`
  }
}

/** The peer broke a protocol rule no retry can fix (stage Protocol). */
export class ProtocolViolation extends Data.TaggedError("ProtocolViolation")<{
  readonly message: string
}> {}

/** `respawn` or a lookup named an endpoint this system does not host. */
export class EndpointNotFound extends Data.TaggedError("EndpointNotFound")<{
  readonly name: string
}> {
  override get message(): string {
    return `no reliable endpoint named "${this.name}" on this system`
  }
}

/** The endpoint's scope closed while a call was waiting on it. */
export class EndpointClosed extends Data.TaggedError("EndpointClosed")<{
  readonly name: string
}> {
  override get message(): string {
    return `reliable endpoint "${this.name}" is closed`
  }
}
