import { describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Duration, Effect, Either, Exit, Layer, Queue, Schedule, Scope } from "effect"
import * as Net from "node:net"
import { systemAddress } from "../../src/internal/NodeLookup.js"
import type { ControllerAddress } from "../../src/Protocol/Address.js"
import type { Envelope, WireMessage } from "../../src/Protocol/WireMessage.js"
import * as FaultyTransport from "../../src/Transport/FaultyTransport.js"
import { FrameReader, makeBodyDecoder } from "../../src/Transport/internal/FrameCodec.js"
import { encodeMessage } from "../../src/Transport/internal/HandshakeProtocol.js"
import * as SocketTransport from "../../src/Transport/SocketTransport.js"
import { Transport } from "../../src/Transport/Transport.js"
import type { TransportService } from "../../src/Transport/Transport.js"
import { startNode } from "../support/Nodes.js"
import { lengthPrefix, rawClient, rawPeer } from "../support/RawPeer.js"

const host = "127.0.0.1"
const fastReconnect = Schedule.spaced(Duration.millis(20))

const address = (node: string, endpoint: string, incarnation = "i-1"): ControllerAddress => ({
  node,
  endpoint,
  incarnation
})

const sequenced = (from: ControllerAddress, to: ControllerAddress, seq: number, payload?: Uint8Array): Envelope => ({
  from,
  to,
  message: {
    _tag: "SequencedMessage",
    sessionId: "s-1",
    messageId: `m-${seq}`,
    seq,
    payload: payload ?? new TextEncoder().encode(`payload ${seq}`)
  }
})

const seqOf = (envelope: Envelope): number => envelope.message._tag === "SequencedMessage" ? envelope.message.seq : -1

/** Retries `condition` on a short schedule until it holds; fails after `timeout`. */
const waitUntil = (what: string, condition: () => boolean, timeout: Duration.DurationInput = Duration.seconds(10)) =>
  Effect.suspend(() => condition() ? Effect.void : Effect.fail("pending" as const)).pipe(
    Effect.retry(Schedule.spaced(Duration.millis(5))),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`timed out waiting for ${what}`) })
  )

/** Takes exactly `count` envelopes from an inbox, or fails after `timeout`. */
const takeN = (inbox: Queue.Dequeue<Envelope>, count: number, timeout: Duration.DurationInput = Duration.seconds(10)) =>
  Effect.gen(function*() {
    const out: Array<Envelope> = []
    while (out.length < count) out.push(...Chunk.toReadonlyArray(yield* Queue.takeBetween(inbox, 1, count - out.length)))
    return out
  }).pipe(Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`timed out taking ${count} envelopes`) }))

const make = (options: Partial<SocketTransport.SocketTransportOptions> = {}) =>
  SocketTransport.makeSocket({ host, port: 0, reconnect: fastReconnect, ...options })

const frameOf = (envelope: Envelope): Uint8Array => Either.getOrThrow(SocketTransport.encodeEnvelope(envelope))

describe("SocketTransport", () => {
  it.scopedLive("names itself by the bound port and exchanges envelopes both ways", () =>
    Effect.gen(function*() {
      const a = yield* make()
      const b = yield* make()
      expect(a.node).toBe(`${host}:${a.port}`)
      expect(a.port).toBeGreaterThan(0)
      const atA = address(a.node, "producer")
      const atB = address(b.node, "consumer")
      const inboxA = yield* a.open(atA)
      const inboxB = yield* b.open(atB)

      const payload = new Uint8Array([0, 1, 2, 250, 255])
      const toB: Envelope = sequenced(atA, atB, 1, payload)
      const chunked: Envelope = {
        from: atA,
        to: atB,
        message: { _tag: "SequencedMessage", sessionId: "s-1", messageId: "m-2", seq: 2, payload, chunk: { first: true, last: false } }
      }
      const messages: ReadonlyArray<WireMessage> = [
        { _tag: "RegisterConsumer", nonce: "n-1" },
        { _tag: "Request", sessionId: "s-1", nonce: "n-1", confirmedSeq: 0, requestUpToSeq: 50, viaTimeout: false },
        { _tag: "Ack", sessionId: "s-1", nonce: "n-1", confirmedSeq: 7 }
      ]
      a.post([toB, chunked])
      b.post(messages.map((message) => ({ from: atB, to: atA, message })))

      const gotB = yield* takeN(inboxB, 2)
      expect(gotB).toEqual([toB, chunked])
      expect(gotB[0].message._tag === "SequencedMessage" && gotB[0].message.payload).toBeInstanceOf(Uint8Array)
      const gotA = yield* takeN(inboxA, 3)
      expect(gotA.map((envelope) => envelope.message)).toEqual(messages)
      expect(gotA[0].from).toEqual(atB)

      b.post([{ from: atB, to: atA, message: { _tag: "RegistrationAck", sessionId: "s-1", nextSeq: 1, nonce: "n-1" } }])
      expect((yield* takeN(inboxA, 1))[0].message._tag).toBe("RegistrationAck")
      expect(a.stats()).toMatchObject({ delivered: 4, malformed: 0, connectionsOpened: 1, connectionsAccepted: 1 })
      expect(b.stats()).toMatchObject({ delivered: 2, malformed: 0, connectionsOpened: 1, connectionsAccepted: 1 })
    }))

  it.scopedLive("delivers many envelopes in order over one connection, several frames per write", () =>
    Effect.gen(function*() {
      const a = yield* make()
      const b = yield* make()
      const from = address(a.node, "producer")
      const to = address(b.node, "consumer")
      const inbox = yield* b.open(to)
      const total = 20_000
      for (let start = 1; start <= total; start += 500) {
        a.post(Array.from({ length: 500 }, (_, index) => sequenced(from, to, start + index)))
      }
      const got = yield* takeN(inbox, total, Duration.seconds(30))
      expect(got.map(seqOf)).toEqual(Array.from({ length: total }, (_, index) => index + 1))
      const stats = a.stats()
      expect(stats.framesSent).toBe(total)
      expect(stats.writes).toBeLessThan(total / 10)
      expect(stats.connectionsOpened).toBe(1)
      yield* waitUntil("the outgoing buffer to drain", () => a.stats().bufferedBytes === 0)
    }))

  it.scopedLive("routes envelopes for its own node locally and counts the undeliverable", () =>
    Effect.gen(function*() {
      const a = yield* make()
      const b = yield* make()
      const here = address(a.node, "consumer")
      const inbox = yield* a.open(here)
      a.post([sequenced(here, here, 1)])
      expect(seqOf((yield* takeN(inbox, 1))[0])).toBe(1)
      expect(a.stats()).toMatchObject({ delivered: 1, connectionsOpened: 0 })

      // no such inbox here, no such inbox there, and a node name that cannot be dialled
      a.post([sequenced(here, address(a.node, "nobody"), 1)])
      a.post([sequenced(here, address(b.node, "nobody"), 1)])
      a.post([sequenced(here, address("not-a-node", "nobody"), 1)])
      expect(a.stats().undeliverable).toBe(2)
      yield* waitUntil("the remote drop to be counted", () => b.stats().undeliverable === 1)
    }))

  it.scopedLive("delivers a payload spanning many socket reads intact", () =>
    Effect.gen(function*() {
      const a = yield* make()
      const b = yield* make()
      const to = address(b.node, "consumer")
      const inbox = yield* b.open(to)
      const payload = new Uint8Array(3 * 1024 * 1024).map((_, index) => (index * 31) & 0xff)
      a.post([sequenced(address(a.node, "producer"), to, 1, payload), sequenced(address(a.node, "producer"), to, 2)])
      const got = yield* takeN(inbox, 2)
      const message = got[0].message
      expect(message._tag === "SequencedMessage" && Buffer.compare(message.payload, payload)).toBe(0)
      expect(seqOf(got[1])).toBe(2)
    }))

  it.scopedLive("a sender of large frames gets a connection of its own: others' small frames do not wait behind its bytes", () =>
    Effect.gen(function*() {
      const a = yield* make()
      const b = yield* make()
      const to = address(b.node, "consumer")
      const inbox = yield* b.open(to)
      const bulk = address(a.node, "big-producer")
      const small = address(a.node, "small-producer")
      const chunk = new Uint8Array(256 * 1024).fill(7)
      // Both connections up first (the bulk one opens with the first large frame).
      a.post([sequenced(small, to, 1), sequenced(bulk, to, 1, chunk)])
      yield* takeN(inbox, 2)
      expect(a.stats().connectionsOpened).toBe(2)
      // 10 MiB of one sender's chunks, its own small frame after them, then another sender's small frame.
      a.post(Array.from({ length: 40 }, (_, index) => sequenced(bulk, to, 2 + index, chunk)))
      a.post([sequenced(bulk, to, 42)])
      a.post([sequenced(small, to, 2)])
      const got = yield* takeN(inbox, 42)
      const from = (who: ControllerAddress) => got.flatMap((envelope, position) => envelope.from.endpoint === who.endpoint ? [[position, seqOf(envelope)]] : [])
      // The bulk sender's frames keep their order, its trailing small frame included.
      expect(from(bulk).map(([, seq]) => seq)).toEqual(Array.from({ length: 41 }, (_, index) => 2 + index))
      // The other sender's frame overtook most of the 10 MiB.
      const [[position]] = from(small)
      expect(position).toBeLessThan(20)
      expect(a.stats().connectionsOpened).toBe(2)
    }))

  it.scopedLive("buffers while the peer is down and reconnects when it comes back on the same port", () =>
    Effect.gen(function*() {
      const a = yield* make()
      const bScope = yield* Scope.make()
      const b1 = yield* Scope.extend(make(), bScope)
      const port = b1.port
      const from = address(a.node, "producer")
      const to = address(b1.node, "consumer")
      const inbox1 = yield* Scope.extend(b1.open(to), bScope)
      a.post([sequenced(from, to, 1)])
      expect(seqOf((yield* takeN(inbox1, 1))[0])).toBe(1)

      yield* Scope.close(bScope, Exit.void)
      // The sender notices the loss; what it posts now waits in its buffer.
      yield* waitUntil("the sender to notice the loss", () => a.stats().connectedPeers === 0)
      a.post([2, 3, 4].map((seq) => sequenced(from, to, seq)))
      expect(a.stats().bufferedBytes).toBeGreaterThan(0)

      const b2 = yield* make({ port })
      expect(b2.node).toBe(b1.node)
      const inbox2 = yield* b2.open(to)
      const got = yield* takeN(inbox2, 3)
      expect(got.map(seqOf)).toEqual([2, 3, 4])
      expect(a.stats().connectionsOpened).toBe(2)
    }))

  it.scopedLive("delivers envelopes posted before the peer ever listened", () =>
    Effect.gen(function*() {
      const probeScope = yield* Scope.make()
      const port = (yield* Scope.extend(make(), probeScope)).port
      yield* Scope.close(probeScope, Exit.void)

      const a = yield* make()
      const to = address(`${host}:${port}`, "consumer")
      a.post(Array.from({ length: 10 }, (_, index) => sequenced(address(a.node, "producer"), to, index + 1)))
      const b = yield* make({ port })
      const inbox = yield* b.open(to)
      expect((yield* takeN(inbox, 10)).map(seqOf)).toEqual(Array.from({ length: 10 }, (_, index) => index + 1))
    }))

  it.scopedLive("drops what was buffered for a peer once the reconnect schedule gives up", () =>
    Effect.gen(function*() {
      const probeScope = yield* Scope.make()
      const port = (yield* Scope.extend(make(), probeScope)).port
      yield* Scope.close(probeScope, Exit.void)

      const a = yield* make({ reconnect: Schedule.recurs(2).pipe(Schedule.addDelay(() => Duration.millis(10))) })
      const to = address(`${host}:${port}`, "consumer")
      a.post([1, 2, 3].map((seq) => sequenced(address(a.node, "producer"), to, seq)))
      yield* waitUntil("the peer to be abandoned", () => a.stats().droppedUnreachable === 3)
      expect(a.stats().bufferedBytes).toBe(0)
    }))

  it.scopedLive("forgets a peer nothing is posted to: an unreachable one stops being redialed, an idle connection closes", () =>
    Effect.gen(function*() {
      const probeScope = yield* Scope.make()
      const port = (yield* Scope.extend(make(), probeScope)).port
      yield* Scope.close(probeScope, Exit.void)

      // The default schedule never ends: only going unused ends the redialing.
      const a = yield* SocketTransport.makeSocket({ host, port: 0, idleTimeout: Duration.millis(400), maxPeers: 3 })
      const from = address(a.node, "producer")
      const down = address(`${host}:${port}`, "consumer")
      a.post([sequenced(from, down, 1)])
      expect(a.stats().knownPeers).toBe(1)
      yield* waitUntil("the unused peer to be forgotten", () => a.stats().knownPeers === 0)
      expect(a.stats()).toMatchObject({ droppedUnreachable: 1, bufferedBytes: 0 })

      // Posting keeps a peer: it is redialed for as long as something needs it.
      const kept = Effect.repeat(Effect.sync(() => a.post([sequenced(from, down, 2)])), Schedule.spaced(Duration.millis(50)))
      yield* Effect.raceFirst(kept, Effect.sleep(Duration.millis(1200)))
      expect(a.stats().knownPeers).toBe(1)
      yield* waitUntil("the peer to be forgotten once posts stop", () => a.stats().knownPeers === 0)

      // A reachable peer's connection closes after half the idle timeout without a post; a post brings it back.
      const b = yield* make()
      const to = address(b.node, "consumer")
      const inbox = yield* b.open(to)
      a.post([sequenced(from, to, 1)])
      yield* takeN(inbox, 1)
      yield* waitUntil("the idle connection to close and the peer to be forgotten", () => a.stats().knownPeers === 0 && a.stats().connectedPeers === 0)
      a.post([sequenced(from, to, 2)])
      expect(seqOf((yield* takeN(inbox, 1))[0])).toBe(2)
      expect(a.stats().connectionsOpened).toBe(2)

      // At most maxPeers peers at once (ports 1 to 4 refuse connections).
      yield* waitUntil("b's peer to be forgotten again", () => a.stats().knownPeers === 0)
      a.post([1, 2, 3, 4].map((index) => sequenced(from, address(`${host}:${index}`, "consumer"), 1)))
      expect(a.stats()).toMatchObject({ knownPeers: 3, droppedPeerLimit: 1 })
    }))

  it.scopedLive("refuses an oversized frame with a typed error and keeps the flow moving", () =>
    Effect.gen(function*() {
      const maxFrameSize = 4096
      const a = yield* make({ maxFrameSize })
      const b = yield* make({ maxFrameSize })
      const from = address(a.node, "producer")
      const to = address(b.node, "consumer")
      const inbox = yield* b.open(to)
      const big = sequenced(from, to, 1, new Uint8Array(maxFrameSize))

      const checked = SocketTransport.checkFrameSize(big, maxFrameSize)
      expect(Either.isLeft(checked)).toBe(true)
      if (Either.isLeft(checked)) {
        expect(checked.left).toBeInstanceOf(SocketTransport.FrameTooLarge)
        expect(checked.left._tag).toBe("FrameTooLarge")
        expect(checked.left.size).toBeGreaterThan(maxFrameSize)
        expect(checked.left.message).toContain("maxFrameSize 4096")
      }
      expect(Either.isLeft(SocketTransport.encodeEnvelope(big, maxFrameSize))).toBe(true)
      expect(SocketTransport.checkFrameSize(sequenced(from, to, 2), maxFrameSize)).toEqual(Either.right(expect.any(Number)))

      a.post([big, sequenced(from, to, 2)])
      expect(a.stats().refusedOversize).toBe(1)
      expect((yield* takeN(inbox, 1)).map(seqOf)).toEqual([2])
    }))

  it("checks frames against the 16 MiB default", () => {
    const from = address("127.0.0.1:1", "producer")
    const to = address("127.0.0.1:2", "consumer")
    const tooBig = SocketTransport.checkFrameSize(sequenced(from, to, 1, new Uint8Array(SocketTransport.MaxFrameSize)))
    expect(Either.isLeft(tooBig) && tooBig.left.maxFrameSize).toBe(16 * 1024 * 1024)
    const fits = SocketTransport.checkFrameSize(sequenced(from, to, 1, new Uint8Array(SocketTransport.MaxFrameSize - 64 * 1024)))
    expect(Either.isRight(fits)).toBe(true)
  })

  it.scopedLive("closes only the connection that announces an oversized frame", () =>
    Effect.gen(function*() {
      const a = yield* make({ maxFrameSize: 4096 })
      const b = yield* make({ maxFrameSize: 4096 })
      const from = address(a.node, "producer")
      const to = address(b.node, "consumer")
      const inbox = yield* b.open(to)
      a.post([sequenced(from, to, 1)])
      yield* takeN(inbox, 1)

      const raw = yield* rawPeer(b.port)
      raw.socket.write(Buffer.concat([lengthPrefix(4097), Buffer.alloc(100)]))
      yield* waitUntil("the offending connection to be closed", raw.closed)
      expect(b.stats().connectionsRejected).toBe(1)

      a.post([sequenced(from, to, 2)])
      expect((yield* takeN(inbox, 1)).map(seqOf)).toEqual([2])
      expect(a.stats().connectionsOpened).toBe(1)
    }))

  it.scopedLive("closes a connection that sends garbage and keeps serving a well-behaved peer", () =>
    Effect.gen(function*() {
      const a = yield* make()
      const b = yield* make()
      const from = address(a.node, "producer")
      const to = address(b.node, "consumer")
      const inbox = yield* b.open(to)

      const raw = yield* rawClient(b.port)
      raw.socket.write("GET / HTTP/1.1\r\nHost: example\r\n\r\n")
      yield* waitUntil("the garbage connection to be closed", raw.closed)
      expect(b.stats()).toMatchObject({ handshakesRefused: 1, delivered: 0 })

      const raw2 = yield* rawClient(b.port)
      raw2.socket.write(Buffer.from([0xff, 0x00, 0x13, 0x37, 0xde, 0xad, 0xbe, 0xef, 0x01]))
      yield* waitUntil("the second garbage connection to be closed", raw2.closed)

      a.post(Array.from({ length: 100 }, (_, index) => sequenced(from, to, index + 1)))
      expect((yield* takeN(inbox, 100)).map(seqOf)).toEqual(Array.from({ length: 100 }, (_, index) => index + 1))
      expect(b.stats().handshakesRefused).toBe(2)
    }))

  it.scopedLive("counts malformed but well-framed input and keeps the connection", () =>
    Effect.gen(function*() {
      const b = yield* make()
      const to = address(b.node, "consumer")
      const inbox = yield* b.open(to)
      const from = address("127.0.0.1:9", "producer")
      const good = frameOf(sequenced(from, to, 1))
      const garbageBody = Buffer.from("not an envelope at all")
      // A valid frame whose message fails the schema (seq 0 is not positive).
      const badSchema = Buffer.from(frameOf(sequenced(from, to, 1)))
      const badJson = Buffer.from(JSON.stringify({ _tag: "SequencedMessage", sessionId: "s-1", messageId: "m-1", seq: 1 }))
      const at = badSchema.indexOf(badJson)
      expect(at).toBeGreaterThan(0)
      badSchema.write(JSON.stringify({ _tag: "SequencedMessage", sessionId: "s-1", messageId: "m-1", seq: 0 }), at)

      const raw = yield* rawPeer(b.port, from.node)
      raw.socket.write(Buffer.concat([lengthPrefix(garbageBody.length), garbageBody]))
      raw.socket.write(badSchema)
      raw.socket.write(lengthPrefix(0))
      raw.socket.write(good)
      const got = yield* takeN(inbox, 1)
      expect(seqOf(got[0])).toBe(1)
      expect(b.stats()).toMatchObject({ malformed: 3, delivered: 1, connectionsRejected: 0 })
      expect(raw.closed()).toBe(false)
    }))

  it.scopedLive("bounds what it buffers for a peer that never reads, and still closes promptly", () =>
    Effect.gen(function*() {
      // A peer that welcomes the dialer and then never reads a byte.
      const accepted: Array<Net.Socket> = []
      const server = yield* Effect.acquireRelease(
        Effect.async<Net.Server>((resume) => {
          const server = Net.createServer((socket) => {
            socket.on("error", () => {})
            socket.once("data", () => {
              socket.pause()
              socket.write(encodeMessage({ _tag: "Welcome", node: `${host}:${(server.address() as Net.AddressInfo).port}` }, true))
            })
            accepted.push(socket)
          })
          server.listen(0, host, () => resume(Effect.succeed(server)))
        }),
        (server) =>
          Effect.sync(() => {
            accepted.forEach((socket) => socket.destroy())
            server.close()
          })
      )
      const port = (server.address() as Net.AddressInfo).port
      const cap = 256 * 1024
      const aScope = yield* Scope.make()
      const a = yield* Scope.extend(make({ maxFrameSize: 64 * 1024, outgoingBufferBytes: cap }), aScope)
      const from = address(a.node, "producer")
      const to = address(`${host}:${port}`, "consumer")
      const payload = new Uint8Array(4096)
      let seq = 0
      let peak = 0
      const post = (count: number) => {
        a.post(Array.from({ length: count }, () => sequenced(from, to, ++seq, payload)))
        peak = Math.max(peak, a.stats().bufferedBytes)
      }
      yield* waitUntil("the connection", () => {
        post(1)
        return a.stats().connectedPeers === 1
      })
      // Keep posting (far slower than loopback drains) until the cap bites: kernel buffers
      // absorb a few MB first, then the writer waits on a write that never completes.
      yield* waitUntil("the outgoing buffer to overflow", () => {
        post(16)
        return a.stats().droppedOverflow > 0
      }, Duration.seconds(30))
      expect(seq * payload.length).toBeGreaterThan(cap)
      const stats = a.stats()
      expect(stats.bufferedBytes).toBeLessThanOrEqual(cap)
      expect(stats.peakPeerBufferedBytes).toBeLessThanOrEqual(cap)
      expect(peak).toBeLessThanOrEqual(cap)
      expect(stats.connectionsOpened).toBe(1)

      // Closing must not wait for the stuck peer to drain.
      const closedSockets = () => accepted.filter((socket) => socket.destroyed || socket.readableEnded).length
      yield* Scope.close(aScope, Exit.void).pipe(Effect.timeoutFail({ duration: Duration.seconds(5), onTimeout: () => new Error("close hung") }))
      yield* Effect.forEach(accepted, (socket) => Effect.sync(() => socket.resume()))
      yield* waitUntil("the peer to see the connection close", () => closedSockets() === accepted.length)
    }))

  it.scopedLive("answers a lookup over the asking node's own connection, never by dialing; over another of its connections when that one closed", () =>
    Effect.gen(function*() {
      const b = yield* startNode()
      const asker = "127.0.0.1:9"
      // Two connections announcing the same node, as a node's ordinary and bulk connections do.
      const first = yield* rawPeer(b.port, asker)
      const second = yield* rawPeer(b.port, asker)
      const welcomed = first.received().length
      second.socket.destroy()
      yield* waitUntil("b to see the second connection close", () => b.transport.stats().incomingConnections === 1)
      const lookup: Envelope = { from: systemAddress(asker), to: systemAddress(b.node), message: { _tag: "Lookup", requestId: "r-1", name: "nobody" } }
      first.socket.write(frameOf(lookup))
      yield* waitUntil("the answer", () => first.received().length > welcomed)
      const answers: Array<Envelope | undefined> = []
      const decode = makeBodyDecoder()
      new FrameReader(SocketTransport.MaxFrameSize).push(first.received().subarray(welcomed), (buffer, start, end, owned) => {
        answers.push(decode(buffer, start, end, owned))
      })
      expect(answers.map((answer) => answer?.message)).toEqual([{ _tag: "LookupReply", requestId: "r-1" }])
      expect(b.transport.stats()).toMatchObject({ connectionsOpened: 0, knownPeers: 0 })
    }))

  it.scopedLive("works under FaultyTransport.layerWithFaults", () =>
    Effect.gen(function*() {
      const b = yield* make()
      const to = address(b.node, "consumer")
      const inbox = yield* b.open(to)
      const faulty = FaultyTransport.layerWithFaults({ seed: 42, drop: 0.5 }).pipe(
        Layer.provide(SocketTransport.layerSocket({ host, port: 0 }))
      )
      const context = yield* Layer.build(faulty)
      const transport: TransportService = Context.get(context, Transport)
      const injector = Context.get(context, FaultyTransport.FaultInjector)
      const from = address(transport.node, "producer")

      transport.post(Array.from({ length: 200 }, (_, index) => sequenced(from, to, index + 1)))
      const dropped = injector.stats().dropped
      expect(dropped).toBeGreaterThan(50)
      expect(dropped).toBeLessThan(150)
      const got = yield* takeN(inbox, 200 - dropped)
      const seqs = got.map(seqOf)
      expect(seqs).toEqual([...seqs].sort((x, y) => x - y))

      yield* injector.cut(transport.node, b.node)
      transport.post([sequenced(from, to, 1000)])
      expect(injector.stats().cut).toBe(1)
      yield* injector.heal(transport.node, b.node)
      yield* waitUntil("one envelope to survive the coin", () => {
        transport.post([sequenced(from, to, 2000)])
        return b.stats().delivered > got.length
      })
      expect(seqOf((yield* takeN(inbox, 1))[0])).toBe(2000)
    }))

  it.scopedLive("fails with SocketTransportError on a taken port or bad options", () =>
    Effect.gen(function*() {
      const a = yield* make()
      const taken = yield* Effect.flip(make({ port: a.port }))
      expect(taken._tag).toBe("SocketTransportError")
      expect(taken.reason).toBe("Bind")
      const tooBig = yield* Effect.flip(make({ maxFrameSize: SocketTransport.MaxFrameSize + 1 }))
      expect(tooBig.reason).toBe("InvalidOptions")
      const smallBuffer = yield* Effect.flip(make({ maxFrameSize: 4096, outgoingBufferBytes: 4096 }))
      expect(smallBuffer.reason).toBe("InvalidOptions")
      const badPort = yield* Effect.flip(make({ port: 70000 }))
      expect(badPort.reason).toBe("InvalidOptions")
      const layerError = yield* Effect.flip(Layer.build(SocketTransport.layerSocket({ host, port: a.port })))
      expect(layerError._tag).toBe("SocketTransportError")
    }))
})

describe("FrameCodec", () => {
  it("reassembles frames split at every byte boundary", () => {
    const from = address("127.0.0.1:1", "producer")
    const to = address("127.0.0.1:2", "consumer")
    const envelopes = [
      sequenced(from, to, 1),
      { from, to, message: { _tag: "Ack", sessionId: "s-1", nonce: "n", confirmedSeq: 1 } } as Envelope,
      sequenced(from, to, 2, new Uint8Array(0)),
      sequenced(from, to, 3, new Uint8Array(5000).fill(9))
    ]
    const stream = Buffer.concat(envelopes.map(frameOf))
    for (const step of [1, 3, 7, 64, 1000, stream.length]) {
      const reader = new FrameReader(SocketTransport.MaxFrameSize)
      const decode = makeBodyDecoder()
      const got: Array<Envelope | undefined> = []
      for (let offset = 0; offset < stream.length; offset += step) {
        // Copies, so no decoded payload can alias a chunk the test reuses.
        const violation = reader.push(Buffer.from(stream.subarray(offset, offset + step)), (buffer, start, end, owned) => {
          got.push(decode(buffer, start, end, owned))
        })
        expect(violation).toBeUndefined()
      }
      expect(got).toEqual(envelopes)
    }
  })

  it("counts the bytes of a frame in progress, its length prefix included, until it completes", () => {
    const reader = new FrameReader(1024)
    const frames: Array<number> = []
    const onFrame = (_: Buffer, start: number, end: number) => void frames.push(end - start)
    expect(reader.push(lengthPrefix(10), onFrame)).toBeUndefined()
    // The prefix is read, no byte of the body yet: the frame is still in progress (a slow drip's clock keeps running).
    expect(reader.buffered).toBe(4)
    reader.push(Buffer.alloc(9), onFrame)
    expect(reader.buffered).toBe(13)
    reader.push(Buffer.concat([Buffer.alloc(1), lengthPrefix(2).subarray(0, 3)]), onFrame)
    expect(frames).toEqual([10])
    expect(reader.buffered).toBe(3)
    reader.push(Buffer.concat([lengthPrefix(2).subarray(3), Buffer.alloc(2)]), onFrame)
    expect(frames).toEqual([10, 2])
    expect(reader.buffered).toBe(0)
  })

  it("parses node names", () => {
    expect(SocketTransport.parseNode("127.0.0.1:4000")).toEqual({ host: "127.0.0.1", port: 4000 })
    expect(SocketTransport.parseNode("[::1]:4000")).toEqual({ host: "::1", port: 4000 })
    expect(SocketTransport.parseNode("::1:4000")).toEqual({ host: "::1", port: 4000 })
    expect(SocketTransport.parseNode("memory")).toBeUndefined()
    expect(SocketTransport.parseNode("host:0")).toBeUndefined()
    expect(SocketTransport.parseNode("host:99999")).toBeUndefined()
    expect(SocketTransport.parseNode(":4000")).toBeUndefined()
  })
})
