/**
 * The byte layout of the TCP transport, and an incremental frame reader.
 *
 *   connection := preamble frame*
 *   preamble   := the 8 ASCII bytes "effrel/1" (anything else closes the connection)
 *   frame      := u32be bodyLength, body                      (bodyLength <= maxFrameSize)
 *   body       := u32be n, from    (n bytes: JSON of a ControllerAddress)
 *                 u32be n, to      (n bytes: JSON of a ControllerAddress)
 *                 u32be n, message (n bytes: JSON of the wire message without its payload)
 *                 payload          (the rest of the body; only a SequencedMessage carries bytes)
 *
 * Payload bytes ride raw, never base64'd. The two addresses are separate segments because every
 * envelope of a flow repeats them: the sender caches their bytes per address object and the
 * reader caches their decoded value per connection, so the per-frame Schema work is the small
 * message header alone.
 */
import { Either, Schema, Struct } from "effect"
import { ControllerAddress } from "../../Protocol/Address.js"
import { Ack, RegisterConsumer, RegistrationAck, Request, SequencedMessage } from "../../Protocol/WireMessage.js"
import type { Envelope, WireMessage } from "../../Protocol/WireMessage.js"

/** The largest frame body either side accepts: 16 MiB. */
export const MaxFrameSize = 16 * 1024 * 1024

/** Bytes before each frame body. */
export const LengthPrefixBytes = 4

/** Sent once by the dialing side; lets a server drop a stranger's bytes at once. */
export const Preamble: Buffer = Buffer.from("effrel/1", "ascii")

/** A SequencedMessage without its payload: what rides in the message segment. */
export const SequencedHeader = Schema.Struct(Struct.omit(SequencedMessage.fields, "payload"))

/** The Schema of the message segment. */
export const MessageHeader = Schema.Union(RegisterConsumer, RegistrationAck, Request, Ack, SequencedHeader)
export type MessageHeader = typeof MessageHeader.Type

const decodeMessageHeader = Schema.decodeUnknownEither(MessageHeader)
const decodeAddress = Schema.decodeUnknownEither(ControllerAddress)

/** An envelope ready to be copied into a write batch; `size` includes the length prefix. */
export interface EncodedFrame {
  readonly from: Buffer
  readonly to: Buffer
  readonly message: Buffer
  readonly payload: Uint8Array | undefined
  readonly size: number
}

// Keyed by object identity: a controller reuses its address objects, so this is a hit on the
// hot path; entries vanish with their addresses.
const addressBytes = new WeakMap<ControllerAddress, Buffer>()

const encodeAddress = (address: ControllerAddress): Buffer => {
  let bytes = addressBytes.get(address)
  if (bytes === undefined) {
    bytes = Buffer.from(JSON.stringify({ node: address.node, endpoint: address.endpoint, incarnation: address.incarnation }))
    addressBytes.set(address, bytes)
  }
  return bytes
}

// Values built by this library are typed and trusted (see WireMessage.ts), and the header's
// encoded form equals its type, so the send side skips a Schema encode: it would only re-check.
const messageHeader = (message: WireMessage): MessageHeader => {
  if (message._tag !== "SequencedMessage") return message
  const { sessionId, messageId, seq, chunk } = message
  return chunk === undefined
    ? { _tag: "SequencedMessage", sessionId, messageId, seq }
    : { _tag: "SequencedMessage", sessionId, messageId, seq, chunk }
}

/** Encodes an envelope into its segments; the caller enforces the size limit. */
export const encodeFrame = (envelope: Envelope): EncodedFrame => {
  const from = encodeAddress(envelope.from)
  const to = encodeAddress(envelope.to)
  const message = Buffer.from(JSON.stringify(messageHeader(envelope.message)))
  const payload = envelope.message._tag === "SequencedMessage" ? envelope.message.payload : undefined
  const body = 12 + from.length + to.length + message.length + (payload === undefined ? 0 : payload.length)
  return { from, to, message, payload, size: LengthPrefixBytes + body }
}

/** The announced body length of an encoded frame. */
export const bodyLength = (frame: EncodedFrame): number => frame.size - LengthPrefixBytes

/** Copies one frame, length prefix included, into `out` at `offset`; returns the next offset. */
export const writeFrame = (out: Buffer, offset: number, frame: EncodedFrame): number => {
  let at = out.writeUInt32BE(frame.size - LengthPrefixBytes, offset)
  at = out.writeUInt32BE(frame.from.length, at)
  at += frame.from.copy(out, at)
  at = out.writeUInt32BE(frame.to.length, at)
  at += frame.to.copy(out, at)
  at = out.writeUInt32BE(frame.message.length, at)
  at += frame.message.copy(out, at)
  if (frame.payload !== undefined) {
    out.set(frame.payload, at)
    at += frame.payload.length
  }
  return at
}

/** Concatenates frames into one buffer: one socket write. */
export const writeFrames = (frames: ReadonlyArray<EncodedFrame>, start: number, end: number, size: number): Buffer => {
  const out = Buffer.allocUnsafe(size)
  let offset = 0
  for (let index = start; index < end; index++) offset = writeFrame(out, offset, frames[index])
  return out
}

const AddressCacheLimit = 256

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/**
 * Decodes frame bodies from one connection. Addresses are cached per connection (bounded); the
 * message header is Schema-validated on every frame. `undefined` means malformed.
 */
export const makeBodyDecoder = () => {
  const addresses = new Map<string, ControllerAddress>()

  const address = (body: Buffer, start: number, end: number): ControllerAddress | undefined => {
    const text = body.toString("utf8", start, end)
    const cached = addresses.get(text)
    if (cached !== undefined) return cached
    const decoded = decodeAddress(parseJson(text))
    if (Either.isLeft(decoded)) return undefined
    if (addresses.size >= AddressCacheLimit) addresses.clear()
    addresses.set(text, decoded.right)
    return decoded.right
  }

  // Reads one u32-prefixed segment at `offset`; returns its end, or -1 if it overruns the body.
  const segmentEnd = (body: Buffer, offset: number): number => {
    if (offset + 4 > body.length) return -1
    const end = offset + 4 + body.readUInt32BE(offset)
    return end > body.length ? -1 : end
  }

  /** `owned`: the body has its own memory, so the payload may be a view rather than a copy. */
  return (body: Buffer, owned: boolean): Envelope | undefined => {
    const fromEnd = segmentEnd(body, 0)
    if (fromEnd < 0) return undefined
    const toEnd = segmentEnd(body, fromEnd)
    if (toEnd < 0) return undefined
    const messageEnd = segmentEnd(body, toEnd)
    if (messageEnd < 0) return undefined
    const from = address(body, 4, fromEnd)
    const to = address(body, fromEnd + 4, toEnd)
    if (from === undefined || to === undefined) return undefined
    const header = decodeMessageHeader(parseJson(body.toString("utf8", toEnd + 4, messageEnd)))
    if (Either.isLeft(header)) return undefined
    const message = header.right
    if (message._tag !== "SequencedMessage") {
      return messageEnd === body.length ? { from, to, message } : undefined
    }
    const length = body.length - messageEnd
    // A view into a shared socket chunk would pin the whole chunk for the payload's lifetime,
    // so only a body with memory of its own is viewed; otherwise the payload is copied out.
    let payload: Uint8Array
    if (owned) payload = new Uint8Array(body.buffer, body.byteOffset + messageEnd, length)
    else {
      payload = new Uint8Array(length)
      payload.set(body.subarray(messageEnd))
    }
    return { from, to, message: { ...message, payload } }
  }
}

/** Why a connection's input was refused; the connection is closed, nothing else. */
export type ReadViolation = "BadPreamble" | "FrameTooLarge"

/**
 * Splits a byte stream into frame bodies. Chunks are kept, not concatenated, until a whole frame
 * is available, so a large frame is copied once however many reads it spans.
 */
export class FrameReader {
  private readonly chunks: Array<Buffer> = []
  private head = 0
  private available = 0
  private expected = -1
  private preambleChecked: boolean

  constructor(readonly maxFrameSize: number, expectPreamble: boolean) {
    this.preambleChecked = !expectPreamble
  }

  /** Feeds one chunk; calls `onFrame` per complete body; stops at the first violation. */
  push(chunk: Uint8Array, onFrame: (body: Buffer, owned: boolean) => void): ReadViolation | undefined {
    if (chunk.length === 0) return undefined
    this.chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))
    this.available += chunk.length
    if (!this.preambleChecked) {
      if (this.available < Preamble.length) return undefined
      if (!this.take(Preamble.length).body.equals(Preamble)) return "BadPreamble"
      this.preambleChecked = true
    }
    while (true) {
      if (this.expected < 0) {
        if (this.available < LengthPrefixBytes) return undefined
        this.expected = this.take(LengthPrefixBytes).body.readUInt32BE(0)
        if (this.expected > this.maxFrameSize) return "FrameTooLarge"
      }
      if (this.available < this.expected) return undefined
      const { body, owned } = this.take(this.expected)
      this.expected = -1
      onFrame(body, owned)
    }
  }

  private take(length: number): { readonly body: Buffer; readonly owned: boolean } {
    if (length === 0) return { body: Buffer.alloc(0), owned: true }
    this.available -= length
    const first = this.chunks[0]
    if (first.length - this.head >= length) {
      const body = first.subarray(this.head, this.head + length)
      this.advance(length)
      return { body, owned: false }
    }
    // Spans chunks: gather into memory of its own (never a pooled slab).
    const body = Buffer.allocUnsafeSlow(length)
    let filled = 0
    while (filled < length) {
      const chunk = this.chunks[0]
      const count = Math.min(length - filled, chunk.length - this.head)
      chunk.copy(body, filled, this.head, this.head + count)
      filled += count
      this.advance(count)
    }
    return { body, owned: true }
  }

  private advance(count: number): void {
    this.head += count
    if (this.head === this.chunks[0].length) {
      this.chunks.shift()
      this.head = 0
    }
  }
}
