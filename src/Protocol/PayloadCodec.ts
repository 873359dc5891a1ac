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
import { Either, Schema, SchemaAST } from "effect"
import type { ParseResult } from "effect"

export interface PayloadCodec<A> {
  readonly encode: (value: A) => Either.Either<Uint8Array, ParseResult.ParseError | Error>
  /** `fresh`: nobody else holds `bytes`, so a binary payload may be handed out without a copy. */
  readonly decode: (bytes: Uint8Array, fresh?: boolean) => Either.Either<A, ParseResult.ParseError | Error>
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
      // A copy: the controller keeps the bytes until they are confirmed, whatever the caller
      // does with its array after `send`.
      encode: (value) => Either.map(encodeValue(value), (encoded) => (encoded as Uint8Array).slice()),
      // Received bytes may be shared (an in-process transport passes the producer's own array):
      // the handler gets bytes of its own unless they were reassembled for it.
      decode: (bytes, fresh) => decodeValue(fresh === true ? bytes : bytes.slice())
    }
  }
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
