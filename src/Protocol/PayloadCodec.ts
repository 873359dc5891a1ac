/**
 * Every payload is encoded with its Schema before it is sequenced, even in one process, so a
 * flow behaves the same in a test and across a network. Bytes are the UTF-8 JSON of the encoded
 * side (Node's pooled `Buffer.from` is about twice as fast as `TextEncoder` for small payloads).
 */
import { Either, Schema } from "effect"
import type { ParseResult } from "effect"

export interface PayloadCodec<A> {
  readonly encode: (value: A) => Either.Either<Uint8Array, ParseResult.ParseError | Error>
  readonly decode: (bytes: Uint8Array) => Either.Either<A, ParseResult.ParseError | Error>
}

const textDecoder = new TextDecoder("utf-8", { fatal: true })

export const make = <A, I>(schema: Schema.Schema<A, I, never>): PayloadCodec<A> => {
  const encodeValue = Schema.encodeEither(schema)
  const decodeValue = Schema.decodeUnknownEither(schema)
  return {
    encode: (value) => {
      const encoded = encodeValue(value)
      if (Either.isLeft(encoded)) return Either.left(encoded.left)
      const json = JSON.stringify(encoded.right)
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
      return decodeValue(parsed)
    }
  }
}
