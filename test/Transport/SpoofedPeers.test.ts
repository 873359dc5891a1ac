/**
 * Peers that lie on the socket transport, on 127.0.0.1: lookups in other nodes' names or with
 * oversized ids, lookup replies where no question went, envelopes in another node's name, and
 * bytes that are not frames at all. None makes the node dial anyone, grow, or deliver what it
 * should not; a flow between two honest nodes keeps moving meanwhile and loses nothing.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either } from "effect"
import * as Net from "node:net"
import { systemAddress } from "../../src/internal/NodeLookup.js"
import type { Envelope, WireMessage } from "../../src/Protocol/WireMessage.js"
import { FrameReader, makeBodyDecoder } from "../../src/Transport/internal/FrameCodec.js"
import { encodeMessage } from "../../src/Transport/internal/HandshakeProtocol.js"
import * as SocketTransport from "../../src/Transport/SocketTransport.js"
import { honestFlow } from "../support/HonestFlow.js"
import { startNode, waitUntil } from "../support/Nodes.js"
import { host, lengthPrefix, rawClient, rawPeer } from "../support/RawPeer.js"

const frame = (envelope: Envelope): Buffer => Buffer.from(Either.getOrThrow(SocketTransport.encodeEnvelope(envelope)))

const lookup = (fromNode: string, toNode: string, requestId: string): Buffer =>
  frame({ from: systemAddress(fromNode), to: systemAddress(toNode), message: { _tag: "Lookup", requestId, name: "orders-in" } })

/** A listener that only counts who connects to it: a node named in spoofed messages. */
const trapListener = Effect.acquireRelease(
  Effect.async<{ readonly server: Net.Server; readonly port: number; readonly connections: () => number }>((resume) => {
    let connections = 0
    const server = Net.createServer((socket) => {
      connections++
      socket.destroy()
    })
    server.listen(0, host, () => resume(Effect.succeed({ server, port: (server.address() as Net.AddressInfo).port, connections: () => connections })))
  }),
  ({ server }) => Effect.sync(() => server.close())
)

/**
 * A fake node that welcomes whoever dials it and answers each lookup with the reply `answer`
 * makes of it (or none).
 */
const fakeNode = (answer: (request: Envelope, node: string) => Envelope | undefined) =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: Net.Server; readonly node: string }>((resume) => {
      const server = Net.createServer((socket) => {
        socket.on("error", () => {})
        const node = `${host}:${(server.address() as Net.AddressInfo).port}`
        const reader = new FrameReader(1024 * 1024)
        const decode = makeBodyDecoder()
        socket.once("data", () => {
          socket.write(encodeMessage({ _tag: "Welcome", node }, true))
          socket.on("data", (chunk: Buffer) =>
            void reader.push(chunk, (buffer, start, end, owned) => {
              const request = decode(buffer, start, end, owned)
              const reply = request === undefined ? undefined : answer(request, node)
              if (reply !== undefined) socket.write(frame(reply))
            }))
        })
      })
      server.listen(0, host, () => resume(Effect.succeed({ server, node: `${host}:${(server.address() as Net.AddressInfo).port}` })))
    }),
    ({ server }) => Effect.sync(() => server.close())
  )

const range = (count: number) => Array.from({ length: count }, (_, index) => index)

describe("SocketTransport against peers that lie", () => {
  it.scopedLive("spoofed lookups: none in another node's name is answered or dials it; oversized ids are malformed; unread answers stop at replyBufferBytes", () =>
    Effect.gen(function*() {
      const b = yield* startNode({ transport: { replyBufferBytes: 256 * 1024 } })
      const a = yield* startNode()
      const flow = yield* honestFlow(a.transport, b.transport)
      const trap = yield* trapListener
      const attacker = yield* rawPeer(b.port, "127.0.0.2:7", "127.0.0.2")
      // It never reads what b sends back.
      attacker.socket.pause()

      // 2,000 lookups asking b to answer other nodes: the trap, and 1,999 invented ones.
      attacker.socket.write(Buffer.concat(range(2000).map((index) =>
        lookup(index === 0 ? `${host}:${trap.port}` : `spoof-${index}.example:${1024 + index}`, b.node, `r-${index}`)
      )))
      yield* waitUntil("the spoofed lookups to be dropped", () => b.transport.stats().droppedSpoofed === 2000)

      // 40 lookups in its own name with a 4 MiB request id.
      const oversized = lookup("127.0.0.2:7", b.node, "x".repeat(4 * 1024 * 1024))
      for (let index = 0; index < 40; index++) attacker.socket.write(oversized)
      yield* waitUntil("the oversized lookups to be counted as malformed", () => b.transport.stats().malformed === 40)

      // 20,000 honest-looking lookups whose answers it never reads.
      const id = "i".repeat(200)
      attacker.socket.write(Buffer.concat(range(20_000).map((index) => lookup("127.0.0.2:7", b.node, `${id}-${index}`))))
      yield* waitUntil("every lookup to be served", () => b.system.internal.lookupStats().served === 20_000, Duration.seconds(30))
      yield* flow.progresses()

      const stats = b.transport.stats()
      console.log(
        `spoofed lookups: ${stats.droppedSpoofed} in other nodes' names dropped, ${stats.malformed} oversized ids malformed, ` +
          `${stats.droppedOverflow} of 20,000 unread answers dropped at replyBufferBytes; peers known ${stats.knownPeers}, trap dialed ${trap.connections()} times`
      )
      expect(stats.droppedOverflow).toBeGreaterThan(0)
      expect(stats).toMatchObject({ knownPeers: 0, connectionsOpened: 0 })
      expect(trap.connections()).toBe(0)
      yield* flow.check
    }))

  it.scopedLive("a lookup reply counts only on the connection that asked and from the node asked; an envelope in another node's name is dropped", () =>
    Effect.gen(function*() {
      const b = yield* startNode({ lookupTimeout: Duration.millis(300) })
      const a = yield* startNode()
      const flow = yield* honestFlow(a.transport, b.transport)
      const record = { kind: "Producer" as const }

      // Over a connection b accepted: replies nobody asked for, and messages in another node's name.
      const attacker = yield* rawPeer(b.port, "127.0.0.2:7", "127.0.0.2")
      const reply: WireMessage = { _tag: "LookupReply", requestId: "guess", record }
      attacker.socket.write(frame({ from: systemAddress("127.0.0.2:7"), to: systemAddress(b.node), message: reply }))
      attacker.socket.write(frame({ from: systemAddress(a.node), to: systemAddress(b.node), message: reply }))
      attacker.socket.write(frame({
        from: { node: a.node, endpoint: "honest-out", incarnation: "i-1" },
        to: { node: b.node, endpoint: "honest-in", incarnation: "i-1" },
        message: { _tag: "RegisterConsumer", nonce: "n-1" }
      }))
      yield* waitUntil("the three to be dropped", () => b.transport.stats().droppedSpoofed === 3)

      // Over a connection b dialed to ask: a reply in another node's name is dropped...
      let spoof = true
      const fake = yield* fakeNode((request, node) =>
        request.message._tag !== "Lookup" ? undefined : {
          from: systemAddress(spoof ? "127.0.0.1:1" : node),
          to: request.from,
          message: { _tag: "LookupReply", requestId: request.message.requestId, record }
        })
      expect(yield* b.system.internal.lookup("orders-in", fake.node)).toBeUndefined()
      expect(b.transport.stats().droppedSpoofed).toBe(4)
      // ...and the same reply from the node asked is the answer.
      spoof = false
      expect(yield* b.system.internal.lookup("orders-in", fake.node)).toMatchObject({ kind: "Producer" })
      yield* flow.progresses()
      yield* flow.check
    }))

  it.scopedLive("garbage, a 0xFFFFFFFF length, a truncated frame and 20,001 well-framed invalid messages close or cost only their own connection", () =>
    Effect.gen(function*() {
      const b = yield* startNode()
      const a = yield* startNode()
      const flow = yield* honestFlow(a.transport, b.transport)
      // Garbage instead of a handshake (from a fixed seed, so a failure replays).
      const seed = 17017
      let state = seed
      const garbage = Buffer.from(range(4096).map(() => (state = (state * 1103515245 + 12345) & 0x7fffffff) & 0xff))
      console.log(`garbage bytes from seed ${seed}`)
      const noise = yield* rawClient(b.port, "127.0.0.2")
      noise.socket.write(garbage)
      // After a handshake: a length no frame may have, and a frame cut short by a hang-up.
      const huge = yield* rawPeer(b.port, "127.0.0.2:7", "127.0.0.2")
      huge.socket.write(Buffer.from([0xff, 0xff, 0xff, 0xff, 1, 2, 3]))
      const truncated = yield* rawPeer(b.port, "127.0.0.2:8", "127.0.0.2")
      truncated.socket.write(Buffer.concat([lengthPrefix(1000), Buffer.alloc(500)]))
      yield* waitUntil("the garbage and the huge length to be refused", () => noise.closed() && huge.closed())
      truncated.socket.destroy()
      // 20,001 frames that decode to nothing valid, on a connection that stays open.
      const invalid = yield* rawPeer(b.port, "127.0.0.2:9", "127.0.0.2")
      const body = Buffer.from("not an envelope")
      invalid.socket.write(Buffer.concat(range(20_001).map(() => Buffer.concat([lengthPrefix(body.length), body]))))
      yield* waitUntil("every invalid message to be counted", () => b.transport.stats().malformed === 20_001)
      yield* flow.progresses()
      expect(invalid.closed()).toBe(false)
      expect(b.transport.stats()).toMatchObject({ handshakesRefused: 1, connectionsRejected: 1 })
      yield* waitUntil("the truncated frame to be let go", () => b.transport.stats().inboundBufferedBytes < 1000)
      yield* flow.check
    }))
})
