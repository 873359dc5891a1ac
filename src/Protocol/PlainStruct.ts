/**
 * Plain structs, compiled: a Schema struct of string, number and boolean fields (and nested such
 * structs) with no transformations, refinements, optional or symbol keys, index signatures or
 * parse-option annotations, whose encoded side is its type side. Most payloads are of this kind,
 * and Schema's general parser and `JSON.stringify`/`JSON.parse` cost more than the rest of a
 * message's path. Each compiled function gives exactly what the general path gives, or answers
 * undefined and leaves the value to the general path, which then produces the result (and the
 * exact error) itself.
 */
import { Option, SchemaAST } from "effect"
import { SlabBytes } from "./SlabCopy.js"

type Primitive = "string" | "number" | "boolean"

/** A plain struct's declared fields, in declared order. */
interface Shape {
  readonly names: ReadonlyArray<string>
  readonly fields: ReadonlyArray<Primitive | Shape>
  /** Per field, the UTF-8 JSON before its value: `{"name":` for the first, `,"name":` after it. */
  readonly prefixes: ReadonlyArray<Uint8Array>
}

const primitiveTypes: Partial<Record<SchemaAST.AST["_tag"], Primitive>> = {
  StringKeyword: "string",
  NumberKeyword: "number",
  BooleanKeyword: "boolean"
}

const hasParseAnnotations = (ast: SchemaAST.AST): boolean =>
  Option.isSome(SchemaAST.getParseOptionsAnnotation(ast)) || Option.isSome(SchemaAST.getDecodingFallbackAnnotation(ast))

const compileShape = (ast: SchemaAST.AST): Shape | undefined => {
  // An empty struct is Schema's `{}`: any value but null and undefined, passed on as it is.
  if (ast._tag !== "TypeLiteral" || ast.propertySignatures.length === 0 || ast.indexSignatures.length > 0 || hasParseAnnotations(ast)) {
    return undefined
  }
  const names: Array<string> = []
  const fields: Array<Primitive | Shape> = []
  const prefixes: Array<Uint8Array> = []
  for (const property of ast.propertySignatures) {
    if (typeof property.name !== "string" || property.isOptional || hasParseAnnotations(property.type)) return undefined
    const field = primitiveTypes[property.type._tag] ?? compileShape(property.type)
    if (field === undefined) return undefined
    prefixes.push(Buffer.from(`${names.length === 0 ? "{" : ","}${JSON.stringify(property.name)}:`, "utf8"))
    names.push(property.name)
    fields.push(field)
  }
  return { names, fields, prefixes }
}

/**
 * Names the encoding and decoding leave to the general path: a declared `__proto__` is never an
 * own key of a plain copy, and an object lists array-index keys ("0", "7") before all others, so
 * `JSON.stringify` would not write them in declared order.
 */
const hasSpecialName = (shape: Shape): boolean =>
  shape.names.some((name) => name === "__proto__" || isArrayIndex(name)) ||
  shape.fields.some((field) => typeof field !== "string" && hasSpecialName(field))

const isArrayIndex = (name: string): boolean => /^(0|[1-9][0-9]*)$/.test(name) && Number(name) < 2 ** 32 - 1

/**
 * The parse: what Schema's parser returns for a plain struct, a type check per field and a copy of
 * the declared fields in declared order, without the parser's per-field results and closures.
 *
 * `fresh` (the input is `JSON.parse`'s own result, which nobody else holds): an input whose keys
 * are exactly the declared fields in declared order (nested structs likewise) and whose fields
 * check is answered with itself, since the copy would equal it key for key.
 */
export type PlainParse = (input: unknown) => object | undefined

export const compileParse = (ast: SchemaAST.AST, fresh = false): PlainParse | undefined => {
  const shape = compileShape(ast)
  return shape === undefined ? undefined : parseOf(shape, fresh && !hasSpecialName(shape))
}

const parseOf = (shape: Shape, reuse: boolean): PlainParse => {
  const { names } = shape
  const fields = shape.fields.map((field) => typeof field === "string" ? field : parseOf(field, reuse))
  /** The input itself when it has exactly the declared keys in order and every field checks. */
  const asIs = (input: Record<string, unknown>): boolean => {
    let index = 0
    for (const key in input) {
      if (index === names.length || key !== names[index]) return false
      const value = input[key]
      const field = fields[index]
      if (typeof field === "string" ? typeof value !== field : field(value) !== value) return false
      index++
    }
    return index === names.length
  }
  return (input) => {
    if (typeof input !== "object" || input === null || Array.isArray(input)) return undefined
    if (reuse && asIs(input as Record<string, unknown>)) return input
    const output: Record<string, unknown> = {}
    for (let index = 0; index < names.length; index++) {
      const name = names[index]
      const value = (input as Record<string, unknown>)[name]
      const field = fields[index]
      if (typeof field === "string") {
        if (typeof value !== field) return undefined
        output[name] = value
      } else {
        const nested = field(value)
        if (nested === undefined) return undefined
        output[name] = nested
      }
    }
    return output
  }
}

/**
 * The encoding: exactly the UTF-8 bytes of `JSON.stringify` of what the parse returns (the
 * declared fields in declared order), written straight from the value without the copy, the
 * generic walk or an intermediate string. Each field is read once.
 */
export type PlainWrite = (input: unknown) => Uint8Array | undefined

export const compileWrite = (ast: SchemaAST.AST): PlainWrite | undefined => {
  const shape = compileShape(ast)
  if (shape === undefined || hasSpecialName(shape)) return undefined
  return (input) => {
    // A getter on the value may itself encode a payload: only the outermost call uses the shared writer.
    const writer = shared.busy ? new ByteWriter() : shared
    writer.busy = true
    try {
      writer.at = writer.start
      return writeStruct(shape, input, writer) ? writer.takeOut() : undefined
    } finally {
      writer.busy = false
    }
  }
}

/**
 * True when the compiled write of `compileWrite` succeeds for the value (each declared field of
 * its declared type): the same checks, without writing. Lets a caller validate a payload now and
 * encode it later.
 */
export type PlainCheck = (input: unknown) => boolean

export const compileCheck = (ast: SchemaAST.AST): PlainCheck | undefined => {
  const shape = compileShape(ast)
  return shape === undefined || hasSpecialName(shape) ? undefined : (input) => fitsShape(shape, input)
}

const fitsShape = (shape: Shape, input: unknown): boolean => {
  if (typeof input !== "object" || input === null || Array.isArray(input)) return false
  const { fields, names } = shape
  for (let index = 0; index < names.length; index++) {
    const value = (input as Record<string, unknown>)[names[index]]
    const field = fields[index]
    if (typeof field === "string" ? typeof value !== field : !fitsShape(field, value)) return false
  }
  return true
}

/**
 * Where compiled writes put their bytes. Payloads are written one after another into a shared
 * slab, and each is handed out as a view of its own bytes, as Node's `Buffer.from` pools the bytes
 * of small strings (the general path's bytes): no copy, and no array of its own per payload. V8
 * makes an array of more than 64 bytes outside its heap, at about 600 ns each here, about 20 times
 * a view's cost. A view keeps its slab alive, as a pooled `Buffer` keeps its pool. A payload that
 * outgrows what is left of the slab moves to a new one; one larger than a slab is written into an
 * array of its own and copied out at its size.
 */
class ByteWriter {
  bytes = new Uint8Array(SlabBytes)
  /** Where the payload being written starts in `bytes`. */
  start = 0
  at = 0
  busy = false
  /** Room for `count` more bytes of the payload being written. */
  room(count: number): Uint8Array {
    if (this.at + count > this.bytes.length) this.move(count)
    return this.bytes
  }
  /** Moves the payload's bytes so far to the start of a new slab, or of an array its size needs. */
  private move(count: number): void {
    const written = this.at - this.start
    const moved = new Uint8Array(Math.max(SlabBytes, 2 * (written + count)))
    moved.set(this.bytes.subarray(this.start, this.at))
    this.bytes = moved
    this.start = 0
    this.at = written
  }
  ascii(text: string): void {
    const bytes = this.room(text.length)
    let at = this.at
    for (let index = 0; index < text.length; index++) bytes[at++] = text.charCodeAt(index)
    this.at = at
  }
  /** `bytes` as they are, where short runs are cheaper to copy one by one than through a call. */
  put(bytes: Uint8Array): void {
    const target = this.room(bytes.length)
    const at = this.at
    if (bytes.length > 32) target.set(bytes, at)
    else for (let index = 0; index < bytes.length; index++) target[at + index] = bytes[index]
    this.at = at + bytes.length
  }
  /** The payload just written; the next one is written after it. */
  takeOut(): Uint8Array {
    const { at, bytes, start } = this
    if (bytes.length === SlabBytes) {
      this.start = at
      return new Uint8Array(bytes.buffer, start, at - start)
    }
    // An outsized payload's array: a view would keep its spare room alive.
    this.bytes = new Uint8Array(SlabBytes)
    this.start = this.at = 0
    return bytes.slice(start, at)
  }
}

const shared = new ByteWriter()
const utf8 = new TextEncoder()

const Quote = 0x22
const Backslash = 0x5c

const writeStruct = (shape: Shape, input: unknown, writer: ByteWriter): boolean => {
  if (typeof input !== "object" || input === null || Array.isArray(input)) return false
  const { fields, names, prefixes } = shape
  for (let index = 0; index < names.length; index++) {
    const value = (input as Record<string, unknown>)[names[index]]
    writer.put(prefixes[index])
    const field = fields[index]
    switch (field) {
      case "string":
        if (typeof value !== "string") return false
        writeString(value, writer)
        break
      case "number":
        if (typeof value !== "number") return false
        writeNumber(value, writer)
        break
      case "boolean":
        if (typeof value !== "boolean") return false
        writer.ascii(value ? "true" : "false")
        break
      default:
        if (!writeStruct(field, value, writer)) return false
    }
  }
  writer.ascii("}")
  return true
}

/** Printable ASCII without `"` and `\` is written as it is; anything else as `JSON.stringify` writes it. */
const writeString = (value: string, writer: ByteWriter): void => {
  const bytes = writer.room(value.length + 2)
  const start = writer.at
  bytes[start] = Quote
  const end = start + 1 + value.length
  if (value.length > LongString) {
    // Beyond ASCII, the UTF-8 is longer than the string and not all of it fits.
    if (utf8.encodeInto(value, bytes.subarray(start + 1, end)).read < value.length) return writeEscaped(value, start, writer)
    for (let at = start + 1; at < end; at++) {
      if (notAsIs[bytes[at]] === 1) return writeEscaped(value, start, writer)
    }
  } else {
    for (let index = 0; index < value.length; index++) {
      const code = value.charCodeAt(index)
      if (code > 0x7e || notAsIs[code] === 1) return writeEscaped(value, start, writer)
      bytes[start + 1 + index] = code
    }
  }
  bytes[end] = Quote
  writer.at = end + 1
}

/**
 * 1 for the bytes a JSON string does not hold as they are (controls, `"`, `\`) or that are not
 * ASCII; DEL is left to `JSON.stringify` too, which writes it as it is.
 */
const notAsIs = Uint8Array.from({ length: 256 }, (_, code) => code < 0x20 || code > 0x7e || code === Quote || code === Backslash ? 1 : 0)

/**
 * Above this length a string's characters are copied by `encodeInto` (then checked as bytes);
 * below it, one by one is cheaper than the call.
 */
const LongString = 24

/** A string with characters JSON escapes, or beyond ASCII, as `JSON.stringify` writes it. */
const writeEscaped = (value: string, start: number, writer: ByteWriter): void => {
  const json = JSON.stringify(value)
  writer.at = start
  // The room may move the payload: where to write is read after it.
  const target = writer.room(3 * json.length)
  writer.at += utf8.encodeInto(json, target.subarray(writer.at)).written
}

/**
 * A 32-bit integer (but -2^31) as its digits; any other number as `JSON.stringify` writes
 * it (which is also why not `String(number)`: that goes through V8's number-to-string cache, which
 * keeps each result alive long enough to be promoted to the old generation).
 */
const writeNumber = (value: number, writer: ByteWriter): void => {
  // Integer division by 10 of a 32-bit integer compiles to a multiplication; of a double, it does not.
  let rest = value | 0
  if (rest !== value || rest === -0x80000000) return writer.ascii(JSON.stringify(value))
  const negative = rest < 0
  if (negative) rest = -rest
  let digits = 1
  for (let bound = 10; bound <= rest; bound *= 10) digits++
  const bytes = writer.room(digits + 1)
  const start = negative ? writer.at + 1 : writer.at
  if (negative) bytes[writer.at] = 0x2d
  const end = start + digits
  for (let at = end - 1; at >= start; at--) {
    const next = (rest / 10) | 0
    bytes[at] = 0x30 + rest - 10 * next
    rest = next
  }
  writer.at = end
}

/**
 * The decoding of bytes in the form the encoding writes from ASCII text: the declared keys in
 * declared order, no whitespace, strings of printable ASCII without escapes, numbers and booleans
 * as JSON writes them. For those bytes it answers what `JSON.parse` and the parse together give,
 * without the text decoding and the generic parse; for any other bytes, valid JSON or not, it
 * answers undefined.
 */
export type PlainRead = (bytes: Uint8Array) => object | undefined

export const compileRead = (ast: SchemaAST.AST): PlainRead | undefined => {
  const shape = compileShape(ast)
  if (shape === undefined || hasSpecialName(shape)) return undefined
  return (bytes) => {
    const reader: ByteReader = { bytes, at: 0 }
    const value = readStruct(shape, reader)
    return value !== undefined && reader.at === bytes.length ? value : undefined
  }
}

interface ByteReader {
  readonly bytes: Uint8Array
  at: number
}

const asciiDecoder = new TextDecoder("utf-8")

const readStruct = (shape: Shape, reader: ByteReader): object | undefined => {
  const { fields, names, prefixes } = shape
  const output: Record<string, unknown> = {}
  for (let index = 0; index < names.length; index++) {
    if (!expect(reader, prefixes[index])) return undefined
    const field = fields[index]
    let value: unknown
    switch (field) {
      case "string":
        value = readString(reader)
        break
      case "number":
        value = readNumber(reader)
        break
      case "boolean":
        value = expect(reader, trueBytes) ? true : expect(reader, falseBytes) ? false : undefined
        break
      default:
        value = readStruct(field, reader)
    }
    if (value === undefined) return undefined
    output[names[index]] = value
  }
  return reader.bytes[reader.at++] === 0x7d ? output : undefined
}

const trueBytes = Buffer.from("true")
const falseBytes = Buffer.from("false")

/** Steps over `expected` when the bytes continue with it. */
const expect = (reader: ByteReader, expected: Uint8Array): boolean => {
  const { at, bytes } = reader
  if (at + expected.length > bytes.length) return false
  for (let index = 0; index < expected.length; index++) {
    if (bytes[at + index] !== expected[index]) return false
  }
  reader.at = at + expected.length
  return true
}

const readString = (reader: ByteReader): string | undefined => {
  const { bytes } = reader
  if (bytes[reader.at] !== Quote) return undefined
  const start = reader.at + 1
  let at = start
  while (true) {
    const byte = bytes[at]
    if (byte === Quote) break
    // The end, an escape, a control character or UTF-8 beyond ASCII: the general path decides.
    if (byte === undefined || byte < 0x20 || byte > 0x7f || byte === Backslash) return undefined
    at++
  }
  reader.at = at + 1
  // Short strings come out flat from single-character concatenation; longer ones are decoded.
  if (at - start > 12) return asciiDecoder.decode(bytes.subarray(start, at))
  let text = ""
  for (let index = start; index < at; index++) text += String.fromCharCode(bytes[index])
  return text
}

const isDigit = (byte: number | undefined): boolean => byte !== undefined && byte >= 0x30 && byte <= 0x39

/** A number in JSON's grammar: `-? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?`. */
const readNumber = (reader: ByteReader): number | undefined => {
  const { bytes } = reader
  const start = reader.at
  let at = start
  const negative = bytes[at] === 0x2d
  if (negative) at++
  if (bytes[at] === 0x30) at++
  else if (isDigit(bytes[at])) while (isDigit(bytes[at])) at++
  else return undefined
  const integerEnd = at
  if (bytes[at] === 0x2e) {
    at++
    if (!isDigit(bytes[at])) return undefined
    while (isDigit(bytes[at])) at++
  }
  if (bytes[at] === 0x65 || bytes[at] === 0x45) {
    at++
    if (bytes[at] === 0x2b || bytes[at] === 0x2d) at++
    if (!isDigit(bytes[at])) return undefined
    while (isDigit(bytes[at])) at++
  }
  reader.at = at
  const digitsStart = negative ? start + 1 : start
  // Up to 15 digits and nothing after them: exact in a double, summed here.
  if (at === integerEnd && at - digitsStart <= 15) {
    let value = 0
    for (let index = digitsStart; index < at; index++) value = value * 10 + (bytes[index] - 0x30)
    return negative ? -value : value
  }
  // `Number` reads JSON's grammar to the same double as `JSON.parse`.
  return Number(asciiDecoder.decode(bytes.subarray(start, at)))
}
