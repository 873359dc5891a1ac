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

/**
 * A peer address (`remoteConsumer`, `remoteProducer`) on a system whose transport does not cross
 * processes: the flow could never connect. Use `Transport.layerSocket`.
 */
export class ReliablePeerRemotingRequired extends Data.TaggedError("ReliablePeerRemotingRequired")<{
  readonly option: string
  readonly message: string
}> {}

/**
 * A peer address on a clustered system: a flow follows exactly one resolution authority, either
 * the cluster registry or the configured address, never both.
 */
export class ReliablePeerClusterConflict extends Data.TaggedError("ReliablePeerClusterConflict")<{
  readonly option: string
  readonly message: string
}> {}

/**
 * A cluster-only operation (`Cluster.spawn` placing an endpoint, `Cluster.stop`, ...) on a system
 * that is not a cluster member: there is no registry to go through. Build the system with
 * `ReliableSystem.layerCluster`.
 */
export class ReliableClusterRequired extends Data.TaggedError("ReliableClusterRequired")<{
  readonly operation: string
  readonly message: string
}> {}

/** Everything an endpoint constructor can reject its options with. */
export type ReliableEndpointConfigError = ReliableConfigError | ReliablePeerRemotingRequired | ReliablePeerClusterConflict

/**
 * A message whose frame cannot cross the transport (above its maximum frame size). Nothing was
 * sent or stored; split large payloads with the producer's `chunkSize` option.
 */
export class FrameTooLarge extends Data.TaggedError("FrameTooLarge")<{
  readonly size: number
  readonly maxFrameSize: number
  readonly messageTag: string
  /** The business message refused, when a producer refused it. */
  readonly messageId?: string
}> {
  override get message(): string {
    const what = this.messageId === undefined ? `a ${this.messageTag} frame` : `message ${this.messageId} (a ${this.messageTag} frame)`
    return `${what} of ${this.size} bytes exceeds maxFrameSize ${this.maxFrameSize}; use chunking (chunkSize) for large payloads`
  }
}

/** Why a producer-side contract call was refused. */
export type ProducerContractReason =
  | "BlankMessageId"
  | "InvalidMessageId"
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

/**
 * A message the durable queue refused for its content (on PostgreSQL a data error: SQLSTATE
 * class 22 or 54). Nothing was stored; the flow goes on, and other messages are unaffected.
 */
export class MessageRejected extends Data.TaggedError("MessageRejected")<{
  readonly endpointName: string
  /** The refused message, when the queue's answer tells it apart from the rest of its batch. */
  readonly messageId: string | undefined
  readonly cause: unknown
}> {
  override get message(): string {
    const reason = this.cause instanceof Error ? this.cause.message : String(this.cause)
    const what = this.messageId === undefined ? "a message" : `message ${this.messageId}`
    return `the durable queue of ${this.endpointName} refused ${what}: ${reason}`
  }
}

/**
 * A payload its Schema could not encode: the caller's mistake, like a blank id. It fails that
 * call; nothing is stored and the flow goes on.
 */
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

/** A handler ran longer than the consumer's `handlerTimeout`: it was interrupted, and the attempt failed. */
export class HandlerTimeout extends Data.TaggedError("HandlerTimeout")<{
  readonly endpointName: string
  readonly messageId: string
  readonly attempt: number
  readonly timeoutMs: number
}> {
  override get message(): string {
    return `the handler of ${this.endpointName} ran longer than ${this.timeoutMs}ms on message ${this.messageId} (attempt ${this.attempt})`
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
