/**
 * Every payload is encoded with its Schema before it is sequenced, even in one process, so a
 * flow behaves the same in a test and across a network. Bytes are the UTF-8 JSON of the encoded
 * side (Node's pooled `Buffer.from` is about twice as fast as `TextEncoder` for small payloads).
 * Plain structs, most payloads, are written and read by compiled code with the same results
 * (see `PlainStruct`): a third of the general path's cost to decode, two thirds to encode.
 *
 * A Schema whose encoded side is `Uint8ArrayFromSelf` (binary payloads: files, images, blobs)
 * travels as those bytes, without JSON: JSON has no form for bytes, and base64 through Schema
 * costs far more than the rest of the path for a large payload (about 1.8 s to encode 8 MiB).
 * Both ends of a flow use the same Schema, so both agree on the form.
 */
import { Either, Schema, SchemaAST } from "effect"
import type { ParseResult } from "effect"
import * as PlainStruct from "./PlainStruct.js"
import * as SlabCopy from "./SlabCopy.js"

export interface PayloadCodec<A> {
  /** True when payloads travel as their own bytes (a `Uint8ArrayFromSelf` encoded side). */
  readonly binary: boolean
  /**
   * `copy` makes a binary payload's snapshot (default: `SlabCopy.copy`); other payloads are new
   * bytes anyway.
   */
  readonly encode: (value: A, copy?: (bytes: Uint8Array) => Uint8Array) => Either.Either<Uint8Array, ParseResult.ParseError | Error>
  /**
   * `asIs`: a binary payload may be handed out as `bytes`, without a copy (nobody else holds
   * them, or the consumer lends them).
   */
  readonly decode: (bytes: Uint8Array, asIs?: boolean) => Either.Either<A, ParseResult.ParseError | Error>
  /**
   * True when `encode` of the value will succeed by the compiled writer (a plain struct of the
   * declared shape), checked without encoding; undefined for payloads that cannot tell cheaply.
   */
  readonly encodesSurely: ((value: A) => boolean) | undefined
}

const textDecoder = new TextDecoder("utf-8", { fatal: true })

const bytesDeclaration = Schema.Uint8ArrayFromSelf.ast as SchemaAST.Declaration

/** True when the Schema's encoded side is `Uint8ArrayFromSelf` (refined, branded or annotated). */
export const isBinary = (schema: Schema.Schema.AnyNoContext): boolean => {
  const encoded = SchemaAST.encodedAST(schema.ast)
  return encoded._tag === "Declaration" && encoded.typeParameters.length === 0 &&
    encoded.decodeUnknown === bytesDeclaration.decodeUnknown
}

export const make = <A, I>(schema: Schema.Schema<A, I, never>): PayloadCodec<A> => {
  const encodeValue = Schema.encodeEither(schema)
  const decodeValue = Schema.decodeUnknownEither(schema)
  if (isBinary(schema)) {
    return {
      binary: true,
      // A copy: the controller keeps the bytes until they are confirmed, whatever the caller
      // does with its array after `send`.
      encode: (value, copy) =>
        Either.map(encodeValue(value), (encoded) => (copy ?? SlabCopy.copy)(encoded as Uint8Array)),
      // Received bytes may be shared (an in-process transport passes the producer's own array):
      // the handler gets bytes of its own unless they were joined for it or are lent.
      decode: (bytes, asIs) => decodeValue(asIs === true ? bytes : SlabCopy.copy(bytes)),
      encodesSurely: undefined
    }
  }
  const parse = PlainStruct.compileParse(schema.ast, true)
  const write = PlainStruct.compileWrite(schema.ast)
  const read = PlainStruct.compileRead(schema.ast)
  const fits = PlainStruct.compileCheck(schema.ast)
  return {
    binary: false,
    encodesSurely: fits,
    encode: (value) => {
      const written = write?.(value)
      if (written !== undefined) return Either.right(written)
      const result = encodeValue(value)
      if (Either.isLeft(result)) return Either.left(result.left)
      const json = JSON.stringify(result.right)
      return json === undefined
        ? Either.left(new Error("the encoded payload has no JSON form"))
        : Either.right(Buffer.from(json, "utf8"))
    },
    decode: (bytes) => {
      const fast = read?.(bytes)
      if (fast !== undefined) return Either.right(fast as A)
      let parsed: unknown
      try {
        parsed = JSON.parse(textDecoder.decode(bytes))
      } catch (error) {
        return Either.left(error instanceof Error ? error : new Error(String(error)))
      }
      const decoded = parse?.(parsed)
      return decoded === undefined ? decodeValue(parsed) : Either.right(decoded as A)
    }
  }
}
