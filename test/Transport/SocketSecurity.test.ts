/**
 * Peer authentication on the socket transport, over real sockets on 127.0.0.1: mutual TLS
 * (certificates made with `openssl` in a temp dir for this file), the shared-secret handshake,
 * and the address check that stands in for authentication without either. Every refusal is
 * counted on both sides, logged with its reason, and ends well before `connectTimeout`.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Chunk, Duration, Effect, Logger, Queue, Schedule } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Tls from "node:tls"
import type { ControllerAddress } from "../../src/Protocol/Address.js"
import type { Envelope } from "../../src/Protocol/WireMessage.js"
import * as SocketTransport from "../../src/Transport/SocketTransport.js"
import { makeCa } from "../support/Certificates.js"
import type { NodeCertificate, TestCa } from "../support/Certificates.js"
import { encodeMessage } from "../../src/Transport/internal/HandshakeProtocol.js"
import { host, rawClient } from "../support/RawPeer.js"

let dir: string
let ca: TestCa
let otherCa: TestCa
let nodeCert: NodeCertificate
let otherNodeCert: NodeCertificate

beforeAll(() => {
  dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-reliable-tls-"))
  ca = makeCa(dir, "test-ca")
  otherCa = makeCa(dir, "other-ca")
  nodeCert = ca.issue("node", ["IP:127.0.0.1", "DNS:localhost"])
  otherNodeCert = otherCa.issue("intruder", ["IP:127.0.0.1"])
})
afterAll(() => Fs.rmSync(dir, { recursive: true, force: true }))

const tls = (certificate: NodeCertificate, trusted: string, allowedNames?: ReadonlyArray<string>): SocketTransport.SocketTlsOptions => ({
  certificate: certificate.certificate,
  privateKey: certificate.privateKey,
  ca: trusted,
  ...(allowedNames === undefined ? {} : { allowedNames })
})

// A long connect timeout: a refusal that waited for it would fail the "promptly" bounds below.
const make = (options: Partial<SocketTransport.SocketTransportOptions> = {}) =>
  SocketTransport.makeSocket({ host, port: 0, reconnect: Schedule.spaced(Duration.millis(50)), connectTimeout: Duration.seconds(20), ...options })

/** A transport whose log lines land in `lines`. */
const makeLogged = (lines: Array<string>, options: Partial<SocketTransport.SocketTransportOptions> = {}) =>
  make(options).pipe(
    Effect.provide(Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => {
      lines.push(Array.isArray(message) ? message.join(" ") : String(message))
    })))
  )

const address = (node: string, endpoint: string): ControllerAddress => ({ node, endpoint, incarnation: "i-1" })

const envelope = (from: ControllerAddress, to: ControllerAddress, seq: number): Envelope => ({
  from,
  to,
  message: { _tag: "SequencedMessage", sessionId: "s-1", messageId: `m-${seq}`, seq, payload: new Uint8Array([seq & 0xff]) }
})

const waitUntil = (what: string, condition: () => boolean, timeout: Duration.DurationInput = Duration.seconds(5)) =>
  Effect.suspend(() => condition() ? Effect.void : Effect.fail("pending" as const)).pipe(
    Effect.retry(Schedule.spaced(Duration.millis(10))),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`timed out waiting for ${what}`) })
  )

const takeN = (inbox: Queue.Dequeue<Envelope>, count: number) =>
  Effect.gen(function*() {
    const out: Array<Envelope> = []
    while (out.length < count) out.push(...Chunk.toReadonlyArray(yield* Queue.takeBetween(inbox, 1, count - out.length)))
    return out
  }).pipe(Effect.timeoutFail({ duration: Duration.seconds(10), onTimeout: () => new Error(`timed out taking ${count} envelopes`) }))

/** Has `from` post to `to` until `to` refused it `times` times (each attempt must end well before connectTimeout). */
const refusedPromptly = (
  from: SocketTransport.SocketTransportService,
  to: SocketTransport.SocketTransportService,
  times = 2
) =>
  Effect.gen(function*() {
    const target = address(to.node, "consumer")
    from.post([envelope(address(from.node, "producer"), target, 1)])
    yield* waitUntil("both sides to count the refusal", () => to.stats().handshakesRefused >= times && from.stats().handshakesFailed >= times)
    expect(to.stats().delivered).toBe(0)
    expect(to.stats().connectionsAccepted).toBe(0)
    expect(from.stats().connectionsOpened).toBe(0)
  })

const contains = (lines: ReadonlyArray<string>, text: string) => lines.some((line) => line.includes(text))

describe("SocketTransport over mutual TLS", () => {
  it.scopedLive("two TLS nodes exchange envelopes both ways; TLS 1.3 is what runs", () =>
    Effect.gen(function*() {
      const a = yield* make({ tls: tls(nodeCert, ca.ca) })
      const b = yield* make({ tls: tls(nodeCert, ca.ca, ["node"]) })
      const atA = address(a.node, "producer")
      const atB = address(b.node, "consumer")
      const inboxA = yield* a.open(atA)
      const inboxB = yield* b.open(atB)
      a.post([1, 2, 3].map((seq) => envelope(atA, atB, seq)))
      b.post([envelope(atB, atA, 7)])
      expect((yield* takeN(inboxB, 3)).map((got) => got.message._tag === "SequencedMessage" && got.message.seq)).toEqual([1, 2, 3])
      expect((yield* takeN(inboxA, 1))[0].from).toEqual(atB)
      expect(a.stats()).toMatchObject({ connectionsOpened: 1, connectionsAccepted: 1, handshakesRefused: 0, handshakesFailed: 0 })

      // A raw TLS 1.2 client is turned away by the TLS layer itself.
      const tls12 = yield* Effect.async<string>((resume) => {
        const client = Tls.connect({ host, port: b.port, ca: ca.ca, maxVersion: "TLSv1.2" })
        const done = (outcome: string) => {
          client.destroy()
          resume(Effect.succeed(outcome))
        }
        client.on("error", (error) => done(String(error)))
        client.on("secureConnect", () => done("connected"))
      })
      expect(tls12).not.toBe("connected")
    }))

  it.scopedLive("a peer whose certificate another CA signed is refused, both ways, counted and logged on both sides", () =>
    Effect.gen(function*() {
      const bLines: Array<string> = []
      const intruderLines: Array<string> = []
      const b = yield* makeLogged(bLines, { tls: tls(nodeCert, ca.ca) })
      // Trusts b's CA, so the TLS handshake completes and b refuses it with a reason.
      const intruder = yield* makeLogged(intruderLines, { tls: tls(otherNodeCert, ca.ca) })
      yield* refusedPromptly(intruder, b)
      expect(contains(bLines, "its certificate is not signed by this node's CA")).toBe(true)
      expect(contains(intruderLines, `cannot connect to ${b.node}: refused by the peer: its certificate is not signed by this node's CA`)).toBe(true)

      // Trusts only its own CA: it refuses b's certificate itself.
      const stranger = yield* makeLogged(intruderLines, { tls: tls(otherNodeCert, otherCa.ca) })
      const before = b.stats().handshakesRefused
      yield* refusedPromptly(stranger, b, 1)
      yield* waitUntil("b to count the stranger", () => b.stats().handshakesRefused > before)
      expect(contains(intruderLines, "TLS handshake failed")).toBe(true)
    }))

  it.scopedLive("a node without TLS and a TLS node refuse each other with a clear log line and a count, and never hang", () =>
    Effect.gen(function*() {
      const plainLines: Array<string> = []
      const tlsLines: Array<string> = []
      const plain = yield* makeLogged(plainLines)
      const secure = yield* makeLogged(tlsLines, { tls: tls(nodeCert, ca.ca) })
      yield* refusedPromptly(plain, secure)
      expect(contains(tlsLines, "it does not speak TLS and this node requires TLS")).toBe(true)
      expect(contains(plainLines, `cannot connect to ${secure.node}: the peer closed the connection during the handshake`)).toBe(true)

      yield* refusedPromptly(secure, plain)
      expect(contains(plainLines, "it speaks TLS and this node runs without TLS")).toBe(true)
      expect(contains(tlsLines, `cannot connect to ${plain.node}: TLS handshake failed`)).toBe(true)
    }))

  it.scopedLive("a certificate must carry an allowed name, and name the host of the node its holder announces", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const b = yield* makeLogged(lines, { tls: tls(nodeCert, ca.ca, ["someone-else"]) })
      const a = yield* make({ tls: tls(nodeCert, ca.ca) })
      yield* refusedPromptly(a, b)
      expect(contains(lines, "its certificate names node, 127.0.0.1, localhost, none of them in allowedNames")).toBe(true)

      // Signed by the right CA, but for another host: it cannot speak for a node on 127.0.0.1.
      const elsewhere = ca.issue("elsewhere", ["DNS:elsewhere.example"])
      const c = yield* makeLogged(lines, { tls: tls(nodeCert, ca.ca) })
      const d = yield* make({ tls: tls(elsewhere, ca.ca) })
      yield* refusedPromptly(d, c)
      expect(contains(lines, `its certificate does not name the host of node ${d.node}`)).toBe(true)
    }))
})

describe("SocketTransport with a shared secret", () => {
  const secret = "correct horse battery staple"

  it.scopedLive("nodes holding the same secret exchange envelopes", () =>
    Effect.gen(function*() {
      const a = yield* make({ sharedSecret: secret })
      const b = yield* make({ sharedSecret: secret })
      const to = address(b.node, "consumer")
      const inbox = yield* b.open(to)
      a.post([envelope(address(a.node, "producer"), to, 1)])
      expect((yield* takeN(inbox, 1))[0].from.node).toBe(a.node)
      expect(b.stats()).toMatchObject({ connectionsAccepted: 1, handshakesRefused: 0 })
    }))

  it.scopedLive("a wrong secret is refused by both sides, counted and logged", () =>
    Effect.gen(function*() {
      const aLines: Array<string> = []
      const bLines: Array<string> = []
      const a = yield* makeLogged(aLines, { sharedSecret: "a different secret, 16+ bytes" })
      const b = yield* makeLogged(bLines, { sharedSecret: secret })
      yield* refusedPromptly(a, b)
      expect(contains(aLines, "its proof of the shared secret is wrong")).toBe(true)
      expect(contains(bLines, "refused this node: its proof of the shared secret is wrong")).toBe(true)
    }))

  it.scopedLive("a node without the secret and a node with it refuse each other", () =>
    Effect.gen(function*() {
      const plainLines: Array<string> = []
      const secretLines: Array<string> = []
      const plain = yield* makeLogged(plainLines)
      const holder = yield* makeLogged(secretLines, { sharedSecret: secret })
      yield* refusedPromptly(plain, holder)
      expect(contains(secretLines, "it has no shared secret and this node requires one")).toBe(true)
      expect(contains(plainLines, "refused by the peer: it has no shared secret and this node requires one")).toBe(true)
      yield* refusedPromptly(holder, plain)
      expect(contains(plainLines, "it uses a shared secret and this node has none")).toBe(true)
    }))
})

describe("SocketTransport without authentication", () => {
  /** Opens a raw connection that announces `node`; resolves with the server's first answer. */
  const announce = (port: number, node: string) =>
    Effect.gen(function*() {
      const client = yield* rawClient(port)
      client.socket.write(encodeMessage({ _tag: "Hello", node, auth: "none" }, true))
      yield* waitUntil("an answer", () => client.received().length > 12)
      return client.received().toString("utf8", 12)
    })

  it.scopedLive("a dialer may announce only a node whose host resolves to the address it connects from", () =>
    Effect.gen(function*() {
      const b = yield* make()
      expect(yield* announce(b.port, "10.9.8.7:4000")).toContain("does not resolve to 127.0.0.1")
      expect(yield* announce(b.port, "localhost:4000")).toContain("Welcome")
      expect(yield* announce(b.port, `${host}:4000`)).toContain("Welcome")
      expect(b.stats()).toMatchObject({ handshakesRefused: 1, connectionsAccepted: 2 })

      const trusting = yield* make({ verifyPeerHost: false })
      expect(yield* announce(trusting.port, "10.9.8.7:4000")).toContain("Welcome")
    }))

  it.scopedLive("bad TLS material and a short secret are refused at construction", () =>
    Effect.gen(function*() {
      const badTls = yield* Effect.flip(make({ tls: { certificate: "not a certificate", privateKey: "no", ca: ca.ca } }))
      expect(badTls).toMatchObject({ reason: "InvalidOptions" })
      expect(badTls.message).toContain("cannot load the TLS credentials")
      const shortSecret = yield* Effect.flip(make({ sharedSecret: "short" }))
      expect(shortSecret.message).toContain("sharedSecret must have at least 16 bytes")
      const badTimeout = yield* Effect.flip(make({ readTimeout: Duration.zero }))
      expect(badTimeout.message).toContain("readTimeout must be a positive duration")
      const smallBudget = yield* Effect.flip(make({ maxFrameSize: 4096, inboundBufferBytes: 4096 }))
      expect(smallBudget.message).toContain("inboundBufferBytes must be an integer >= 4100")
    }))
})
