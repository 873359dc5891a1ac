/**
 * The hand-written SequencedMessage paths of the frame codec must agree with JSON and the Schema:
 * they may hand an input to the general path, but whatever they accept decodes to the same value.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import * as SeededRandom from "../../src/internal/SeededRandom.js"
import { SequencedMessage, WireMessage } from "../../src/Protocol/WireMessage.js"
import { encodeFrame, FrameReader, makeBodyDecoder, sequencedFast, writeFrame } from "../../src/Transport/internal/FrameCodec.js"
import { readHeader, writeHeader } from "../../src/Transport/internal/SequencedJson.js"

const decodeSchema = Schema.decodeUnknownEither(WireMessage)

const candidates: ReadonlyArray<unknown> = [
  undefined, null, true, false, 0, -1, 1, 1.5, 2 ** 53, Number.NaN, "", "s", "session-1", [], {}, new Uint8Array(3),
  { first: true, last: false }, { first: "yes", last: false }, { first: false, last: true, extra: 1 }, { first: true }
]

const randomFields = (random: SeededRandom.SeededRandom): Record<string, unknown> => {
  const pick = () => candidates[random.int(0, candidates.length - 1)]
  const fields: Record<string, unknown> = { _tag: random.chance(0.9) ? "SequencedMessage" : "Ack" }
  const valid: Record<string, () => unknown> = {
    sessionId: () => "session-1",
    messageId: () => `m-${random.int(0, 99)}`,
    seq: () => random.int(1, 1000),
    payload: () => new Uint8Array([1, 2, 3]),
    chunk: () => ({ first: random.chance(0.5), last: random.chance(0.5) }),
    trace: () => "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
  }
  for (const [key, make] of Object.entries(valid)) {
    if (key === "chunk" && random.chance(0.5)) continue
    if (key === "trace" && random.chance(0.9)) continue
    fields[key] = random.chance(0.8) ? make() : pick()
  }
  if (random.chance(0.2)) fields.extra = pick()
  return fields
}

describe("FrameCodec SequencedMessage fast path", () => {
  it("accepts only what the Schema accepts, and builds the same value", () => {
    const random = SeededRandom.make(77)
    let accepted = 0
    for (let run = 0; run < 20_000; run++) {
      const fields = randomFields(random)
      const fast = sequencedFast(fields)
      const viaSchema = decodeSchema(fields)
      if (fast !== undefined) {
        accepted++
        expect(Either.isRight(viaSchema), JSON.stringify(fields)).toBe(true)
        if (Either.isRight(viaSchema)) expect(fast).toEqual(viaSchema.right)
      } else if (fields.trace !== undefined) {
        // A traced message always goes to the Schema.
      } else if (fields._tag === "SequencedMessage" && Either.isRight(viaSchema) && !Object.values(fields).includes(undefined)) {
        // Falling back is allowed only for shapes JSON cannot produce (an explicit undefined).
        expect.fail(`fast path refused a valid message: ${JSON.stringify(fields)}`)
      }
    }
    expect(accepted).toBeGreaterThan(1000)
  })

  it("round-trips sequenced messages through a frame, with and without chunk marks and trace contexts", () => {
    const trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    const decode = makeBodyDecoder()
    const address = { node: "127.0.0.1:1", endpoint: "e\"\\\u0001", incarnation: "i" }
    const messages: Array<SequencedMessage> = [
      { _tag: "SequencedMessage", sessionId: "s\u2028", messageId: "ü\"\\\n", seq: 2 ** 40, payload: new Uint8Array([0, 255]) },
      { _tag: "SequencedMessage", sessionId: "s", messageId: "m", seq: 1, payload: new Uint8Array(), chunk: { first: true, last: false } },
      // A sampled sender's trace context travels with the message (the fast paths leave it to JSON).
      { _tag: "SequencedMessage", sessionId: "s", messageId: "t", seq: 3, payload: new Uint8Array([9]), trace },
      { _tag: "SequencedMessage", sessionId: "s", messageId: "t", seq: 4, payload: new Uint8Array([9]), chunk: { first: false, last: true }, trace },
      { _tag: "SequencedMessage", sessionId: "s", messageId: "t", seq: 5, payload: new Uint8Array([9]), attempt: 2, trace }
    ]
    for (const message of messages) {
      const frame = encodeFrame({ from: address, to: address, message })
      const bytes = Buffer.alloc(frame.size)
      writeFrame(bytes, 0, frame)
      const decoded: Array<unknown> = []
      new FrameReader(1 << 20).push(bytes, (buffer, start, end, owned) => decoded.push(decode(buffer, start, end, owned)?.message))
      expect(decoded).toEqual([message])
    }
  })
})

describe("SequencedMessage header without a generic JSON pass", () => {
  // Characters JSON writes as they are, then characters it escapes.
  const plain = ["a", "Z", "0", "-", ":", " ", "\u007f", "é", "€", "😀", "\u2028", "/"]
  const escaped = ["\"", "\\", "\n", "\u0001"]

  const randomText = (random: SeededRandom.SeededRandom, escapes: boolean) =>
    Array.from({ length: random.int(random.chance(0.05) ? 0 : 1, 12) }, () =>
      escapes && random.chance(0.3) ? escaped[random.int(0, escaped.length - 1)] : plain[random.int(0, plain.length - 1)]).join("")

  const randomMessage = (random: SeededRandom.SeededRandom): SequencedMessage => {
    const escapes = random.chance(0.3)
    const seq = random.chance(0.1) ? random.int(1, 9) * 10 ** random.int(10, 15) : random.int(1, 10_000)
    const base = { _tag: "SequencedMessage" as const, sessionId: randomText(random, escapes), messageId: randomText(random, escapes), seq, payload: new Uint8Array([7]) }
    return random.chance(0.5) ? base : { ...base, chunk: { first: random.chance(0.5), last: random.chance(0.5) } }
  }

  /** What the general path makes of the same bytes: JSON.parse of the UTF-8 text. */
  const viaJson = (bytes: Buffer) => {
    const { _tag, ...rest } = JSON.parse(bytes.toString("utf8"))
    return { chunk: undefined, ...rest }
  }

  it("reads what it writes exactly as JSON.parse does, and declines everything it does not recognise", () => {
    const random = SeededRandom.make(4242)
    let read = 0
    for (let run = 0; run < 20_000; run++) {
      const message = randomMessage(random)
      let bytes = Buffer.from(writeHeader(message))
      if (random.chance(0.3)) {
        // Damage it: flip, drop or insert a byte, or rewrite it as equivalent but different JSON.
        const position = random.int(0, bytes.length - 1)
        const choice = random.int(0, 3)
        if (choice === 0) bytes[position] = random.int(0, 255)
        else if (choice === 1) bytes = Buffer.concat([bytes.subarray(0, position), bytes.subarray(position + 1)])
        else if (choice === 2) bytes = Buffer.concat([bytes.subarray(0, position), Buffer.from([random.int(0, 127)]), bytes.subarray(position)])
        else bytes = Buffer.from(JSON.stringify(JSON.parse(bytes.toString()), null, 1))
      }
      const header = readHeader(bytes, 0, bytes.length)
      if (header === undefined) continue
      read++
      let expected: unknown
      try {
        expected = viaJson(bytes)
      } catch {
        expect.fail(`read a header JSON.parse rejects: ${bytes.toString()}`)
      }
      expect(header, bytes.toString()).toEqual(expected)
    }
    expect(read).toBeGreaterThan(10_000)
  })

  it("falls back to the general path for other layouts of the same message", () => {
    const decode = makeBodyDecoder()
    const address = { node: "127.0.0.1:1", endpoint: "e", incarnation: "i" }
    const frame = encodeFrame({ from: address, to: address, message: { _tag: "SequencedMessage", sessionId: "s", messageId: "m\\x", seq: 3, payload: new Uint8Array([1]) } })
    const reordered = JSON.stringify({ seq: 3, messageId: "m\\x", sessionId: "s", _tag: "SequencedMessage" })
    expect(readHeader(Buffer.from(reordered), 0, reordered.length)).toBeUndefined()
    const size = frame.size - frame.messageBytes + reordered.length
    const bytes = Buffer.alloc(size)
    writeFrame(bytes, 0, { ...frame, message: reordered, messageBytes: reordered.length, size })
    const decoded: Array<unknown> = []
    new FrameReader(1 << 20).push(bytes, (buffer, start, end, owned) => decoded.push(decode(buffer, start, end, owned)?.message))
    expect(decoded).toEqual([{ _tag: "SequencedMessage", sessionId: "s", messageId: "m\\x", seq: 3, payload: new Uint8Array([1]) }])
  })
})
