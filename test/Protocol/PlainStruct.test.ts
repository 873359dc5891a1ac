/**
 * The compiled plain-struct encoding and decoding against the general path they stand in for
 * (`Schema` plus `JSON.stringify`/`JSON.parse`), on random struct Schemas, random values (strings
 * with escapes, non-ASCII and lone surrogates; numbers of every kind; wrong types) and random
 * corruptions of the encoded bytes. A failing case prints its seed;
 * `RELIABLE_PLAIN_SEED=<seed> npx vitest run test/Protocol/PlainStruct.test.ts -t replay` replays it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import * as SeededRandom from "../../src/internal/SeededRandom.js"
import * as PayloadCodec from "../../src/Protocol/PayloadCodec.js"
import * as PlainStruct from "../../src/Protocol/PlainStruct.js"

type Random = SeededRandom.SeededRandom
type Field = "string" | "number" | "boolean" | Struct
interface Struct {
  readonly fields: ReadonlyArray<readonly [string, Field]>
}

const pick = <T>(random: Random, items: ReadonlyArray<T>): T => items[random.int(0, items.length - 1)]

const names = ["a", "id", "name", "with space", "quote\"d", "é", "constructor", "toString", "x1", "_", "$", "\u2028", "10", "0"]

const randomStruct = (random: Random, depth: number): Struct => {
  const count = random.int(0, 4)
  const chosen = new Set<string>()
  while (chosen.size < count) chosen.add(pick(random, names))
  return {
    fields: [...chosen].map((name) => [
      name,
      depth < 2 && random.chance(0.25) ? randomStruct(random, depth + 1) : pick(random, ["string", "number", "boolean"] as const)
    ] as const)
  }
}

const schemaOf = (struct: Struct): Schema.Schema.AnyNoContext =>
  Schema.Struct(Object.fromEntries(struct.fields.map(([name, field]) => [
    name,
    field === "string" ? Schema.String : field === "number" ? Schema.Number : field === "boolean" ? Schema.Boolean : schemaOf(field)
  ])))

const strings = ["", "c-42", "plain ascii text that is longer than a dozen", "quote\"", "back\\slash", "tab\t", "nl\n", "\u0000", "\u007f",
  "é", "日本", "\ud83d\ude00", "\ud800", "\udc00x", "\u2028", "</script>", "{\"a\":1}"]
const numbers = [0, -0, 1, -1, 42, 123456, -987654321, 2 ** 31 - 1, -(2 ** 31 - 1), 2 ** 31, -(2 ** 31), 2 ** 32, 2 ** 53 - 1, -(2 ** 53 - 1), 2 ** 53, 1e15, 1e16, 1e21, 1.5, -0.25, 0.1, 1e-7, 5e-324,
  Number.MAX_VALUE, NaN, Infinity, -Infinity]

const printable = (random: Random, min: number, max: number) =>
  Array.from({ length: random.int(min, max) }, () => String.fromCharCode(random.int(0x20, 0x7e))).join("")

/** Longer than the writer copies one by one, now and then with one character JSON escapes or beyond ASCII. */
const longString = (random: Random) => {
  const text = printable(random, 25, 90)
  if (random.chance(0.5)) return text
  const at = random.int(0, text.length)
  return text.slice(0, at) + pick(random, ["\"", "\\", "\n", "\u0000", "\u007f", "é", "日", "\ud83d\ude00", "\ud800", "\u2028"]) + text.slice(at)
}

const randomValue = (random: Random, field: Field): unknown => {
  // Now and then a value of the wrong kind.
  if (random.chance(0.03)) return pick(random, [null, "1", 1, true, [], {}, undefined])
  switch (field) {
    case "string":
      return random.chance(0.4) ? pick(random, strings) : random.chance(0.5) ? printable(random, 0, 20) : longString(random)
    case "number":
      return random.chance(0.5) ? pick(random, numbers) : random.int(-1e9, 1e9) * (random.chance(0.3) ? 0.001 : 1)
    case "boolean":
      return random.chance(0.5)
    default: {
      const value: Record<string, unknown> = {}
      for (const [name, nested] of field.fields) if (!random.chance(0.02)) value[name] = randomValue(random, nested)
      if (random.chance(0.05)) value.extra = 1
      return value
    }
  }
}

const alphabet = "{}[]\",:\\-+.eE0123456789 truefalsn\u00e9\n\t\u0001\u007f"

/** The bytes with a few random edits: replaced, inserted or removed characters. */
const corrupt = (random: Random, bytes: Uint8Array): Uint8Array => {
  const edited = Array.from(bytes)
  for (let edit = random.int(1, 3); edit > 0; edit--) {
    const at = random.int(0, edited.length)
    const byte = Buffer.from(pick(random, [...alphabet]), "utf8")[0]
    const kind = random.int(0, 2)
    if (kind === 0 && at < edited.length) edited[at] = byte
    else if (kind === 1) edited.splice(at, 0, byte)
    else edited.splice(at, 1)
  }
  return Uint8Array.from(edited)
}

/**
 * Structural equality with own keys in order and `Object.is` for primitives (so -0 and NaN
 * count). Not `toStrictEqual`: it compares `constructor` properties, and these values may declare
 * a field of that name. Errors compare by message.
 */
const same = (actual: unknown, expected: unknown): boolean => {
  if (actual instanceof Error || expected instanceof Error) {
    return actual instanceof Error && expected instanceof Error && actual.message === expected.message
  }
  if (typeof actual !== "object" || actual === null || typeof expected !== "object" || expected === null) return Object.is(actual, expected)
  const keys = Object.keys(actual)
  return Object.getPrototypeOf(actual) === Object.getPrototypeOf(expected) &&
    JSON.stringify(keys) === JSON.stringify(Object.keys(expected)) &&
    keys.every((key) => same((actual as Record<string, unknown>)[key], (expected as Record<string, unknown>)[key]))
}

const sameEither = (actual: Either.Either<unknown, unknown>, expected: Either.Either<unknown, unknown>): boolean =>
  Either.isRight(actual) ? Either.isRight(expected) && same(actual.right, expected.right) : Either.isLeft(expected) && same(actual.left, expected.left)

/** What the general path answers for `bytes`. */
const generalDecode = (schema: Schema.Schema.AnyNoContext, bytes: Uint8Array) => {
  let parsed: unknown
  try {
    parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes))
  } catch {
    return undefined
  }
  return Schema.decodeUnknownEither(schema)(parsed)
}

/** Runs `cases` random cases from `seed`; returns how often the compiled encoding and decoding answered. */
const check = (seed: number, cases: number) => {
  const random = SeededRandom.make(seed)
  let written = 0
  let read = 0
  for (let index = 0; index < cases; index++) {
    const struct = randomStruct(random, 0)
    const schema = schemaOf(struct)
    const write = PlainStruct.compileWrite(schema.ast)
    const readBytes = PlainStruct.compileRead(schema.ast)
    const fits = PlainStruct.compileCheck(schema.ast)
    const codec = PayloadCodec.make(schema)
    const value = randomValue(random, struct)
    const context = `seed ${seed} case ${index}: ${JSON.stringify(struct)} ${JSON.stringify(value)}`
    const encoded = Schema.encodeEither(schema)(value)
    const bytes = write?.(value)
    // The check answers exactly when the write succeeds.
    expect(fits?.(value), context).toBe(write === undefined ? undefined : bytes !== undefined)
    if (bytes === undefined) {
      expect(write === undefined || Either.isLeft(encoded), context).toBe(true)
    } else {
      written++
      expect(Either.isRight(encoded), context).toBe(true)
      expect(Buffer.from(bytes).toString("utf8"), context).toBe(JSON.stringify(Either.getOrThrow(encoded)))
    }
    const viaCodec = codec.encode(value as never)
    expect(sameEither(Either.map(viaCodec, (bytes) => Buffer.from(bytes).toString("utf8")), Either.map(encoded, (json) => JSON.stringify(json))), context)
      .toBe(true)
    const sources = [Buffer.from(JSON.stringify(value) ?? "null", "utf8")]
    if (bytes !== undefined) sources.push(Buffer.from(bytes))
    for (const source of sources) {
      for (const input of [source, corrupt(random, source), corrupt(random, source)]) {
        const general = generalDecode(schema, input)
        const fast = readBytes?.(input)
        if (fast !== undefined) {
          read++
          expect(general !== undefined && Either.isRight(general) && same(fast, general.right), `${context} read ${Buffer.from(input).toString()}`)
            .toBe(true)
        }
        const decoded = codec.decode(input)
        expect(general === undefined ? Either.isLeft(decoded) : sameEither(decoded, general), `${context} decode ${Buffer.from(input).toString()}`)
          .toBe(true)
      }
    }
  }
  return { written, read }
}

describe("PlainStruct", () => {
  it.each([
    ["__proto__", Schema.Struct({ ["__proto__"]: Schema.String, a: Schema.Number })],
    ["an array-index name", Schema.Struct({ a: Schema.Number, 7: Schema.String })],
    ["a nested array-index name", Schema.Struct({ a: Schema.Struct({ 0: Schema.Boolean }) })]
  ] as const)("structs declaring %s take the general path for bytes (their field order would differ)", (_, schema) => {
    expect([PlainStruct.compileWrite(schema.ast), PlainStruct.compileRead(schema.ast)]).toEqual([undefined, undefined])
    expect(PlainStruct.compileParse(schema.ast)).toBeDefined()
  })

  it("the common shape is written and read without the general path", () => {
    const Order = Schema.Struct({ orderId: Schema.Number, customer: Schema.String, rush: Schema.Boolean, at: Schema.Struct({ x: Schema.Number }) })
    const value = { orderId: -12, customer: "c-42", rush: true, at: { x: 0.5 } }
    const bytes = PlainStruct.compileWrite(Order.ast)!(value)!
    expect(Buffer.from(bytes).toString()).toBe(JSON.stringify(value))
    expect(PlainStruct.compileRead(Order.ast)!(bytes)).toStrictEqual(value)
    // Whitespace, another key order, escapes: valid JSON the compiled read leaves to the general path.
    for (const other of ["{ \"orderId\":1,\"customer\":\"a\",\"rush\":true,\"at\":{\"x\":1}}", "{\"customer\":\"a\",\"orderId\":1,\"rush\":true,\"at\":{\"x\":1}}",
      "{\"orderId\":1,\"customer\":\"\\u0061\",\"rush\":true,\"at\":{\"x\":1}}"]) {
      expect(PlainStruct.compileRead(Order.ast)!(Buffer.from(other))).toBeUndefined()
      expect(PayloadCodec.make(Order).decode(Buffer.from(other))).toStrictEqual(Schema.decodeUnknownEither(Order)(JSON.parse(other)))
    }
  })

  it("payloads far beyond the scratch buffer: ASCII, escaped and non-ASCII strings, and smaller ones after them", () => {
    const Doc = Schema.Struct({ title: Schema.String, body: Schema.String, size: Schema.Number })
    const write = PlainStruct.compileWrite(Doc.ast)!
    const read = PlainStruct.compileRead(Doc.ast)!
    for (const body of ["x".repeat(100_000), "\"q\"\n".repeat(30_000), "日本語".repeat(40_000), "short"]) {
      const value = { title: "t", body, size: body.length }
      const bytes = write(value)!
      expect(Buffer.from(bytes).toString("utf8") === JSON.stringify(value)).toBe(true)
      expect(PayloadCodec.make(Doc).decode(bytes)).toStrictEqual(Either.right(value))
      // Only ASCII without escapes is read by the compiled path.
      expect(read(bytes) !== undefined).toBe(body === "short" || body.startsWith("x"))
    }
  })

  it("payloads written one after another keep their bytes: across slabs, after outsized ones and after refused ones", () => {
    const Doc = Schema.Struct({ title: Schema.String, body: Schema.String, size: Schema.Number })
    const write = PlainStruct.compileWrite(Doc.ast)!
    const random = SeededRandom.make(77)
    const kept: Array<[Uint8Array, string]> = []
    for (let index = 0; index < 3000; index++) {
      const body = random.chance(0.01) ? "y".repeat(random.int(8_000, 40_000)) : longString(random)
      const value = { title: printable(random, 0, 30), body, size: index }
      // Refused half-way (a field of the wrong type) or thrown by a getter: nothing of it is kept.
      if (random.chance(0.05)) expect(write({ ...value, size: "7" })).toBeUndefined()
      if (random.chance(0.02)) {
        expect(() =>
          write({
            ...value,
            get size(): number {
              throw new Error("getter")
            }
          })
        ).toThrow("getter")
      }
      kept.push([write(value)!, JSON.stringify(value)])
    }
    for (const [bytes, json] of kept) expect(Buffer.from(bytes).toString("utf8")).toBe(json)
  })

  it("a long string ending beyond ASCII is written as JSON writes it, whatever an earlier refused write left behind", () => {
    const Note = Schema.Struct({ text: Schema.String, n: Schema.Number })
    const write = PlainStruct.compileWrite(Note.ast)!
    const ascii = "a".repeat(40)
    // Refused at its number, after its text was written where the next payload goes.
    expect(write({ text: `${ascii}bbb`, n: "1" })).toBeUndefined()
    for (const text of [`${ascii}日`, `${ascii}é`, `${ascii}\ud83d\ude00`, `${ascii}\ud800`]) {
      expect(Buffer.from(write({ text, n: 1 })!).toString("utf8")).toBe(JSON.stringify({ text, n: 1 }))
    }
  })

  it("a getter that encodes while a value is being encoded gets bytes of its own", () => {
    const Inner = Schema.Struct({ n: Schema.Number })
    const Outer = Schema.Struct({ a: Schema.String, b: Schema.Number })
    const writeInner = PlainStruct.compileWrite(Inner.ast)!
    let inner: Uint8Array | undefined
    const value = {
      a: "x",
      get b() {
        inner = writeInner({ n: 5 })
        return 7
      }
    }
    expect(Buffer.from(PlainStruct.compileWrite(Outer.ast)!(value)!).toString()).toBe("{\"a\":\"x\",\"b\":7}")
    expect(Buffer.from(inner!).toString()).toBe("{\"n\":5}")
  })

  describe("randomized against the general path", () => {
    const base = Number(process.env.RELIABLE_PLAIN_BASE ?? 9100)
    it.each(Array.from({ length: 8 }, (_, index) => base + index))("seed %i: 400 schemas and values, and corruptions of their bytes", (seed) => {
      try {
        const { read, written } = check(seed, 400)
        // The compiled paths did answer (this is not a test of the fallback alone).
        expect(written).toBeGreaterThan(100)
        expect(read).toBeGreaterThan(100)
      } catch (error) {
        console.error(`plain struct run failed: seed=${seed}`)
        throw error
      }
    })

    it("replay one seed (RELIABLE_PLAIN_SEED)", () => {
      check(Number(process.env.RELIABLE_PLAIN_SEED ?? 4242), 400)
    })
  })
})
