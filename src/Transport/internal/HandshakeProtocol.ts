/**
 * The connect handshake of the TCP transport, its bytes and its rules. Once TCP (and TLS, when
 * configured) is up, the dialer says which node it is, so the listener knows whose envelopes the
 * connection may carry; with a shared secret both ends also prove they hold it:
 *
 *   dialer   -> listener: preamble, Hello { node, auth, nonce? }
 *   listener -> dialer:   preamble, Welcome { node, nonce?, proof? }    or Refused { reason }
 *   dialer   -> listener: Proof { proof }                                (shared secret only)
 *   listener -> dialer:   Accepted                                       or Refused { reason }
 *
 *   preamble := the 8 ASCII bytes "effrel/2"
 *   message  := u32be length, that many bytes of JSON (at most 4 KiB)
 *
 * Each side sends its next message only once the other's has arrived, so neither may send more
 * than one message ahead: a reader holding more than that is reading a stranger. Frames
 * (`FrameCodec.ts`) follow the last message in both directions: envelopes from the dialer,
 * replies to its lookups from the listener.
 *
 * With a shared secret, each side's proof is an HMAC-SHA256 of both nonces and both node names
 * under its own role, so a proof cannot be replayed on another connection, reflected back to
 * its sender, or moved to other names.
 */
import { Either, Schema } from "effect"
import * as Crypto from "node:crypto"

/** Sent first by both sides; lets either drop a stranger's bytes at once. */
export const Preamble: Buffer = Buffer.from("effrel/2", "ascii")

/** The largest handshake message body. */
export const MaxHandshakeMessageBytes = 4096

/** The longest node name a peer may announce. */
export const MaxNodeNameLength = 300

const NodeName = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(MaxNodeNameLength))
/** Nonces and proofs: base64 of 32 bytes. */
const Token = Schema.String.pipe(Schema.minLength(16), Schema.maxLength(64))

/** How a side authenticates its peers beyond TLS: not at all, or by a shared secret. */
export const Auth = Schema.Literal("none", "sharedSecret")
export type Auth = typeof Auth.Type

export const Hello = Schema.TaggedStruct("Hello", { node: NodeName, auth: Auth, nonce: Schema.optional(Token) })
export type Hello = typeof Hello.Type

export const Welcome = Schema.TaggedStruct("Welcome", {
  node: NodeName,
  nonce: Schema.optional(Token),
  proof: Schema.optional(Token)
})
export type Welcome = typeof Welcome.Type

export const Proof = Schema.TaggedStruct("Proof", { proof: Token })
export type Proof = typeof Proof.Type

export const Accepted = Schema.TaggedStruct("Accepted", {})
export type Accepted = typeof Accepted.Type

export const Refused = Schema.TaggedStruct("Refused", { reason: Schema.String.pipe(Schema.maxLength(500)) })
export type Refused = typeof Refused.Type

export const HandshakeMessage = Schema.Union(Hello, Welcome, Proof, Accepted, Refused)
export type HandshakeMessage = typeof HandshakeMessage.Type

const decodeMessage = Schema.decodeUnknownEither(Schema.parseJson(HandshakeMessage))

/** The bytes of one message, after the preamble when `withPreamble`. */
export const encodeMessage = (message: HandshakeMessage, withPreamble: boolean): Buffer => {
  const json = Buffer.from(JSON.stringify(message))
  const prefix = Buffer.allocUnsafe(4)
  prefix.writeUInt32BE(json.length)
  return Buffer.concat(withPreamble ? [Preamble, prefix, json] : [prefix, json])
}

/** Why the bytes of the first 8 do not open the handshake, in words for a log line. */
export const describePreamble = (bytes: Buffer): string => {
  if (bytes[0] === 0x16 && bytes[1] === 0x03) return "it speaks TLS and this node runs without TLS"
  if (bytes[0] === 0x15 && bytes[1] === 0x03) return "it answered with a TLS alert and this node runs without TLS"
  const text = bytes.toString("latin1")
  if (text.startsWith("effrel/")) return `it speaks protocol ${JSON.stringify(text)} and this node ${JSON.stringify(Preamble.toString("latin1"))}`
  return "it is not an effect-reliable node (unknown first bytes)"
}

/**
 * Reads the other side's handshake: the preamble, then one message at a time. It holds at most
 * the preamble and one message; more bytes than that mean a peer that did not wait its turn.
 */
export class HandshakeReader {
  private pending: Buffer = Buffer.alloc(0)
  private preambleChecked = false
  private violation: string | undefined

  push(chunk: Buffer): void {
    if (this.violation !== undefined) return
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk])
    if (this.pending.length > Preamble.length + 4 + MaxHandshakeMessageBytes) {
      this.violation = "it sent more than one handshake message at a time"
    }
  }

  /** The next message, `undefined` until it has arrived whole, or a violation (in words). */
  next(): Either.Either<HandshakeMessage | undefined, string> {
    if (this.violation !== undefined) return Either.left(this.violation)
    if (!this.preambleChecked) {
      if (this.pending.length < Preamble.length) return Either.right(undefined)
      if (this.pending.compare(Preamble, 0, Preamble.length, 0, Preamble.length) !== 0) {
        return this.fail(describePreamble(this.pending.subarray(0, Preamble.length)))
      }
      this.preambleChecked = true
      this.pending = this.pending.subarray(Preamble.length)
    }
    if (this.pending.length < 4) return Either.right(undefined)
    const length = this.pending.readUInt32BE(0)
    if (length > MaxHandshakeMessageBytes) return this.fail(`its handshake message announces ${length} bytes`)
    if (this.pending.length < 4 + length) return Either.right(undefined)
    const decoded = decodeMessage(this.pending.toString("utf8", 4, 4 + length))
    this.pending = this.pending.subarray(4 + length)
    return Either.isLeft(decoded) ? this.fail("it sent a malformed handshake message") : Either.right(decoded.right)
  }

  /** What arrived after the last message read: the first bytes of the frames. */
  rest(): Buffer {
    return this.pending
  }

  private fail(reason: string): Either.Either<never, string> {
    this.violation = reason
    return Either.left(reason)
  }
}

/** A fresh nonce. */
export const makeNonce = (): string => Crypto.randomBytes(32).toString("base64")

/** The names and nonces both proofs of one handshake cover. */
export interface ProofInput {
  readonly dialerNode: string
  readonly listenerNode: string
  readonly dialerNonce: string
  readonly listenerNonce: string
}

/** One side's proof that it holds `secret`, bound to this handshake. */
export const proofOf = (secret: Uint8Array, role: "dialer" | "listener", input: ProofInput): string =>
  Crypto.createHmac("sha256", secret)
    .update(JSON.stringify(["effrel/2", role, input.dialerNode, input.listenerNode, input.dialerNonce, input.listenerNonce]))
    .digest("base64")

/** Whether `proof` is the right one (compared in constant time). */
export const proofMatches = (secret: Uint8Array, role: "dialer" | "listener", input: ProofInput, proof: string): boolean => {
  const expected = Buffer.from(proofOf(secret, role, input), "base64")
  const got = Buffer.from(proof, "base64")
  return got.length === expected.length && Crypto.timingSafeEqual(got, expected)
}

/** The listener's rule for a Hello: why it is refused, or `undefined` to go on. */
export const checkHello = (message: HandshakeMessage, auth: Auth, isNodeName: (node: string) => boolean): string | undefined => {
  if (message._tag === "Refused") return `it refused this node: ${message.reason}`
  if (message._tag !== "Hello") return `it opened with ${message._tag} instead of Hello`
  if (message.auth === "sharedSecret" && auth === "none") return "it uses a shared secret and this node has none"
  if (message.auth === "none" && auth === "sharedSecret") return "it has no shared secret and this node requires one"
  if (message.auth === "sharedSecret" && message.nonce === undefined) return "its Hello carries no nonce"
  if (!isNodeName(message.node)) return `its node name ${JSON.stringify(message.node)} is not host:port`
  return undefined
}

/** The dialer's rule for the listener's first answer: why the handshake ends, or `undefined` to go on. */
export const checkWelcome = (message: HandshakeMessage, auth: Auth): string | undefined => {
  if (message._tag === "Refused") return `refused by the peer: ${message.reason}`
  if (message._tag !== "Welcome") return `it answered with ${message._tag} instead of Welcome`
  if (auth === "sharedSecret" && (message.nonce === undefined || message.proof === undefined)) {
    return "it does not use a shared secret and this node requires one"
  }
  if (auth === "none" && message.proof !== undefined) return "it uses a shared secret and this node has none"
  return undefined
}
