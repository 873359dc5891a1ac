import { describe, expect, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import * as PayloadCodec from "../../src/Protocol/PayloadCodec.js"

const bytes = (...values: Array<number>) => Uint8Array.from(values)

describe("PayloadCodec", () => {
  it.each([
    ["Uint8ArrayFromSelf", Schema.Uint8ArrayFromSelf, true],
    ["a refined byte array", Schema.Uint8ArrayFromSelf.pipe(Schema.filter((value) => value.length < 10)), true],
    ["a branded byte array", Schema.Uint8ArrayFromSelf.pipe(Schema.brand("Blob")), true],
    ["a transformation whose encoded side is bytes", Schema.transform(Schema.Uint8ArrayFromSelf, Schema.String, {
      decode: (value) => Buffer.from(value).toString("latin1"),
      encode: (value) => Uint8Array.from(Buffer.from(value, "latin1"))
    }), true],
    ["Uint8ArrayFromBase64 (a string on the wire)", Schema.Uint8ArrayFromBase64, false],
    ["a struct holding bytes", Schema.Struct({ data: Schema.Uint8ArrayFromBase64 }), false],
    ["a string", Schema.String, false]
  ] as const)("%s travels as raw bytes: %s", (_, schema, binary) => {
    expect(PayloadCodec.isBinary(schema as Schema.Schema.AnyNoContext)).toBe(binary)
  })

  it("binary payloads: the bytes themselves, snapshotted at encode; decoded copies unless fresh", () => {
    const codec = PayloadCodec.make(Schema.Uint8ArrayFromSelf)
    const source = bytes(1, 2, 3)
    const encoded = Either.getOrThrow(codec.encode(source))
    expect(encoded).toEqual(source)
    expect(encoded).not.toBe(source)
    const shared = Either.getOrThrow(codec.decode(encoded))
    expect(shared).toEqual(source)
    expect(shared).not.toBe(encoded)
    expect(Either.getOrThrow(codec.decode(encoded, true))).toBe(encoded)
  })

  it("other payloads are UTF-8 JSON of the encoded side, as before", () => {
    const codec = PayloadCodec.make(Schema.Struct({ id: Schema.Number, data: Schema.Uint8ArrayFromBase64 }))
    const encoded = Either.getOrThrow(codec.encode({ id: 7, data: bytes(1, 2, 3) }))
    expect(Buffer.from(encoded).toString("utf8")).toBe(`{"id":7,"data":"AQID"}`)
    expect(Either.getOrThrow(codec.decode(encoded))).toEqual({ id: 7, data: bytes(1, 2, 3) })
    expect(Either.isLeft(codec.decode(bytes(0xff)))).toBe(true)
  })
})
