/**
 * The two halves of the connect handshake (messages and rules in `HandshakeProtocol.ts`): the
 * dialer introduces its node, the listener checks it and welcomes it or refuses it. A side that
 * refuses tells the other why before it hangs up, so both logs say the same thing. On success
 * each half hands the connection to `frames`, which makes the reader of the frames that follow
 * for the peer's node name.
 */
import { Effect } from "effect"
import type { Connection } from "./Connection.js"
import { HandshakeFailure } from "./Connection.js"
import { checkHello, checkWelcome, makeNonce, proofMatches, proofOf } from "./HandshakeProtocol.js"
import type { Auth, Hello, ProofInput } from "./HandshakeProtocol.js"

/** This node, as the handshake presents it. */
export interface HandshakeSelf {
  readonly node: string
  /** The shared secret, when the deployment uses one. */
  readonly secret: Uint8Array | undefined
}

const authOf = (self: HandshakeSelf): Auth => self.secret === undefined ? "none" : "sharedSecret"

const fail = (reason: string) => Effect.fail(new HandshakeFailure({ reason }))

const WrongSecret = "its proof of the shared secret is wrong (the nodes hold different secrets)"

/** Reads the frames of the peer named `node`. */
export type FrameReaderFor = (node: string) => (chunk: Buffer) => void

/** The dialer's half; succeeds with the node name the listener announced. */
export const introduce = (connection: Connection, self: HandshakeSelf, frames: FrameReaderFor): Effect.Effect<string, HandshakeFailure> =>
  Effect.gen(function*() {
    const auth = authOf(self)
    const dialerNonce = self.secret === undefined ? undefined : makeNonce()
    connection.send({ _tag: "Hello", node: self.node, auth, ...(dialerNonce === undefined ? {} : { nonce: dialerNonce }) }, true)
    const answer = yield* connection.receive()
    const problem = checkWelcome(answer, auth)
    if (problem !== undefined || answer._tag !== "Welcome") return yield* fail(problem ?? "no Welcome")
    if (self.secret === undefined || dialerNonce === undefined) {
      connection.serve(frames(answer.node))
      return answer.node
    }
    const input: ProofInput = { dialerNode: self.node, listenerNode: answer.node, dialerNonce, listenerNonce: answer.nonce! }
    if (!proofMatches(self.secret, "listener", input, answer.proof!)) {
      yield* connection.refuse(WrongSecret, false)
      return yield* fail(WrongSecret)
    }
    connection.send({ _tag: "Proof", proof: proofOf(self.secret, "dialer", input) })
    const verdict = yield* connection.receive()
    if (verdict._tag === "Refused") return yield* fail(`refused by the peer: ${verdict.reason}`)
    if (verdict._tag !== "Accepted") return yield* fail(`it answered the proof with ${verdict._tag} instead of Accepted`)
    connection.serve(frames(answer.node))
    return answer.node
  })

/**
 * The listener's half. `vet` adds this node's checks of the announced name (its certificate, or
 * the address it connects from) and returns why it is refused, if it is. Succeeds with the
 * dialer's node name.
 */
export const welcome = (
  connection: Connection,
  self: HandshakeSelf,
  isNodeName: (node: string) => boolean,
  vet: (hello: Hello) => Effect.Effect<string | undefined>,
  frames: FrameReaderFor
): Effect.Effect<string, HandshakeFailure> =>
  Effect.gen(function*() {
    const hello = yield* connection.receive()
    const problem = checkHello(hello, authOf(self), isNodeName) ?? (hello._tag === "Hello" ? yield* vet(hello) : undefined)
    if (problem !== undefined || hello._tag !== "Hello") {
      yield* connection.refuse(problem ?? "no Hello", true)
      return yield* fail(problem ?? "no Hello")
    }
    if (self.secret === undefined || hello.nonce === undefined) {
      connection.serve(frames(hello.node), { message: { _tag: "Welcome", node: self.node }, withPreamble: true })
      return hello.node
    }
    const input: ProofInput = { dialerNode: hello.node, listenerNode: self.node, dialerNonce: hello.nonce, listenerNonce: makeNonce() }
    connection.send({ _tag: "Welcome", node: self.node, nonce: input.listenerNonce, proof: proofOf(self.secret, "listener", input) }, true)
    const answer = yield* connection.receive()
    if (answer._tag === "Refused") return yield* fail(`it refused this node: ${answer.reason}`)
    if (answer._tag !== "Proof" || !proofMatches(self.secret, "dialer", input, answer.proof)) {
      yield* connection.refuse(WrongSecret, false)
      return yield* fail(WrongSecret)
    }
    connection.serve(frames(hello.node), { message: { _tag: "Accepted" }, withPreamble: false })
    return hello.node
  })
