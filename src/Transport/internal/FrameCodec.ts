/**
 * The frame layout of the TCP transport, and an incremental frame reader. Frames follow the
 * connect handshake (`Handshake.ts`) in both directions of a connection:
 *
 *   frame      := u32be bodyLength, body                      (bodyLength <= maxFrameSize)
 *   body       := u32be n, from    (n bytes: JSON of a ControllerAddress)
 *                 u32be n, to      (n bytes: JSON of a ControllerAddress)
 *                 u32be n, message (n bytes: JSON of the wire message without its `payload`)
 *                 u8 hasPayload    (0 or 1)
 *                 payload          (the rest of the body; empty unless hasPayload is 1)
 *
 * Payload bytes ride raw, never base64'd. The message is decoded with the `WireMessage` Schema
 * after the payload is put back, so a new wire message type needs no change here as long as its
 * fields are JSON-safe (bytes only in `payload`). The two addresses are separate segments
 * because every envelope of a flow repeats them: the sender caches their bytes per address
 * object and the reader caches their decoded value per connection, so the per-frame Schema work
 * is the message alone.
 */
import { Either, Schema } from "effect"
import { ControllerAddress } from "../../Protocol/Address.js"
import * as SlabCopy from "../../Protocol/SlabCopy.js"
import { WireMessage } from "../../Protocol/WireMessage.js"
import type { Envelope, SequencedMessage } from "../../Protocol/WireMessage.js"
import { readHeader, writeHeader } from "./SequencedJson.js"

/** The largest frame body either side accepts: 16 MiB. */
export const MaxFrameSize = 16 * 1024 * 1024

/** Bytes before each frame body. */
export const LengthPrefixBytes = 4

const decodeWireMessage = Schema.decodeUnknownEither(WireMessage)
const decodeAddress = Schema.decodeUnknownEither(ControllerAddress)

/**
 * An envelope ready to be copied into a write batch; `size` includes the length prefix. The
 * message stays a string until it is written straight into the batch: a buffer of its own per
 * frame would be one more allocation and copy per message.
 */
export interface EncodedFrame {
  readonly from: Buffer
  readonly to: Buffer
  /** The message's JSON (without its payload). */
  readonly message: string
  /** Its length in UTF-8. */
  readonly messageBytes: number
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

/** Encodes an envelope into its segments; the caller enforces the size limit. */
export const encodeFrame = (envelope: Envelope): EncodedFrame => {
  const from = encodeAddress(envelope.from)
  const to = encodeAddress(envelope.to)
  // Values built by this library are typed and trusted (see WireMessage.ts), so the send side
  // skips a Schema encode: for these JSON-safe messages it would only re-check them.
  let message: string
  let payload: Uint8Array | undefined
  if (envelope.message._tag === "SequencedMessage" && envelope.message.attempt === undefined && envelope.message.trace === undefined) {
    // The hot path: a fixed layout the reader recognises without a generic JSON pass (a retried
    // job's attempt number and a sampled sender's trace context go the generic way).
    message = writeHeader(envelope.message)
    payload = envelope.message.payload
  } else {
    // Any other message that carries bytes carries them in `payload`, like SequencedMessage.
    const { payload: bytes, ...rest } = envelope.message as { readonly payload?: Uint8Array }
    message = JSON.stringify(bytes === undefined ? envelope.message : rest)
    payload = bytes
  }
  const messageBytes = Buffer.byteLength(message, "utf8")
  const body = 13 + from.length + to.length + messageBytes + (payload === undefined ? 0 : payload.length)
  return { from, to, message, messageBytes, payload, size: LengthPrefixBytes + body }
}

/** The announced body length of an encoded frame. */
export const bodyLength = (frame: EncodedFrame): number => frame.size - LengthPrefixBytes

/** Copies one frame, length prefix included, into `out` at `offset`; returns the next offset. */
export const writeFrame = (out: Buffer, offset: number, frame: EncodedFrame): number => {
  let at = out.writeUInt32BE(frame.size - LengthPrefixBytes, offset)
  at = out.writeUInt32BE(frame.from.length, at)
  out.set(frame.from, at)
  at += frame.from.length
  at = out.writeUInt32BE(frame.to.length, at)
  out.set(frame.to, at)
  at += frame.to.length
  at = out.writeUInt32BE(frame.messageBytes, at)
  at += out.write(frame.message, at, frame.messageBytes, "utf8")
  at = out.writeUInt8(frame.payload === undefined ? 0 : 1, at)
  if (frame.payload !== undefined) {
    out.set(frame.payload, at)
    at += frame.payload.length
  }
  return at
}

/** Concatenates frames into one buffer: one socket write. */
export const writeFrames = (frames: ReadonlyArray<EncodedFrame>, start: number, end: number, size: number): Buffer =>
  writeFramesInto(Buffer.allocUnsafe(size), frames, start, end)

/** Concatenates frames into `out` from offset 0; returns the written part. */
export const writeFramesInto = (out: Buffer, frames: ReadonlyArray<EncodedFrame>, start: number, end: number): Buffer => {
  let offset = 0
  for (let index = start; index < end; index++) offset = writeFrame(out, offset, frames[index])
  return offset === out.length ? out : out.subarray(0, offset)
}

const AddressCacheLimit = 256

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

interface CachedAddress {
  readonly bytes: Buffer
  readonly address: ControllerAddress
}

/** A frame body: `buffer[start, end)`; `owned` when the buffer holds nothing else. */
export type FrameHandler = (buffer: Buffer, start: number, end: number, owned: boolean) => void

/**
 * Decodes frame bodies from one connection; `undefined` means malformed. Addresses are
 * Schema-decoded once per connection and then recognised by their bytes (bounded cache); the
 * message is Schema-decoded on every frame.
 */
export const makeBodyDecoder = () => {
  const addresses = new Map<string, CachedAddress>()
  // The last address seen in each position: one flow's frames hit these with a byte compare.
  let lastFrom: CachedAddress | undefined
  let lastTo: CachedAddress | undefined

  const address = (hint: CachedAddress | undefined, buffer: Buffer, start: number, end: number) => {
    if (hint !== undefined && hint.bytes.length === end - start && buffer.compare(hint.bytes, 0, hint.bytes.length, start, end) === 0) {
      return hint
    }
    const text = buffer.toString("utf8", start, end)
    const cached = addresses.get(text)
    if (cached !== undefined) return cached
    const decoded = decodeAddress(parseJson(text))
    if (Either.isLeft(decoded)) return undefined
    if (addresses.size >= AddressCacheLimit) addresses.clear()
    const entry: CachedAddress = { bytes: Buffer.from(buffer.subarray(start, end)), address: decoded.right }
    addresses.set(text, entry)
    return entry
  }

  // The end of the u32-prefixed segment at `offset`, or -1 if it overruns the body.
  const segmentEnd = (buffer: Buffer, offset: number, end: number): number => {
    if (offset + 4 > end) return -1
    const segment = offset + 4 + buffer.readUInt32BE(offset)
    return segment > end ? -1 : segment
  }

  // A payload not `owned` is copied out: a view into the socket's read chunk would pin the whole
  // chunk for as long as the payload lives (small ones go into a shared slab, see `SlabCopy`).
  return (buffer: Buffer, start: number, end: number, owned: boolean): Envelope | undefined => {
    const fromEnd = segmentEnd(buffer, start, end)
    if (fromEnd < 0) return undefined
    const toEnd = segmentEnd(buffer, fromEnd, end)
    if (toEnd < 0) return undefined
    const messageEnd = segmentEnd(buffer, toEnd, end)
    if (messageEnd < 0 || messageEnd >= end) return undefined
    const from = address(lastFrom, buffer, start + 4, fromEnd)
    const to = address(lastTo, buffer, fromEnd + 4, toEnd)
    if (from === undefined || to === undefined) return undefined
    lastFrom = from
    lastTo = to
    const hasPayload = buffer[messageEnd]
    const payloadStart = messageEnd + 1
    if (hasPayload === 1) {
      const header = readHeader(buffer, toEnd + 4, messageEnd)
      if (header !== undefined) {
        const payload = owned
          ? new Uint8Array(buffer.buffer, buffer.byteOffset + payloadStart, end - payloadStart)
          : SlabCopy.copyRange(buffer, payloadStart, end)
        const message: SequencedMessage = header.chunk === undefined
          ? { _tag: "SequencedMessage", sessionId: header.sessionId, messageId: header.messageId, seq: header.seq, payload }
          : { _tag: "SequencedMessage", sessionId: header.sessionId, messageId: header.messageId, seq: header.seq, payload, chunk: header.chunk }
        return { from: from.address, to: to.address, message }
      }
    }
    const fields = parseJson(buffer.toString("utf8", toEnd + 4, messageEnd))
    if (typeof fields !== "object" || fields === null || Array.isArray(fields)) return undefined
    if (hasPayload === 1) {
      ;(fields as { payload?: Uint8Array }).payload = owned
        ? new Uint8Array(buffer.buffer, buffer.byteOffset + payloadStart, end - payloadStart)
        : SlabCopy.copyRange(buffer, payloadStart, end)
    } else if (hasPayload !== 0 || payloadStart !== end) return undefined
    const fast = sequencedFast(fields as Record<string, unknown>)
    if (fast !== undefined) return { from: from.address, to: to.address, message: fast }
    const message = decodeWireMessage(fields)
    return Either.isRight(message) ? { from: from.address, to: to.address, message: message.right } : undefined
  }
}

const nonEmpty = (value: unknown): value is string => typeof value === "string" && value.length > 0

/**
 * The `SequencedMessage` Schema's decode, written out for the hot path: it accepts exactly the
 * values the Schema accepts and builds the same value. Anything it does not recognise as valid
 * (including every invalid input) goes to the Schema, which stays the authority.
 */
export const sequencedFast = (fields: Record<string, unknown>): SequencedMessage | undefined => {
  if (fields._tag !== "SequencedMessage") return undefined
  const { chunk, messageId, payload, seq, sessionId } = fields
  // Only the first attempt of an untraced message takes this path; anything more goes to the Schema.
  if ("attempt" in fields || "trace" in fields) return undefined
  if (!nonEmpty(sessionId) || !nonEmpty(messageId) || !(payload instanceof Uint8Array)) return undefined
  if (typeof seq !== "number" || !Number.isSafeInteger(seq) || seq <= 0) return undefined
  if (chunk === undefined) {
    return "chunk" in fields ? undefined : { _tag: "SequencedMessage", sessionId, messageId, seq, payload }
  }
  if (typeof chunk !== "object" || chunk === null) return undefined
  const { first, last } = chunk as Record<string, unknown>
  if (typeof first !== "boolean" || typeof last !== "boolean") return undefined
  return { _tag: "SequencedMessage", sessionId, messageId, seq, payload, chunk: { first, last } }
}

/** Why a connection's input was refused; the connection is closed, nothing else. */
export type ReadViolation = "FrameTooLarge"

/**
 * Splits a byte stream into frame bodies. Chunks are kept, not concatenated, until a whole frame
 * is available, so a large frame is copied once however many reads it spans (and memory grows
 * only as its bytes arrive, never by what a length prefix announces); a frame inside one chunk is
 * handed on in place.
 */
export class FrameReader {
  private readonly chunks: Array<Buffer> = []
  private head = 0
  private available = 0
  private expected = -1

  constructor(readonly maxFrameSize: number) {}

  /**
   * Bytes held for the frame not yet complete, its length prefix included: zero only between
   * frames (a frame whose prefix has been read but none of its body still counts).
   */
  get buffered(): number {
    return this.expected < 0 ? this.available : this.available + LengthPrefixBytes
  }

  /** Feeds one chunk; calls `onFrame` per complete body; stops at the first violation. */
  push(chunk: Uint8Array, onFrame: FrameHandler): ReadViolation | undefined {
    if (chunk.length === 0) return undefined
    this.chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))
    this.available += chunk.length
    while (true) {
      if (this.expected < 0) {
        if (this.available < LengthPrefixBytes) return undefined
        const { buffer, start } = this.take(LengthPrefixBytes)
        this.expected = buffer.readUInt32BE(start)
        if (this.expected > this.maxFrameSize) return "FrameTooLarge"
      }
      if (this.available < this.expected) return undefined
      const { buffer, end, owned, start } = this.take(this.expected)
      this.expected = -1
      onFrame(buffer, start, end, owned)
    }
  }

  private take(length: number): { readonly buffer: Buffer; readonly start: number; readonly end: number; readonly owned: boolean } {
    this.available -= length
    const first = this.chunks[0]
    if (first !== undefined && first.length - this.head >= length) {
      const start = this.head
      this.advance(length)
      return { buffer: first, start, end: start + length, owned: false }
    }
    // Spans chunks: gather into memory of its own (never a pooled slab).
    const buffer = Buffer.allocUnsafeSlow(length)
    let filled = 0
    while (filled < length) {
      const chunk = this.chunks[0]
      const count = Math.min(length - filled, chunk.length - this.head)
      chunk.copy(buffer, filled, this.head, this.head + count)
      filled += count
      this.advance(count)
    }
    return { buffer, start: 0, end: length, owned: true }
  }

  private advance(count: number): void {
    this.head += count
    if (this.head === this.chunks[0].length) {
      this.chunks.shift()
      this.head = 0
    }
  }
}
