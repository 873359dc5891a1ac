/**
 * Every payload is encoded with its Schema before it is sequenced, even in one process, so a
 * flow behaves the same in a test and across a network. Bytes are the UTF-8 JSON of the encoded
 * side (Node's pooled `Buffer.from` is about twice as fast as `TextEncoder` for small payloads).
 *
 * A Schema whose encoded side is `Uint8ArrayFromSelf` (binary payloads: files, images, blobs)
 * travels as those bytes, without JSON: JSON has no form for bytes, and base64 through Schema
 * costs far more than the rest of the path for a large payload (about 1.8 s to encode 8 MiB).
 * Both ends of a flow use the same Schema, so both agree on the form.
 */
import { Either, Option, Schema, SchemaAST } from "effect"
import type { ParseResult } from "effect"

export interface PayloadCodec<A> {
  /**
   * `copy` makes a binary payload's snapshot (default: a fresh array); other payloads are new
   * bytes anyway.
   */
  readonly encode: (value: A, copy?: (bytes: Uint8Array) => Uint8Array) => Either.Either<Uint8Array, ParseResult.ParseError | Error>
  /**
   * `asIs`: a binary payload may be handed out as `bytes`, without a copy (nobody else holds
   * them, or the consumer lends them).
   */
  readonly decode: (bytes: Uint8Array, asIs?: boolean) => Either.Either<A, ParseResult.ParseError | Error>
}

const textDecoder = new TextDecoder("utf-8", { fatal: true })

const bytesDeclaration = Schema.Uint8ArrayFromSelf.ast as SchemaAST.Declaration

/** True when the Schema's encoded side is `Uint8ArrayFromSelf` (refined, branded or annotated). */
export const isBinary = (schema: Schema.Schema.AnyNoContext): boolean => {
  const encoded = SchemaAST.encodedAST(schema.ast)
  return encoded._tag === "Declaration" && encoded.typeParameters.length === 0 &&
    encoded.decodeUnknown === bytesDeclaration.decodeUnknown
}

/**
 * A plain struct's parse, compiled: what Schema's parser returns for a struct of string, number
 * and boolean fields (and nested such structs) with no transformations, refinements, optional or
 * symbol keys, index signatures or parse-option annotations, whose encoded side is its type side.
 * Schema's own parse of such a value is a type check per field and a copy of the declared fields
 * in declared order; this is the same copy without the parser's per-field results and closures.
 * It answers undefined whenever the value does not check, and the caller then runs Schema's
 * parser, which produces the result (and the exact error) itself.
 */
type PlainParse = (input: unknown) => object | undefined

const primitiveTypes: Partial<Record<SchemaAST.AST["_tag"], string>> = {
  StringKeyword: "string",
  NumberKeyword: "number",
  BooleanKeyword: "boolean"
}

const hasParseAnnotations = (ast: SchemaAST.AST): boolean =>
  Option.isSome(SchemaAST.getParseOptionsAnnotation(ast)) || Option.isSome(SchemaAST.getDecodingFallbackAnnotation(ast))

/**
 * `fresh` (the decode side: the input is `JSON.parse`'s own result, which nobody else holds): an
 * input whose keys are exactly the declared fields in declared order (nested structs likewise)
 * and whose fields check is answered with itself, since the copy would equal it key for key;
 * any other input is copied as without `fresh`.
 */
export const compilePlain = (ast: SchemaAST.AST, fresh = false): PlainParse | undefined => {
  if (ast._tag !== "TypeLiteral" || ast.indexSignatures.length > 0 || hasParseAnnotations(ast)) return undefined
  const names: Array<string> = []
  const fields: Array<string | PlainParse> = []
  for (const property of ast.propertySignatures) {
    if (typeof property.name !== "string" || property.isOptional || hasParseAnnotations(property.type)) return undefined
    const field = primitiveTypes[property.type._tag] ?? compilePlain(property.type, fresh)
    if (field === undefined) return undefined
    names.push(property.name)
    fields.push(field)
  }
  // A declared `__proto__` is never an own key of a copy: such structs are always copied.
  const reuse = fresh && !names.includes("__proto__")
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
 * A plain struct's JSON, compiled: exactly `JSON.stringify` of what `compilePlain` returns (the
 * declared fields in declared order), written straight from the value without the copy and the
 * generic walk over it. Undefined (the caller then takes the general path) whenever the value does
 * not check, or for a struct whose field names a plain copy could not hold as own properties.
 */
type PlainJson = (input: unknown) => string | undefined

export const compilePlainJson = (ast: SchemaAST.AST): PlainJson | undefined => {
  if (ast._tag !== "TypeLiteral" || ast.indexSignatures.length > 0 || hasParseAnnotations(ast)) return undefined
  const names: Array<string> = []
  // Each field's JSON prefix: `{"name":` for the first, `,"name":` after it.
  const prefixes: Array<string> = []
  const fields: Array<string | PlainJson> = []
  for (const property of ast.propertySignatures) {
    if (typeof property.name !== "string" || property.isOptional || hasParseAnnotations(property.type)) return undefined
    if (property.name === "__proto__") return undefined
    const field = primitiveTypes[property.type._tag] ?? compilePlainJson(property.type)
    if (field === undefined) return undefined
    prefixes.push(`${names.length === 0 ? "{" : ","}${JSON.stringify(property.name)}:`)
    names.push(property.name)
    fields.push(field)
  }
  return (input) => {
    if (typeof input !== "object" || input === null || Array.isArray(input)) return undefined
    if (names.length === 0) return "{}"
    let json = ""
    for (let index = 0; index < names.length; index++) {
      const value = (input as Record<string, unknown>)[names[index]]
      const field = fields[index]
      let text: string | undefined
      switch (field) {
        case "string":
          text = typeof value === "string" ? JSON.stringify(value) : undefined
          break
        case "number":
          // JSON.stringify, not String: String(number) goes through V8's number-to-string
          // cache, which keeps each result alive until the cache slot is reused, long enough
          // to be promoted to the old generation (one string per message, collected only by
          // full collections).
          text = typeof value === "number" ? JSON.stringify(value) : undefined
          break
        case "boolean":
          text = typeof value === "boolean" ? (value ? "true" : "false") : undefined
          break
        default:
          text = (field as PlainJson)(value)
      }
      if (text === undefined) return undefined
      json += prefixes[index] + text
    }
    return json + "}"
  }
}

export const make = <A, I>(schema: Schema.Schema<A, I, never>): PayloadCodec<A> => {
  const encodeValue = Schema.encodeEither(schema)
  const decodeValue = Schema.decodeUnknownEither(schema)
  if (isBinary(schema)) {
    return {
      // A copy: the controller keeps the bytes until they are confirmed, whatever the caller
      // does with its array after `send`.
      encode: (value, copy) =>
        Either.map(encodeValue(value), (encoded) => copy === undefined ? (encoded as Uint8Array).slice() : copy(encoded as Uint8Array)),
      // Received bytes may be shared (an in-process transport passes the producer's own array):
      // the handler gets bytes of its own unless they were joined for it or are lent.
      decode: (bytes, asIs) => decodeValue(asIs === true ? bytes : bytes.slice())
    }
  }
  const plain = compilePlain(schema.ast, true)
  const plainJson = compilePlainJson(schema.ast)
  return {
    encode: (value) => {
      let json = plainJson?.(value)
      if (json === undefined) {
        const result = encodeValue(value)
        if (Either.isLeft(result)) return Either.left(result.left)
        json = JSON.stringify(result.right)
      }
      return json === undefined
        ? Either.left(new Error("the encoded payload has no JSON form"))
        : Either.right(Buffer.from(json, "utf8"))
    },
    decode: (bytes) => {
      let parsed: unknown
      try {
        parsed = JSON.parse(textDecoder.decode(bytes))
      } catch (error) {
        return Either.left(error instanceof Error ? error : new Error(String(error)))
      }
      const decoded = plain?.(parsed)
      return decoded === undefined ? decodeValue(parsed) : Either.right(decoded as A)
    }
  }
}
