/**
 * The messages controllers and nodes exchange. Each is a Schema: values built by
 * this library are trusted, values from a socket are decoded and anything malformed is dropped.
 */
import { Schema } from "effect"
import { ControllerAddress } from "./Address.js"

const Seq = Schema.Int.pipe(Schema.nonNegative())
const Id = Schema.NonEmptyString
/** The longest trace context a message carries (a W3C `traceparent` is 55 characters). */
export const MaxTraceContext = 256
const TraceContext = Schema.String.pipe(Schema.maxLength(MaxTraceContext))

/** Consumer controller -> producer controller: please bind me; fresh nonce per attempt. */
export const RegisterConsumer = Schema.TaggedStruct("RegisterConsumer", { nonce: Id })
export type RegisterConsumer = typeof RegisterConsumer.Type

/** Producer controller -> consumer controller: you are bound to this session from `nextSeq`. */
export const RegistrationAck = Schema.TaggedStruct("RegistrationAck", {
  sessionId: Id,
  nextSeq: Schema.Int.pipe(Schema.positive()),
  nonce: Id
})
export type RegistrationAck = typeof RegistrationAck.Type

/** Consumer -> producer: everything up to `confirmedSeq` is done; you may send up to `requestUpToSeq`. */
export const Request = Schema.TaggedStruct("Request", {
  sessionId: Id,
  nonce: Id,
  confirmedSeq: Seq,
  requestUpToSeq: Seq,
  viaTimeout: Schema.Boolean
})
export type Request = typeof Request.Type

/** Consumer -> producer: everything up to `confirmedSeq` is done (no new demand). */
export const Ack = Schema.TaggedStruct("Ack", { sessionId: Id, nonce: Id, confirmedSeq: Seq })
export type Ack = typeof Ack.Type

/** One chunk position of a large message; absent on whole messages. */
export const ChunkMark = Schema.Struct({ first: Schema.Boolean, last: Schema.Boolean })
export type ChunkMark = typeof ChunkMark.Type

/** Producer -> consumer: one sequenced message (or one chunk of one). */
export const SequencedMessage = Schema.TaggedStruct("SequencedMessage", {
  sessionId: Id,
  messageId: Id,
  seq: Schema.Int.pipe(Schema.positive()),
  payload: Schema.Uint8ArrayFromSelf,
  chunk: Schema.optional(ChunkMark),
  /** Work-pulling: which attempt at the job this is; absent for the first. */
  attempt: Schema.optional(Schema.Int.pipe(Schema.greaterThan(1))),
  /** The sender's W3C trace context (`traceparent`), only when its span was sampled. */
  trace: Schema.optional(TraceContext)
})
export type SequencedMessage = typeof SequencedMessage.Type

/** An error's text as it travels: bounded, so a settle stays a small control message. */
export const MaxErrorText = 2048
const ErrorText = Schema.String.pipe(Schema.maxLength(MaxErrorText))
const Attempts = Schema.Int.pipe(Schema.nonNegative())

/**
 * How a consumer settles a delivery it does not confirm as processed. Work-pulling: the handler
 * failed (the producer puts the job back in its pool after `retryAfterMs`), or the worker hands
 * back a job it has not started (it is stuck behind a slow handler). Both patterns: the message
 * is dead-lettered (its attempts are exhausted, or its payload cannot be decoded).
 */
export const SettleOutcome = Schema.Union(
  Schema.TaggedStruct("Failed", { attempt: Schema.Int.pipe(Schema.positive()), error: ErrorText, retryAfterMs: Attempts }),
  Schema.TaggedStruct("DeadLettered", { attempts: Attempts, error: ErrorText }),
  Schema.TaggedStruct("Released", {})
)
export type SettleOutcome = typeof SettleOutcome.Type

/**
 * Consumer -> producer: the message ending at `seq` is settled this way. The consumer confirms
 * past it only once the producer answered `Settled`, so the outcome is never lost; it repeats
 * the settle on its tick until then, and the producer answers a repeat again.
 */
export const Settle = Schema.TaggedStruct("Settle", { sessionId: Id, nonce: Id, seq: Schema.Int.pipe(Schema.positive()), outcome: SettleOutcome })
export type Settle = typeof Settle.Type

/** Producer -> consumer: the settle of `seq` is taken care of (recorded, when durable). */
export const Settled = Schema.TaggedStruct("Settled", { sessionId: Id, seq: Schema.Int.pipe(Schema.positive()) })
export type Settled = typeof Settled.Type

export const ConsumerToProducer = Schema.Union(RegisterConsumer, Request, Ack, Settle)
export type ConsumerToProducer = typeof ConsumerToProducer.Type

export const ProducerToConsumer = Schema.Union(RegistrationAck, SequencedMessage, Settled)
export type ProducerToConsumer = typeof ProducerToConsumer.Type

/** What kind of endpoint a record describes. */
export const EndpointKind = Schema.Literal("Producer", "Consumer", "WorkProducer", "Worker")
export type EndpointKind = typeof EndpointKind.Type

/** A node's answer about one of its endpoints: what it is, whom it names, its live controller. */
export const LookupRecord = Schema.Struct({
  kind: EndpointKind,
  peer: Schema.optional(Schema.String),
  address: Schema.optional(ControllerAddress)
})
export type LookupRecord = typeof LookupRecord.Type

/** A lookup's id: generated by the asking node, short; a longer one is malformed. */
const RequestId = Id.pipe(Schema.maxLength(256))

/** Node -> node (between system addresses): which controller serves endpoint `name` right now? */
export const Lookup = Schema.TaggedStruct("Lookup", { requestId: RequestId, name: Schema.String })
export type Lookup = typeof Lookup.Type

/** The answer to a `Lookup`; no record when the node hosts no endpoint of that name. */
export const LookupReply = Schema.TaggedStruct("LookupReply", {
  requestId: RequestId,
  record: Schema.optional(LookupRecord)
})
export type LookupReply = typeof LookupReply.Type

export const SystemMessage = Schema.Union(Lookup, LookupReply)
export type SystemMessage = typeof SystemMessage.Type

export const WireMessage = Schema.Union(RegisterConsumer, RegistrationAck, Request, Ack, SequencedMessage, Settle, Settled, Lookup, LookupReply)
export type WireMessage = typeof WireMessage.Type

/** A wire message in flight between two controllers. */
export const Envelope = Schema.Struct({
  from: ControllerAddress,
  to: ControllerAddress,
  message: WireMessage
})
export type Envelope = typeof Envelope.Type

/** Decodes untrusted input into an envelope; `undefined` means malformed (drop and count it). */
export const decodeEnvelope = (input: unknown): Envelope | undefined => {
  const result = decodeEnvelopeEither(input)
  return result._tag === "Right" ? result.right : undefined
}
const decodeEnvelopeEither = Schema.decodeUnknownEither(Envelope)
