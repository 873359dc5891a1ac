/**
 * The hand-written SequencedMessage decode of the frame reader must agree with the Schema: it
 * may pass an input to the Schema, but whatever it accepts the Schema accepts, with the same value.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import * as SeededRandom from "../../src/internal/SeededRandom.js"
import { SequencedMessage, WireMessage } from "../../src/Protocol/WireMessage.js"
import { encodeFrame, FrameReader, makeBodyDecoder, sequencedFast, writeFrame } from "../../src/Transport/internal/FrameCodec.js"

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
    chunk: () => ({ first: random.chance(0.5), last: random.chance(0.5) })
  }
  for (const [key, make] of Object.entries(valid)) {
    if (key === "chunk" && random.chance(0.5)) continue
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
      } else if (fields._tag === "SequencedMessage" && Either.isRight(viaSchema) && !Object.values(fields).includes(undefined)) {
        // Falling back is allowed only for shapes JSON cannot produce (an explicit undefined).
        expect.fail(`fast path refused a valid message: ${JSON.stringify(fields)}`)
      }
    }
    expect(accepted).toBeGreaterThan(1000)
  })

  it("round-trips sequenced messages through a frame, with and without chunk marks", () => {
    const decode = makeBodyDecoder()
    const address = { node: "127.0.0.1:1", endpoint: "e\"\\\u0001", incarnation: "i" }
    const messages: Array<SequencedMessage> = [
      { _tag: "SequencedMessage", sessionId: "s\u2028", messageId: "ü\"\\\n", seq: 2 ** 40, payload: new Uint8Array([0, 255]) },
      { _tag: "SequencedMessage", sessionId: "s", messageId: "m", seq: 1, payload: new Uint8Array(), chunk: { first: true, last: false } }
    ]
    for (const message of messages) {
      const frame = encodeFrame({ from: address, to: address, message })
      const bytes = Buffer.alloc(frame.size)
      writeFrame(bytes, 0, frame)
      const decoded: Array<unknown> = []
      new FrameReader(1 << 20, false).push(bytes, (buffer, start, end, owned) => decoded.push(decode(buffer, start, end, owned)?.message))
      expect(decoded).toEqual([message])
    }
  })
})
