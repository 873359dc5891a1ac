/**
 * Outgoing connections. A node dials each peer it posts to and keeps one connection per peer
 * shared by every flow, plus a second one, opened on first use, for senders of large frames
 * (`BulkSenders.ts`): megabytes of chunks waiting in the kernel's socket buffers would otherwise
 * delay every small frame of every other flow behind them. Over its own connection a node only
 * sends, except for the answers to its lookups, which come back the same way.
 *
 * Posting never blocks: frames are encoded in the caller and queued per connection up to
 * `outgoingBufferBytes`; one writer fiber per connection drains what is queued in one socket
 * write (up to a batch size) and waits for that write to reach the kernel before the next, so a
 * peer that stops reading costs at most the cap. A connection's queue has one lane per sending
 * controller, taken round-robin (`FairQueue.ts`): a flow with a window of frames queued delays
 * another flow's next frame by one of its frames, not by its whole window. Overflow, an
 * unreachable peer and oversized frames drop and count; the protocol resends.
 *
 * A peer exists only while something needs it: its connection closes after half of
 * `idleTimeout` without a post, and a peer with nothing queued is forgotten; an unreachable peer
 * is forgotten, with what was queued for it, when `reconnect` ends or when nothing was posted to
 * it for `idleTimeout`. A later post starts afresh.
 */
import { Clock, Data, Deferred, Duration, Effect, Either, FiberSet, Schedule } from "effect"
import type { Scope } from "effect"
import * as Net from "node:net"
import * as Tls from "node:tls"
import type { Envelope } from "../../Protocol/WireMessage.js"
import { BulkSenders } from "./BulkSenders.js"
import { Connection } from "./Connection.js"
import type { WriteFailure } from "./Connection.js"
import { bodyLength, writeFrames, writeFramesInto } from "./FrameCodec.js"
import type { EncodedFrame } from "./FrameCodec.js"
import { FairQueue } from "./FairQueue.js"
import { FrameIntake } from "./FrameIntake.js"
import { introduce } from "./Handshake.js"
import type { FrameReaderFor, HandshakeSelf } from "./Handshake.js"
import { checkCertificate, describeTlsError } from "./PeerIdentity.js"
import type { SocketConfig } from "./SocketConfig.js"
import type { Counters } from "./SocketStats.js"

/**
 * One socket write gathers queued frames up to this many bytes (or a single larger frame). It
 * also bounds how long a frame can wait behind a write already handed to the socket.
 */
const BatchBytes = 512 * 1024

/** The largest frame a peer may send back over this node's connection: lookup replies are small. */
const ReplyFrameBytes = 64 * 1024

export interface OutboundParts {
  readonly config: SocketConfig
  readonly counters: Counters
  readonly self: HandshakeSelf
  readonly parseNode: (node: string) => { readonly host: string; readonly port: number } | undefined
  readonly deliver: (envelope: Envelope) => void
}

export interface Outbound {
  /** Queues `frame` from `sender` for node `target`, or drops and counts it. */
  readonly send: (target: string, sender: string, frame: EncodedFrame) => void
}

/**
 * Outgoing state of one connection to a peer node (its ordinary or its bulk connection); only
 * the connection's writer fiber takes from `frames`.
 */
interface Peer {
  readonly node: string
  readonly host: string
  readonly port: number
  /** Queued frames, one lane per sending controller (keyed by its inbox key). */
  readonly frames: FairQueue<EncodedFrame>
  pendingBytes: number
  inFlightBytes: number
  /** Frames ever queued: tells the reconnect loop and the idle check whether anyone still posts to this peer. */
  posts: number
  /** The connection while one is up, and since when (ms) `posts` has not moved, for the idle check. */
  connection: Connection | undefined
  quiet: { posts: number; since: number }
  /**
   * The batch buffer of the current connection, reused write after write (each write completes
   * before the next batch is taken): per-write allocations of up to 512 KiB otherwise dominate
   * the garbage collector's work at high rates. Fresh per connection.
   */
  batch: Buffer | undefined
  wake: (() => void) | undefined
  /** The last handshake failure logged, so a peer that keeps failing the same way logs it once. */
  lastFailure: string | undefined
}

/** A connection attempt failed: before TCP was up (`dial`), or in TLS or the handshake. */
class ConnectFailure extends Data.TaggedError("ConnectFailure")<{
  readonly stage: "dial" | "handshake"
  readonly reason: string
}> {}

const waitForFrames = (peer: Peer): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    if (!peer.frames.isEmpty) return resume(Effect.void)
    peer.wake = () => {
      peer.wake = undefined
      resume(Effect.void)
    }
    return Effect.sync(() => {
      peer.wake = undefined
    })
  })

const noop = () => {}

// Plain or TLS. Its release destroys the socket rather than waiting for buffered bytes to drain,
// i.e. forever when the peer has stopped reading, so closing a scope always frees it.
const dial = (peer: Peer, config: SocketConfig): Effect.Effect<Net.Socket, ConnectFailure, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<Net.Socket, ConnectFailure>((resume) => {
      const options = { host: peer.host, port: peer.port, noDelay: true, keepAlive: true }
      const tls = config.tls
      const socket = tls === undefined
        ? Net.createConnection(options)
        : Tls.connect({ ...options, secureContext: tls.clientContext, minVersion: "TLSv1.3", ...(Net.isIP(peer.host) === 0 ? { servername: peer.host } : {}) })
      let tcpUp = false
      socket.on("error", noop)
      socket.once("connect", () => {
        tcpUp = true
        // A TLS socket does not pass `noDelay` on to its TCP socket: small frames (acks) would
        // wait for Nagle's algorithm.
        socket.setNoDelay(true)
      })
      const onError = (cause: Error) =>
        resume(Effect.fail(tcpUp
          ? new ConnectFailure({ stage: "handshake", reason: describeTlsError(cause, "dialer") })
          : new ConnectFailure({ stage: "dial", reason: cause.message })))
      socket.once("error", onError)
      socket.once(tls === undefined ? "connect" : "secureConnect", () => {
        socket.off("error", onError)
        resume(Effect.succeed(socket))
      })
      return Effect.sync(() => socket.destroy())
    }),
    (socket) => Effect.sync(() => socket.destroy())
  )

/**
 * Dials `peer` and runs the handshake, within `connectTimeout`; `frames` then reads what the peer
 * sends back. Succeeds with the connection.
 */
const connect = (
  peer: Peer,
  parts: OutboundParts,
  frames: (connection: Connection) => FrameReaderFor
): Effect.Effect<Connection, ConnectFailure, Scope.Scope> => {
  let stage: "dial" | "handshake" = "dial"
  return Effect.gen(function*() {
    const socket = yield* dial(peer, parts.config)
    stage = "handshake"
    const connection = yield* Connection.make(socket)
    if (socket instanceof Tls.TLSSocket) {
      const problem = checkCertificate(socket, parts.config.tls?.allowedNames)
      if (problem !== undefined) {
        yield* connection.refuse(problem, true)
        return yield* new ConnectFailure({ stage, reason: problem })
      }
    }
    yield* Effect.mapError(introduce(connection, parts.self, frames(connection)), (failure) => new ConnectFailure({ stage, reason: failure.reason }))
    return connection
  }).pipe(
    Effect.timeoutFail({
      duration: parts.config.connectTimeout,
      onTimeout: () => new ConnectFailure({ stage, reason: `no connection within connectTimeout (${Duration.format(parts.config.connectTimeout)})` })
    })
  )
}

/** Reads what a peer sends back over this node's connection: answers to this node's lookups, in that peer's name only. */
const replyReader = (parts: OutboundParts) => (connection: Connection): FrameReaderFor => (node) => {
  const intake = new FrameIntake(ReplyFrameBytes, (envelope) => envelope.message._tag === "LookupReply" && envelope.from.node === node, parts.counters, parts.deliver)
  return (chunk) => {
    if (intake.push(chunk) === undefined) return
    parts.counters.connectionsRejected++
    connection.destroy()
  }
}

/** Queued frames in turn, up to BatchBytes (at least one frame), as one buffer. */
const takeBatch = (peer: Peer, counters: Counters): Buffer => {
  const queue = peer.frames
  const frames = [queue.take()!]
  let size = frames[0].size
  for (let next = queue.peek(); next !== undefined && size + next.size <= BatchBytes; next = queue.peek()) {
    frames.push(queue.take()!)
    size += next.size
  }
  const count = frames.length
  const bytes = size <= BatchBytes
    ? writeFramesInto((peer.batch ??= Buffer.allocUnsafeSlow(BatchBytes)).subarray(0, size), frames, 0, count)
    : writeFrames(frames, 0, count, size)
  peer.pendingBytes -= size
  peer.inFlightBytes = size
  counters.framesSent += count
  counters.writes++
  return bytes
}

// Each write waits for its callback (the bytes reached the kernel): that is the backpressure that
// keeps a non-reading peer from growing anything but the capped queue.
const writeLoop = (peer: Peer, counters: Counters, connection: Connection): Effect.Effect<never, WriteFailure> => {
  const releaseInFlight = Effect.sync(() => {
    counters.bufferedBytes -= peer.inFlightBytes
    peer.inFlightBytes = 0
  })
  const writeBatch = Effect.suspend(() => Effect.ensuring(connection.write(takeBatch(peer, counters)), releaseInFlight))
  return Effect.forever(Effect.zipRight(waitForFrames(peer), writeBatch))
}

/** Makes the outgoing side, for the life of the scope. */
export const makeOutbound = (parts: OutboundParts): Effect.Effect<Outbound, never, Scope.Scope> =>
  Effect.gen(function*() {
    const run = yield* FiberSet.makeRuntime<never>()
    const outbound = new OutboundPeers(parts, run)
    yield* Effect.addFinalizer(() => Effect.sync(() => outbound.close()))
    const idle = Duration.toMillis(parts.config.idleTimeout)
    yield* Effect.forkScoped(Effect.repeat(Effect.sync(() => outbound.closeIdle()), Schedule.spaced(Duration.millis(Math.min(1000, Math.max(10, idle / 8))))))
    return { send: (target, sender, frame) => outbound.send(target, sender, frame) }
  })

class OutboundPeers {
  private readonly config: SocketConfig
  private readonly counters: Counters
  /** Outgoing connections by peer node: for ordinary senders, and for senders of large frames. */
  private readonly peers = new Map<string, Peer>()
  private readonly bulkPeers = new Map<string, Peer>()
  private readonly bulkSenders = new BulkSenders()
  private readonly unusedMs: number
  private closed = false

  constructor(
    private readonly parts: OutboundParts,
    private readonly run: <A, E>(effect: Effect.Effect<A, E>) => unknown
  ) {
    this.config = parts.config
    this.counters = parts.counters
    this.unusedMs = Duration.toMillis(parts.config.idleTimeout)
  }

  send(target: string, sender: string, frame: EncodedFrame): void {
    const peer = this.peerOf(target, this.bulkSenders.classify(sender, bodyLength(frame)))
    if (peer !== undefined) this.enqueue(peer, sender, frame)
  }

  /** After the scope closes no writer runs, so nothing may be queued (it would never drain). */
  close(): void {
    this.closed = true
  }

  /**
   * Closes connections nothing was posted to for half of `idleTimeout` (the listener's own idle
   * timeout would otherwise close them, possibly under a frame in flight). A check on the post
   * counters, so the writer's hot path carries no timer.
   */
  closeIdle(): void {
    const now = Date.now()
    for (const connections of [this.peers, this.bulkPeers]) {
      for (const peer of connections.values()) {
        if (peer.posts !== peer.quiet.posts) peer.quiet = { posts: peer.posts, since: now }
        else if (peer.connection !== undefined && peer.frames.isEmpty && now - peer.quiet.since >= this.unusedMs / 2) peer.connection.destroy()
      }
    }
  }

  private peerOf(target: string, bulk: boolean): Peer | undefined {
    if (this.closed) return undefined
    const connections = bulk ? this.bulkPeers : this.peers
    const existing = connections.get(target)
    if (existing !== undefined) return existing
    const address = this.parts.parseNode(target)
    if (address === undefined) {
      this.counters.undeliverable++
      return undefined
    }
    if (connections.size >= this.config.maxPeers) {
      this.counters.droppedPeerLimit++
      return undefined
    }
    const peer: Peer = {
      node: target,
      ...address,
      frames: new FairQueue(),
      pendingBytes: 0,
      inFlightBytes: 0,
      posts: 0,
      connection: undefined,
      quiet: { posts: 0, since: Date.now() },
      wake: undefined,
      batch: undefined,
      lastFailure: undefined
    }
    connections.set(target, peer)
    this.counters.knownPeers = this.peers.size + this.bulkPeers.size
    this.run(this.peerLoop(peer, connections))
    return peer
  }

  /** Queues one frame for a peer connection, or drops it (buffer full) and counts it. */
  private enqueue(peer: Peer, sender: string, frame: EncodedFrame): void {
    const counters = this.counters
    const buffered = peer.pendingBytes + peer.inFlightBytes + frame.size
    if (buffered > this.config.outgoingBufferBytes) {
      counters.droppedOverflow++
      return
    }
    peer.frames.push(sender, frame)
    peer.posts++
    peer.pendingBytes += frame.size
    counters.bufferedBytes += frame.size
    if (buffered > counters.peakPeerBufferedBytes) counters.peakPeerBufferedBytes = buffered
    if (peer.wake !== undefined) peer.wake()
  }

  /**
   * A peer's writer fiber: connects, writes until the connection is lost or idle, and after a
   * lost or failed connection waits per the schedule, which restarts after every connection that
   * came up. It forgets the peer once nothing is queued, or when the schedule ends or nothing was
   * posted for `idleTimeout` while it could not connect.
   */
  private peerLoop(peer: Peer, connections: Map<string, Peer>): Effect.Effect<void> {
    return Effect.gen(this, function*() {
      const driver = yield* Schedule.driver(this.config.reconnect)
      let postsSeen = peer.posts
      let usedAt = yield* Clock.currentTimeMillis
      while (true) {
        if (yield* this.session(peer)) yield* driver.reset
        const now = yield* Clock.currentTimeMillis
        if (peer.frames.isEmpty) break
        if (peer.posts !== postsSeen) {
          postsSeen = peer.posts
          usedAt = now
        } else if (now - usedAt >= this.unusedMs) break
        if (Either.isLeft(yield* Effect.either(driver.next(undefined)))) break
      }
      this.forget(peer, connections)
    })
  }

  /** One connection's life; succeeds with whether it ever connected. */
  private session(peer: Peer): Effect.Effect<boolean> {
    const counters = this.counters
    let connected = false
    // A write interrupted with its connection may still be referenced by that socket: never reuse.
    peer.batch = undefined
    return Effect.scoped(Effect.gen(this, function*() {
      const connection = yield* connect(peer, this.parts, replyReader(this.parts))
      connected = true
      peer.lastFailure = undefined
      counters.connectionsOpened++
      counters.connectedPeers++
      peer.connection = connection
      yield* Effect.raceFirst(writeLoop(peer, counters, connection), Deferred.await(connection.closed)).pipe(
        Effect.ensuring(Effect.sync(() => {
          peer.connection = undefined
          counters.connectedPeers--
        }))
      )
    })).pipe(
      Effect.catchTag("ConnectFailure", (failure) => this.reportFailure(peer, failure)),
      Effect.ignore,
      Effect.zipRight(Effect.sync(() => connected))
    )
  }

  // A peer that is down is no news (the reconnect schedule handles it); a handshake that fails is
  // a configuration or a security problem, logged once per peer and reason.
  private reportFailure(peer: Peer, failure: ConnectFailure): Effect.Effect<void> {
    if (failure.stage === "dial") return Effect.void
    this.counters.handshakesFailed++
    if (failure.reason === peer.lastFailure) return Effect.void
    peer.lastFailure = failure.reason
    return Effect.logWarning(`socket transport: cannot connect to ${peer.node}: ${failure.reason}`)
  }

  private forget(peer: Peer, connections: Map<string, Peer>): void {
    this.counters.droppedUnreachable += peer.frames.clear()
    this.counters.bufferedBytes -= peer.pendingBytes
    peer.pendingBytes = 0
    if (connections.get(peer.node) === peer) connections.delete(peer.node)
    this.counters.knownPeers = this.peers.size + this.bulkPeers.size
  }
}
