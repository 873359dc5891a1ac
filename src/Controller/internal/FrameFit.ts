/**
 * Whether a sequenced message can cross a transport with a frame limit. The bound is computed
 * from what the producer knows when a message is produced (its own address, session, the
 * consumer's name, the message id and payload size) plus a fixed allowance for the consumer's
 * node and incarnation, so a message that passes always fits its frame: a transport never has
 * to refuse, and the flow never wedges on, a frame the producer accepted.
 */
import type { ControllerAddress } from "../../Protocol/Address.js"
import { chunkMessageId } from "../../Protocol/ChunkId.js"
import { FrameTooLarge } from "../../Protocol/Errors.js"
import { MaxTraceContext } from "../../Protocol/WireMessage.js"

/** Room for the consumer's node name (`host:port`, JSON-escaped) and its incarnation id. */
const PeerAllowance = 2048
/** Segment lengths and the payload flag of one frame body (see the socket frame layout). */
const SegmentHeaders = 13

export interface FrameFit {
  /** Refuses a business message before it is stored: the largest frame it would need is too big. */
  readonly produced: (messageId: string, payloadBytes: number) => FrameTooLarge | undefined
  /** Refuses a wire message about to be sent (a net for messages stored by an earlier controller). */
  readonly sequenced: (messageId: string, payloadBytes: number) => FrameTooLarge | undefined
}

const jsonBytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value), "utf8")

export const make = (options: {
  readonly maxFrameSize: number
  readonly from: ControllerAddress
  readonly consumer: string
  readonly sessionId: string
  readonly chunkSize: number | undefined
}): FrameFit => {
  const from = jsonBytes({ node: options.from.node, endpoint: options.from.endpoint, incarnation: options.from.incarnation })
  const to = jsonBytes({ node: "", endpoint: options.consumer, incarnation: "" }) + PeerAllowance
  const message = jsonBytes({
    _tag: "SequencedMessage",
    sessionId: options.sessionId,
    messageId: "",
    seq: Number.MAX_SAFE_INTEGER,
    chunk: { first: false, last: false },
    // Room for the trace context a sampled sender's message carries.
    trace: "0".repeat(MaxTraceContext)
  }) - 2
  const fixed = SegmentHeaders + from + to + message
  const limit = options.maxFrameSize

  const check = (messageId: string, payloadBytes: number): FrameTooLarge | undefined => {
    // A JSON-escaped UTF-16 unit takes at most 6 bytes: the cheap bound settles almost every call.
    if (fixed + 6 * messageId.length + 2 + payloadBytes <= limit) return undefined
    const size = fixed + jsonBytes(messageId) + payloadBytes
    return size <= limit
      ? undefined
      : new FrameTooLarge({ size, maxFrameSize: limit, messageTag: "SequencedMessage", messageId })
  }

  return {
    produced: (messageId, payloadBytes) => {
      const chunkSize = options.chunkSize
      if (chunkSize === undefined || payloadBytes <= chunkSize) return check(messageId, payloadBytes)
      const count = Math.ceil(payloadBytes / chunkSize)
      const refused = check(chunkMessageId(messageId, count - 1, count), chunkSize)
      return refused === undefined
        ? undefined
        : new FrameTooLarge({ size: refused.size, maxFrameSize: limit, messageTag: "SequencedMessage", messageId })
    },
    sequenced: check
  }
}
