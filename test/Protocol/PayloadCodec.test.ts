import { describe, expect, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import * as PayloadCodec from "../../src/Protocol/PayloadCodec.js"
import * as PlainStruct from "../../src/Protocol/PlainStruct.js"

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

  it("binary payloads: the bytes themselves, snapshotted at encode; decoded copies unless handed out as is", () => {
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

  describe("plain structs (compiled parse)", () => {
    const Inner = Schema.Struct({ on: Schema.Boolean, label: Schema.String })
    const Plain = Schema.Struct({ id: Schema.Number, name: Schema.String, inner: Inner })

    it.each([
      ["a struct of primitives", Schema.Struct({ a: Schema.Number, b: Schema.String, c: Schema.Boolean }), true],
      ["nested plain structs", Plain, true],
      ["an optional field", Schema.Struct({ a: Schema.optional(Schema.Number) }), false],
      ["a refined field", Schema.Struct({ a: Schema.Number.pipe(Schema.int()) }), false],
      ["a literal field", Schema.Struct({ a: Schema.Literal("x") }), false],
      ["an index signature", Schema.Record({ key: Schema.String, value: Schema.Number }), false],
      ["a transformed field", Schema.Struct({ a: Schema.NumberFromString }), false],
      ["parse options", Schema.Struct({ a: Schema.Number }).annotations({ parseOptions: { onExcessProperty: "error" } }), false],
      ["a class", class Order extends Schema.Class<Order>("Order")({ a: Schema.Number }) {}, false],
      ["a string", Schema.String, false]
    ] as const)("%s compiles: %s", (_, schema, compiled) => {
      expect(PlainStruct.compileParse((schema as Schema.Schema.AnyNoContext).ast) !== undefined).toBe(compiled)
    })

    it.each([
      { id: 1, name: "a", inner: { on: true, label: "x" } },
      { id: NaN, name: "", inner: { on: false, label: "y" }, extra: 1 },
      { name: "a", id: -0, inner: { label: "z", on: true, more: [1] } },
      { id: 1e21, name: "quote\" \\ \u2028 \u00e9 \ud83d\ude00 \ud800", inner: { on: true, label: "\n\t" } },
      { id: Infinity, name: "b", inner: { on: false, label: "" } },
      { inner: { on: false, label: "" }, id: 2, name: "b" },
      { id: 3, name: "c", inner: { label: "w", on: true } },
      { id: "1", name: "a", inner: { on: true, label: "x" } },
      { id: 1, name: "a", inner: null },
      { id: 1, name: "a" },
      [1, 2],
      null,
      "text"
    ])("answers as Schema does: %j", (value) => {
      const codec = PayloadCodec.make(Plain)
      const encoded = codec.encode(value as never)
      const viaSchema = Schema.encodeEither(Plain)(value as never)
      expect(Either.isRight(encoded)).toBe(Either.isRight(viaSchema))
      if (Either.isRight(encoded) && Either.isRight(viaSchema)) {
        const json = Buffer.from(encoded.right).toString("utf8")
        expect(json).toBe(JSON.stringify(viaSchema.right))
        expect(codec.decode(encoded.right)).toStrictEqual(Schema.decodeUnknownEither(Plain)(JSON.parse(json)))
      } else {
        expect(encoded).toStrictEqual(viaSchema)
      }
      const bytes = Buffer.from(JSON.stringify(value), "utf8")
      const decoded = codec.decode(bytes)
      const decodedViaSchema = Schema.decodeUnknownEither(Plain)(JSON.parse(JSON.stringify(value)))
      expect(decoded).toStrictEqual(decodedViaSchema)
      // The same keys in the same order (a decoded value may be JSON.parse's own object).
      if (Either.isRight(decoded) && Either.isRight(decodedViaSchema)) {
        expect(JSON.stringify(decoded.right)).toBe(JSON.stringify(decodedViaSchema.right))
      }
    })
  })
})
