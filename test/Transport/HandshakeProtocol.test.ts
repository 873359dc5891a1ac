/**
 * The connect handshake's pure rules: what a listener accepts in a Hello, what a dialer accepts
 * in an answer, what the shared-secret proofs bind, and how the reader takes bytes apart.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import {
  checkHello,
  checkWelcome,
  encodeMessage,
  HandshakeReader,
  makeNonce,
  MaxHandshakeMessageBytes,
  Preamble,
  proofMatches,
  proofOf
} from "../../src/Transport/internal/HandshakeProtocol.js"
import type { Auth, HandshakeMessage } from "../../src/Transport/internal/HandshakeProtocol.js"
import { parseNode } from "../../src/Transport/SocketTransport.js"

const isNodeName = (node: string) => parseNode(node) !== undefined
const nonce = "n".repeat(44)

describe("handshake rules", () => {
  const hellos: ReadonlyArray<readonly [string, HandshakeMessage, Auth, string | undefined]> = [
    ["a plain Hello to a plain node", { _tag: "Hello", node: "10.0.0.1:7401", auth: "none" }, "none", undefined],
    ["a Hello with a secret to a node with one", { _tag: "Hello", node: "10.0.0.1:7401", auth: "sharedSecret", nonce }, "sharedSecret", undefined],
    ["a Hello with a secret to a node without", { _tag: "Hello", node: "10.0.0.1:7401", auth: "sharedSecret", nonce }, "none", "it uses a shared secret and this node has none"],
    ["a plain Hello to a node with a secret", { _tag: "Hello", node: "10.0.0.1:7401", auth: "none" }, "sharedSecret", "it has no shared secret and this node requires one"],
    ["a secret Hello without its nonce", { _tag: "Hello", node: "10.0.0.1:7401", auth: "sharedSecret" }, "sharedSecret", "its Hello carries no nonce"],
    ["a node name that is not host:port", { _tag: "Hello", node: "not-a-node", auth: "none" }, "none", `its node name "not-a-node" is not host:port`],
    ["a refusal", { _tag: "Refused", reason: "untrusted" }, "none", "it refused this node: untrusted"],
    ["anything else first", { _tag: "Accepted" }, "none", "it opened with Accepted instead of Hello"]
  ]
  it.each(hellos)("listener: %s", (_, message, auth, expected) => {
    expect(checkHello(message, auth, isNodeName)).toBe(expected)
  })

  const answers: ReadonlyArray<readonly [string, HandshakeMessage, Auth, string | undefined]> = [
    ["a plain Welcome", { _tag: "Welcome", node: "10.0.0.2:7402" }, "none", undefined],
    ["a Welcome with nonce and proof", { _tag: "Welcome", node: "10.0.0.2:7402", nonce, proof: nonce }, "sharedSecret", undefined],
    ["a plain Welcome to a node with a secret", { _tag: "Welcome", node: "10.0.0.2:7402" }, "sharedSecret", "it does not use a shared secret and this node requires one"],
    ["a Welcome with a proof to a node without a secret", { _tag: "Welcome", node: "10.0.0.2:7402", nonce, proof: nonce }, "none", "it uses a shared secret and this node has none"],
    ["a refusal", { _tag: "Refused", reason: "over the cap" }, "none", "refused by the peer: over the cap"],
    ["anything else", { _tag: "Hello", node: "10.0.0.2:7402", auth: "none" }, "none", "it answered with Hello instead of Welcome"]
  ]
  it.each(answers)("dialer: %s", (_, message, auth, expected) => {
    expect(checkWelcome(message, auth)).toBe(expected)
  })
})

describe("shared-secret proofs", () => {
  const secret = Buffer.from("a secret of at least 16 bytes")
  const input = { dialerNode: "10.0.0.1:1", listenerNode: "10.0.0.2:2", dialerNonce: makeNonce(), listenerNonce: makeNonce() }

  it("a proof matches only its own secret, role, names and nonces", () => {
    const proof = proofOf(secret, "dialer", input)
    expect(proofMatches(secret, "dialer", input, proof)).toBe(true)
    expect(proofMatches(Buffer.from("another secret of 16+ bytes"), "dialer", input, proof)).toBe(false)
    // Reflected back as the other role's proof.
    expect(proofMatches(secret, "listener", input, proof)).toBe(false)
    expect(proofMatches(secret, "dialer", { ...input, dialerNode: "10.0.0.3:1" }, proof)).toBe(false)
    expect(proofMatches(secret, "dialer", { ...input, listenerNonce: makeNonce() }, proof)).toBe(false)
    expect(proofMatches(secret, "dialer", input, "short")).toBe(false)
  })

  it("nonces are fresh", () => {
    expect(new Set(Array.from({ length: 100 }, makeNonce)).size).toBe(100)
  })
})

describe("HandshakeReader", () => {
  const hello: HandshakeMessage = { _tag: "Hello", node: "10.0.0.1:7401", auth: "none" }

  const read = (bytes: Buffer, step = bytes.length) => {
    const reader = new HandshakeReader()
    let last: Either.Either<HandshakeMessage | undefined, string> = Either.right(undefined)
    for (let offset = 0; offset < bytes.length; offset += step) {
      reader.push(bytes.subarray(offset, offset + step))
      last = reader.next()
    }
    return { last }
  }

  it("reads the preamble and a message split at every byte, and keeps what follows for the frames", () => {
    const bytes = Buffer.concat([encodeMessage(hello, true), Buffer.from([9, 9, 9])])
    for (const step of [1, 2, 5, bytes.length]) {
      const reader = new HandshakeReader()
      let message: HandshakeMessage | undefined
      let end = 0
      while (message === undefined) {
        reader.push(bytes.subarray(end, end + step))
        end += step
        message = Either.getOrThrow(reader.next())
      }
      expect(message).toEqual(hello)
      expect([...reader.rest(), ...bytes.subarray(end)]).toEqual([9, 9, 9])
    }
  })

  const strangers: ReadonlyArray<readonly [string, Buffer, string]> = [
    ["a TLS ClientHello", Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc]), "it speaks TLS and this node runs without TLS"],
    ["a TLS alert", Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46, 0x00]), "it answered with a TLS alert and this node runs without TLS"],
    ["an older protocol", Buffer.from("effrel/1xxxxxx"), `it speaks protocol "effrel/1" and this node "effrel/2"`],
    ["HTTP", Buffer.from("GET / HTTP/1.1\r\n\r\n"), "it is not an effect-reliable node (unknown first bytes)"]
  ]
  it.each(strangers)("names a stranger's first bytes: %s", (_, bytes, reason) => {
    expect(read(bytes).last).toEqual(Either.left(reason))
  })

  it("refuses a message over the size limit, a malformed one, and more than one message at a time", () => {
    const huge = Buffer.alloc(4)
    huge.writeUInt32BE(MaxHandshakeMessageBytes + 1)
    expect(read(Buffer.concat([Preamble, huge])).last).toEqual(Either.left(`its handshake message announces ${MaxHandshakeMessageBytes + 1} bytes`))
    const json = Buffer.from(JSON.stringify({ _tag: "Hello", node: 7 }))
    const length = Buffer.alloc(4)
    length.writeUInt32BE(json.length)
    expect(read(Buffer.concat([Preamble, length, json])).last).toEqual(Either.left("it sent a malformed handshake message"))
    const flood = new HandshakeReader()
    flood.push(Buffer.concat([encodeMessage(hello, true), Buffer.alloc(2 * MaxHandshakeMessageBytes)]))
    expect(flood.next()).toEqual(Either.left("it sent more than one handshake message at a time"))
  })
})
