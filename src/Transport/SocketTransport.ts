/**
 * The TCP transport: envelopes between nodes over length-prefixed frames (layout in
 * `internal/FrameCodec.ts`). A node is named `host:port`; an envelope goes to the node named by
 * `to.node`, or straight to a local inbox when that is this node.
 *
 * Connections carry one direction: a node dials each peer it posts to and only reads from
 * connections it accepts. So no handshake has to tell which accepted socket belongs to which node
 * name, and a dial never races an accept. A node keeps one connection per peer shared by every
 * flow, plus a second one, opened on first use, for senders of large frames
 * (`internal/BulkSenders.ts`): megabytes of chunks waiting in the kernel's socket buffers would
 * otherwise delay every small frame of every other flow behind them.
 *
 * Posting never blocks: frames are encoded in the caller and queued per connection up to
 * `outgoingBufferBytes`; one writer fiber per connection drains what is queued in one socket
 * write (up to a batch size) and waits for that write to reach the kernel before the next, so a
 * peer that stops reading costs at most the cap. A connection's queue has one lane per sending
 * controller, taken round-robin (`internal/FairQueue.ts`): a flow with a window of frames queued
 * delays another flow's next frame by one of its frames, not by its whole window. Overflow, an
 * unreachable peer and oversized frames drop and count; the protocol resends.
 */
import * as Socket from "@effect/platform/Socket"
import { Data, Deferred, Duration, Effect, Either, Fiber, FiberSet, Layer, Option, Schedule } from "effect"
import type { Scope } from "effect"
import * as Net from "node:net"
import { inboxKey } from "../Protocol/Address.js"
import { checkKeys, optionKeys } from "../Protocol/Config.js"
import { FrameTooLarge } from "../Protocol/Errors.js"
import type { Envelope } from "../Protocol/WireMessage.js"
import {
  bodyLength,
  encodeFrame,
  FrameReader,
  makeBodyDecoder,
  MaxFrameSize,
  Preamble,
  writeFrame,
  writeFrames,
  writeFramesInto
} from "./internal/FrameCodec.js"
import type { EncodedFrame } from "./internal/FrameCodec.js"
import { BulkSenders } from "./internal/BulkSenders.js"
import { FairQueue } from "./internal/FairQueue.js"
import { LocalInboxes } from "./internal/LocalInboxes.js"
import * as NodeSockets from "./internal/NodeSockets.js"
import { Transport } from "./Transport.js"
import type { TransportService, TransportStats } from "./Transport.js"

export { MaxFrameSize, Preamble } from "./internal/FrameCodec.js"

/** The smallest `maxFrameSize` accepted. */
export const MinFrameSize = 1024

/**
 * Default per-peer cap on queued plus in-flight bytes: room for two maximal frames. Ordinary
 * traffic is bounded far below this by the flow-control windows; the cap only matters for large
 * messages and for a peer that is down or has stopped reading.
 */
export const DefaultOutgoingBufferBytes = 32 * 1024 * 1024

/**
 * One socket write gathers queued frames up to this many bytes (or a single larger frame). It
 * also bounds how long a frame can wait behind a write already handed to the socket.
 */
const BatchBytes = 512 * 1024

/** Reconnect delays: exponential from 50ms, jittered, never more than 2s apart. */
export const defaultReconnect: Schedule.Schedule<unknown> = Schedule.exponential(Duration.millis(50)).pipe(
  Schedule.jittered,
  Schedule.union(Schedule.spaced(Duration.seconds(2)))
)

const DefaultConnectTimeout = Duration.seconds(5)

export interface SocketTransportOptions {
  /** Interface to listen on. */
  readonly host: string
  /** Port to listen on; 0 picks a free one (the transport's `node` names the bound port). */
  readonly port: number
  /** The host peers should dial, when it differs from `host` (e.g. listening on 0.0.0.0). */
  readonly advertisedHost?: string
  /** Largest frame body sent or accepted; default and maximum 16 MiB. Both ends should agree. */
  readonly maxFrameSize?: number
  /**
   * Cap on buffered outgoing bytes per connection (a peer has one for ordinary senders and, once
   * used, one for senders of large frames); at least `maxFrameSize + 4`.
   */
  readonly outgoingBufferBytes?: number
  /** Pauses between connection attempts to a peer; when it ends, queued envelopes are dropped. */
  readonly reconnect?: Schedule.Schedule<unknown>
  /** How long one connection attempt may take; default 5s. */
  readonly connectTimeout?: Duration.DurationInput
}

const socketKeys = optionKeys<SocketTransportOptions>({
  host: true,
  port: true,
  advertisedHost: true,
  maxFrameSize: true,
  outgoingBufferBytes: true,
  reconnect: true,
  connectTimeout: true
})

/** Counters of the socket transport; `bufferedBytes` is a gauge, the rest only grow. */
export interface SocketTransportStats extends TransportStats {
  /** Frames handed to sockets, and the socket writes that carried them. */
  readonly framesSent: number
  readonly writes: number
  /** Envelopes whose frame exceeded `maxFrameSize`, refused at `post`. */
  readonly refusedOversize: number
  /** Envelopes dropped because their peer's outgoing buffer was full. */
  readonly droppedOverflow: number
  /** Envelopes dropped because their peer stayed unreachable until `reconnect` gave up. */
  readonly droppedUnreachable: number
  /** Outgoing bytes queued or in flight, over all connections, and the highest any one connection reached. */
  readonly bufferedBytes: number
  readonly peakPeerBufferedBytes: number
  /** Outgoing connections up right now. */
  readonly connectedPeers: number
  /** Outgoing connections established, incoming accepted, incoming closed for bad input. */
  readonly connectionsOpened: number
  readonly connectionsAccepted: number
  readonly connectionsRejected: number
}

export interface SocketTransportService extends TransportService {
  /** The port actually bound. */
  readonly port: number
  readonly stats: () => SocketTransportStats
}

/** An envelope whose frame would exceed the frame size limit; it is never sent. */
export { FrameTooLarge } from "../Protocol/Errors.js"

/** The transport could not start: bad options, or the address could not be bound. */
export class SocketTransportError extends Data.TaggedError("SocketTransportError")<{
  readonly reason: "InvalidOptions" | "Bind"
  readonly message: string
  readonly cause?: unknown
}> {}

const tooLarge = (envelope: Envelope, size: number, maxFrameSize: number) =>
  new FrameTooLarge({ size, maxFrameSize, messageTag: envelope.message._tag })

/** The frame body size of `envelope`, or `FrameTooLarge` if it cannot be sent. */
export const checkFrameSize = (
  envelope: Envelope,
  maxFrameSize: number = MaxFrameSize
): Either.Either<number, FrameTooLarge> => {
  const size = bodyLength(encodeFrame(envelope))
  return size > maxFrameSize ? Either.left(tooLarge(envelope, size, maxFrameSize)) : Either.right(size)
}

/** The complete frame (length prefix included) the transport would write for `envelope`. */
export const encodeEnvelope = (
  envelope: Envelope,
  maxFrameSize: number = MaxFrameSize
): Either.Either<Uint8Array, FrameTooLarge> => {
  const frame = encodeFrame(envelope)
  if (bodyLength(frame) > maxFrameSize) return Either.left(tooLarge(envelope, bodyLength(frame), maxFrameSize))
  const out = Buffer.allocUnsafe(frame.size)
  writeFrame(out, 0, frame)
  return Either.right(out)
}

interface Config {
  readonly maxFrameSize: number
  readonly outgoingBufferBytes: number
  readonly reconnect: Schedule.Schedule<unknown>
  readonly connectTimeout: Duration.Duration
}

const invalid = (message: string) => Effect.fail(new SocketTransportError({ reason: "InvalidOptions", message }))

const isIntegerIn = (value: unknown, min: number, max: number): value is number =>
  typeof value === "number" && Number.isInteger(value) && value >= min && value <= max

const validate = (options: SocketTransportOptions): Effect.Effect<Config, SocketTransportError> => {
  if (typeof options.host !== "string" || options.host.length === 0) return invalid("host must be a non-empty string")
  if (!isIntegerIn(options.port, 0, 65535)) return invalid(`port must be an integer in [0, 65535], got ${options.port}`)
  const maxFrameSize = options.maxFrameSize ?? MaxFrameSize
  if (!isIntegerIn(maxFrameSize, MinFrameSize, MaxFrameSize)) {
    return invalid(`maxFrameSize must be an integer in [${MinFrameSize}, ${MaxFrameSize}], got ${maxFrameSize}`)
  }
  const outgoingBufferBytes = options.outgoingBufferBytes ?? Math.max(DefaultOutgoingBufferBytes, maxFrameSize + 4)
  if (!isIntegerIn(outgoingBufferBytes, maxFrameSize + 4, Number.MAX_SAFE_INTEGER)) {
    return invalid(`outgoingBufferBytes must be an integer >= maxFrameSize + 4 (${maxFrameSize + 4}), got ${outgoingBufferBytes}`)
  }
  const connectTimeout = Duration.decodeUnknown(options.connectTimeout ?? DefaultConnectTimeout)
  if (Option.isNone(connectTimeout) || !(Duration.toMillis(connectTimeout.value) > 0)) {
    return invalid(`connectTimeout must be a positive duration, got ${String(options.connectTimeout)}`)
  }
  return Effect.succeed({
    maxFrameSize,
    outgoingBufferBytes,
    reconnect: options.reconnect ?? defaultReconnect,
    connectTimeout: connectTimeout.value
  })
}

/** Splits `host:port` (IPv6 hosts may be bracketed); `undefined` if it names no dialable node. */
export const parseNode = (node: string): { readonly host: string; readonly port: number } | undefined => {
  const colon = node.lastIndexOf(":")
  if (colon <= 0) return undefined
  const portText = node.slice(colon + 1)
  if (!/^[0-9]{1,5}$/.test(portText)) return undefined
  const port = Number(portText)
  const raw = node.slice(0, colon)
  const host = raw.startsWith("[") && raw.endsWith("]") ? raw.slice(1, -1) : raw
  return port >= 1 && port <= 65535 && host.length > 0 ? { host, port } : undefined
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
  /**
   * The batch buffer of the current connection, reused write after write (each write completes
   * before the next batch is taken): per-write allocations of up to 512 KiB otherwise dominate
   * the garbage collector's work at high rates. Fresh per connection.
   */
  batch: Buffer | undefined
  wake: (() => void) | undefined
}

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

// Dials with node:net under the platform's `fromDuplex` rather than `NodeSocket.makeNet`: makeNet
// releases with `destroySoon()`, which waits for buffered bytes to drain, i.e. forever when the
// peer has stopped reading; this release destroys the socket, so closing a scope always frees it.
const dial = (host: string, port: number): Effect.Effect<Net.Socket, Socket.SocketError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<Net.Socket, Socket.SocketError>((resume) => {
      const conn = Net.createConnection({ host, port, noDelay: true, keepAlive: true })
      // Errors after connecting surface as 'close'; this listener keeps them from being thrown.
      conn.on("error", noop)
      const onError = (cause: Error) => resume(Effect.fail(new Socket.SocketGenericError({ reason: "Open", cause })))
      conn.once("error", onError)
      conn.once("connect", () => {
        conn.off("error", onError)
        resume(Effect.succeed(conn))
      })
      return Effect.sync(() => conn.destroy())
    }),
    (conn) => Effect.sync(() => conn.destroy())
  )

type Counters = { -readonly [K in keyof SocketTransportStats]: SocketTransportStats[K] }

const makeCounters = (): Counters => ({
  delivered: 0,
  undeliverable: 0,
  malformed: 0,
  framesSent: 0,
  writes: 0,
  refusedOversize: 0,
  droppedOverflow: 0,
  droppedUnreachable: 0,
  bufferedBytes: 0,
  peakPeerBufferedBytes: 0,
  connectedPeers: 0,
  connectionsOpened: 0,
  connectionsAccepted: 0,
  connectionsRejected: 0
})

// ---- incoming ----

/** Reads frames from one accepted connection until it closes or breaks the framing. */
const serveConnection = (maxFrameSize: number, counters: Counters, deliver: (envelope: Envelope) => void) =>
(socket: Socket.Socket): Effect.Effect<void> =>
  Effect.gen(function*() {
    const conn = yield* NodeSockets.netSocket
    counters.connectionsAccepted++
    const reader = new FrameReader(maxFrameSize, true)
    const decode = makeBodyDecoder()
    const onFrame = (buffer: Buffer, start: number, end: number, owned: boolean) => {
      const envelope = decode(buffer, start, end, owned)
      if (envelope === undefined) counters.malformed++
      else deliver(envelope)
    }
    let rejected = false
    yield* socket.run((chunk) => {
      if (rejected) return
      const violation = reader.push(chunk, onFrame)
      if (violation === undefined) return
      rejected = true
      counters.connectionsRejected++
      // Past a violation the stream has no trustworthy framing left: close this connection at
      // once (the server and every other connection carry on).
      if (Option.isSome(conn)) conn.value.destroy()
      else return Effect.fail(violation)
    })
  }).pipe(Effect.ignore)

// ---- outgoing ----

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
const writeLoop = (
  peer: Peer,
  counters: Counters,
  write: (chunk: Uint8Array) => Effect.Effect<void, Socket.SocketError>
): Effect.Effect<never, Socket.SocketError> => {
  const releaseInFlight = Effect.sync(() => {
    counters.bufferedBytes -= peer.inFlightBytes
    peer.inFlightBytes = 0
  })
  const writeBatch = Effect.suspend(() => Effect.ensuring(write(takeBatch(peer, counters)), releaseInFlight))
  return Effect.zipRight(write(Preamble), Effect.forever(Effect.zipRight(waitForFrames(peer), writeBatch)))
}

/** One connection's life; succeeds with whether it ever connected. */
const session = (peer: Peer, config: Config, counters: Counters): Effect.Effect<boolean> => {
  let connected = false
  // A write interrupted with its connection may still be referenced by that socket: never reuse.
  peer.batch = undefined
  return Effect.scoped(Effect.gen(function*() {
    const socket = yield* NodeSockets.fromDuplex(dial(peer.host, peer.port), { openTimeout: config.connectTimeout })
    const write = yield* socket.writer
    const opened = yield* Deferred.make<void>()
    // The peer never writes on this connection; reading only watches for its close.
    const reader = yield* Effect.forkScoped(socket.run(noop, { onOpen: Deferred.complete(opened, Effect.void) }))
    const open = yield* Effect.raceFirst(Effect.as(Deferred.await(opened), true), Effect.as(Fiber.await(reader), false))
    if (!open) return
    connected = true
    counters.connectionsOpened++
    counters.connectedPeers++
    yield* Effect.raceFirst(writeLoop(peer, counters, write), Fiber.await(reader)).pipe(
      Effect.ensuring(Effect.sync(() => counters.connectedPeers--))
    )
  })).pipe(Effect.ignore, Effect.zipRight(Effect.sync(() => connected)))
}

/**
 * A peer's writer fiber. Dials only while something is queued; after a lost or failed connection
 * waits per the schedule, which restarts after every connection that came up. When the schedule
 * ends the peer is dropped with its queue; a later post starts afresh.
 */
const peerLoop = (peer: Peer, config: Config, counters: Counters, peers: Map<string, Peer>): Effect.Effect<void> =>
  Effect.gen(function*() {
    const driver = yield* Schedule.driver(config.reconnect)
    while (true) {
      yield* waitForFrames(peer)
      if (yield* session(peer, config, counters)) yield* driver.reset
      const next = yield* Effect.either(driver.next(undefined))
      if (Either.isLeft(next)) break
    }
    counters.droppedUnreachable += peer.frames.clear()
    counters.bufferedBytes -= peer.pendingBytes
    peer.pendingBytes = 0
    peers.delete(peer.node)
  })

/** Queues one frame for a peer connection, or drops it (buffer full) and counts it. */
const enqueue = (peer: Peer, sender: string, frame: EncodedFrame, config: Config, counters: Counters): void => {
  const buffered = peer.pendingBytes + peer.inFlightBytes + frame.size
  if (buffered > config.outgoingBufferBytes) {
    counters.droppedOverflow++
    return
  }
  peer.frames.push(sender, frame)
  peer.pendingBytes += frame.size
  counters.bufferedBytes += frame.size
  if (buffered > counters.peakPeerBufferedBytes) counters.peakPeerBufferedBytes = buffered
  if (peer.wake !== undefined) peer.wake()
}

/** Binds `host:port` and serves until the scope closes. */
export const makeSocket = (
  options: SocketTransportOptions
): Effect.Effect<SocketTransportService, SocketTransportError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* Effect.catchAll(checkKeys("Transport.layerSocket", options, socketKeys), (error) => invalid(error.message))
    const config = yield* validate(options)
    const server = yield* NodeSockets.makeServer({ host: options.host, port: options.port, keepAlive: true }).pipe(
      Effect.mapError((cause) =>
        new SocketTransportError({
          reason: "Bind",
          message: `cannot listen on ${options.host}:${options.port}: ${String(cause.cause)}`,
          cause
        })
      )
    )
    const port = server.address._tag === "TcpAddress" ? server.address.port : options.port
    const node = `${options.advertisedHost ?? options.host}:${port}`
    const counters = makeCounters()
    const inboxes = new LocalInboxes()
    // Outgoing connections by peer node: for ordinary senders, and for senders of large frames.
    const peers = new Map<string, Peer>()
    const bulkPeers = new Map<string, Peer>()
    const bulkSenders = new BulkSenders()

    // Whatever arrives at this node's port is for this node: routing is by inbox key alone, so an
    // alias of this node's name (advertised vs bound host) still reaches the controller.
    const deliverLocal = (envelope: Envelope) => {
      if (inboxes.deliver(inboxKey(envelope.to), envelope)) counters.delivered++
      else counters.undeliverable++
    }

    yield* Effect.forkScoped(
      server.run(serveConnection(config.maxFrameSize, counters, deliverLocal)).pipe(
        Effect.tapErrorCause((cause) => Effect.logError("socket transport: accept loop failed", cause))
      )
    )

    const runPeer = yield* FiberSet.makeRuntime<never>()
    let closed = false
    yield* Effect.addFinalizer(() => Effect.sync(() => void (closed = true)))

    // After the scope closes no writer runs, so nothing may be queued (it would never drain).
    const peerOf = (target: string, bulk: boolean): Peer | undefined => {
      if (closed) return undefined
      const connections = bulk ? bulkPeers : peers
      const existing = connections.get(target)
      if (existing !== undefined) return existing
      const address = parseNode(target)
      if (address === undefined) return undefined
      const peer: Peer = {
        node: target,
        ...address,
        frames: new FairQueue(),
        pendingBytes: 0,
        inFlightBytes: 0,
        wake: undefined,
        batch: undefined
      }
      connections.set(target, peer)
      runPeer(peerLoop(peer, config, counters, connections))
      return peer
    }

    const transport: SocketTransportService = {
      node,
      port,
      remoting: true,
      maxFrameSize: config.maxFrameSize,
      post: (envelopes) => {
        for (const envelope of envelopes) {
          if (envelope.to.node === node) {
            deliverLocal(envelope)
            continue
          }
          const frame = encodeFrame(envelope)
          if (bodyLength(frame) > config.maxFrameSize) {
            counters.refusedOversize++
            continue
          }
          const sender = inboxKey(envelope.from)
          const peer = peerOf(envelope.to.node, bulkSenders.classify(sender, bodyLength(frame)))
          if (peer === undefined) counters.undeliverable++
          else enqueue(peer, sender, frame, config, counters)
        }
      },
      attach: (address, receive) => inboxes.attach(inboxKey(address), receive),
      open: (address) => inboxes.open(inboxKey(address)),
      stats: () => ({ ...counters })
    }
    return transport
  })

/** The TCP transport as the `Transport` service, bound for the life of the layer. */
export const layerSocket = (options: SocketTransportOptions): Layer.Layer<Transport, SocketTransportError> =>
  Layer.scoped(Transport, makeSocket(options))
