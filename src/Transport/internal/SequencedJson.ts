/**
 * The JSON header of a `SequencedMessage` frame (everything but the payload), written and read
 * without a generic JSON pass: it is on the path of every business message. The writer emits
 * one fixed layout; the reader recognises exactly that layout byte by byte and returns
 * `undefined` for anything else (other key orders, escapes, whitespace), which the frame decoder
 * then hands to `JSON.parse` and the Schema as before. So a peer that writes the same JSON
 * differently is still understood, only more slowly.
 */
import type { ChunkMark, SequencedMessage } from "../../Protocol/WireMessage.js"

const ascii = (text: string): Uint8Array => Uint8Array.from(text, (char) => char.charCodeAt(0))

const Open = ascii(`{"_tag":"SequencedMessage","sessionId":"`)
const MessageIdKey = ascii(`","messageId":"`)
const SeqKey = ascii(`","seq":`)
const FirstKey = ascii(`,"chunk":{"first":`)
const LastKey = ascii(`,"last":`)
const True = ascii("true")
const False = ascii("false")

const Quote = 0x22
const Backslash = 0x5c
const CloseBrace = 0x7d

/**
 * The header JSON for `message`, in the layout `readHeader` recognises. The seq is written with
 * JSON.stringify: a plain template conversion goes through V8's number-to-string cache, which
 * keeps one string per message alive long enough to be promoted to the old generation.
 */
export const writeHeader = (message: SequencedMessage): string => {
  const chunk = message.chunk
  return `{"_tag":"SequencedMessage","sessionId":${JSON.stringify(message.sessionId)},"messageId":${
    JSON.stringify(message.messageId)
  },"seq":${JSON.stringify(message.seq)}${chunk === undefined ? "" : `,"chunk":{"first":${chunk.first},"last":${chunk.last}}`}}`
}

/** The parsed header: every field of a `SequencedMessage` but the payload. */
export interface Header {
  readonly sessionId: string
  readonly messageId: string
  readonly seq: number
  readonly chunk: ChunkMark | undefined
}

/** Reads the fixed layout at `[start, end)`; undefined for anything else (the caller falls back). */
export const readHeader = (buffer: Buffer, start: number, end: number): Header | undefined => {
  let at = expect(buffer, start, end, Open)
  if (at < 0) return undefined
  const sessionEnd = stringEnd(buffer, at, end)
  if (sessionEnd <= at) return undefined
  const sessionId = buffer.toString("utf8", at, sessionEnd)
  at = expect(buffer, sessionEnd, end, MessageIdKey)
  if (at < 0) return undefined
  const messageIdEnd = stringEnd(buffer, at, end)
  if (messageIdEnd <= at) return undefined
  const messageId = buffer.toString("utf8", at, messageIdEnd)
  at = expect(buffer, messageIdEnd, end, SeqKey)
  if (at < 0) return undefined
  // A positive integer without leading zeros, small enough to be exact (15 digits).
  let seq = 0
  const digits = at
  while (at < end && at - digits < 16) {
    const byte = buffer[at]
    if (byte < 0x30 || byte > 0x39) break
    seq = seq * 10 + (byte - 0x30)
    at++
  }
  if (at === digits || at - digits > 15 || buffer[digits] === 0x30) return undefined
  if (at + 1 === end && buffer[at] === CloseBrace) return { sessionId, messageId, seq, chunk: undefined }
  at = expect(buffer, at, end, FirstKey)
  if (at < 0) return undefined
  const first = boolean(buffer, at, end)
  if (first === undefined) return undefined
  at = expect(buffer, at + (first ? True.length : False.length), end, LastKey)
  if (at < 0) return undefined
  const last = boolean(buffer, at, end)
  if (last === undefined) return undefined
  at += last ? True.length : False.length
  return at + 2 === end && buffer[at] === CloseBrace && buffer[at + 1] === CloseBrace
    ? { sessionId, messageId, seq, chunk: { first, last } }
    : undefined
}

/** The offset after `expected` if the bytes at `at` match it, else -1. */
const expect = (buffer: Buffer, at: number, end: number, expected: Uint8Array): number => {
  if (at + expected.length > end) return -1
  for (let index = 0; index < expected.length; index++) {
    if (buffer[at + index] !== expected[index]) return -1
  }
  return at + expected.length
}

/** The offset of the closing quote of a string without escapes or control bytes, else -1. */
const stringEnd = (buffer: Buffer, at: number, end: number): number => {
  for (let index = at; index < end; index++) {
    const byte = buffer[index]
    if (byte === Quote) return index
    if (byte === Backslash || byte < 0x20) return -1
  }
  return -1
}

const boolean = (buffer: Buffer, at: number, end: number): boolean | undefined =>
  expect(buffer, at, end, True) >= 0 ? true : expect(buffer, at, end, False) >= 0 ? false : undefined
