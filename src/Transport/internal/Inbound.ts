/**
 * Incoming connections: accepted up to the connection caps, taken through TLS when configured and
 * through the connect handshake, then read frame by frame. What one connection can make this node
 * hold is bounded: during its handshake, one message for `connectTimeout`; then one frame of at
 * most `maxFrameSize`, read only as its bytes arrive, for at most `readTimeout`; and over all
 * connections, `inboundBufferBytes` of incomplete frames. A connection without a frame for
 * `idleTimeout` is closed.
 *
 * The dialing node's envelopes arrive here; the only thing this node sends back on such a
 * connection is the answer to a lookup it carried, so a lookup never makes this node dial anyone
 * (`reply`).
 */
import { Deferred, Duration, Effect, FiberSet, Schedule } from "effect"
import type { Scope } from "effect"
import type * as Net from "node:net"
import * as Tls from "node:tls"
import type { Envelope } from "../../Protocol/WireMessage.js"
import { Connection, HandshakeFailure } from "./Connection.js"
import { writeFrame } from "./FrameCodec.js"
import type { EncodedFrame } from "./FrameCodec.js"
import { FrameIntake } from "./FrameIntake.js"
import { welcome } from "./Handshake.js"
import type { FrameReaderFor, HandshakeSelf } from "./Handshake.js"
import type { Hello } from "./HandshakeProtocol.js"
import { LogThrottle } from "./LogThrottle.js"
import { checkCertificate, checkCertificateHost, checkHostAddress, describeTlsError } from "./PeerIdentity.js"
import type { SocketConfig } from "./SocketConfig.js"
import type { Counters } from "./SocketStats.js"

/**
 * A connection may hold this much of one incomplete frame even when `inboundBufferBytes` is
 * spent: ordinary frames are far smaller, so a peer filling the shared budget with partial
 * large frames cannot stop other peers' ordinary traffic.
 */
export const SmallFrameAllowance = 64 * 1024

/** One log line per remote address and reason per this window. */
const RefusalLogWindowMs = 10_000

export interface InboundParts {
  readonly config: SocketConfig
  readonly counters: Counters
  readonly self: HandshakeSelf
  readonly isNodeName: (node: string) => boolean
  readonly hostOf: (node: string) => string
  readonly deliver: (envelope: Envelope) => void
}

export interface Inbound {
  /** Takes a socket the listener accepted. */
  readonly accept: (socket: Net.Socket) => void
  /** Sends a reply over the incoming connection of `node`; never dials. Counts what it drops. */
  readonly reply: (node: string, frame: EncodedFrame) => void
}

/** An incoming connection past its handshake. */
interface Incoming {
  readonly connection: Connection
  readonly node: string
  readonly intake: FrameIntake
  /** Bytes of the incomplete frame held, as last counted into `inboundBufferedBytes`. */
  buffered: number
  /** When the incomplete frame's first byte arrived; when the last frame completed (ms). */
  partialSince: number
  lastFrameAt: number
  closing: boolean
}

/** Accepts, checks and reads incoming connections, for the life of the scope. */
export const makeInbound = (parts: InboundParts): Effect.Effect<Inbound, never, Scope.Scope> =>
  Effect.gen(function*() {
    const run = yield* FiberSet.makeRuntime<never>()
    const inbound = new InboundConnections(parts, run)
    yield* Effect.addFinalizer(() => Effect.sync(() => inbound.destroyAll()))
    const { readTimeout, idleTimeout } = parts.config
    // A deadline is noticed within a quarter of the shorter timeout (at most a second late).
    const sweepEvery = Math.min(1000, Math.max(10, Math.min(Duration.toMillis(readTimeout), Duration.toMillis(idleTimeout)) / 4))
    yield* Effect.forkScoped(Effect.repeat(Effect.sync(() => inbound.sweep()), Schedule.spaced(Duration.millis(sweepEvery))))
    return { accept: (socket) => inbound.accept(socket), reply: (node, frame) => inbound.reply(node, frame) }
  })

class InboundConnections {
  private readonly config: SocketConfig
  private readonly counters: Counters
  /** Every accepted socket, handshaking or not, and how many come from each remote address. */
  private readonly sockets = new Set<Net.Socket>()
  private readonly perAddress = new Map<string, number>()
  /** Where each accepted socket came from, kept past its close for the log line of a failed TLS handshake. */
  private readonly origins = new WeakMap<Net.Socket, string>()
  /** Connections past their handshake; by node, latest last (its ordinary one and, once used, its bulk one). */
  private readonly open = new Set<Incoming>()
  private readonly byNode = new Map<string, Array<Incoming>>()
  private readonly refusals = new LogThrottle(RefusalLogWindowMs)
  private readonly tlsServer: Tls.Server | undefined

  constructor(
    private readonly parts: InboundParts,
    private readonly run: <A, E>(effect: Effect.Effect<A, E>) => unknown
  ) {
    this.config = parts.config
    this.counters = parts.counters
    this.tlsServer = this.makeTlsServer()
  }

  accept(socket: Net.Socket): void {
    socket.on("error", () => {})
    const address = socket.remoteAddress ?? "unknown"
    const fromAddress = this.perAddress.get(address) ?? 0
    if (this.counters.incomingConnections >= this.config.maxConnections || fromAddress >= this.config.maxConnectionsPerAddress) {
      this.counters.connectionsRefused++
      socket.destroy()
      const cap = fromAddress >= this.config.maxConnectionsPerAddress
        ? `maxConnectionsPerAddress (${this.config.maxConnectionsPerAddress})`
        : `maxConnections (${this.config.maxConnections})`
      this.logRefusal(address, cap, `refused a connection from ${address}: ${cap} reached`)
      return
    }
    this.counters.incomingConnections++
    this.perAddress.set(address, fromAddress + 1)
    this.sockets.add(socket)
    socket.once("close", () => {
      this.counters.incomingConnections--
      this.sockets.delete(socket)
      const left = (this.perAddress.get(address) ?? 1) - 1
      if (left === 0) this.perAddress.delete(address)
      else this.perAddress.set(address, left)
    })
    socket.setNoDelay(true)
    this.origins.set(socket, `${address}:${socket.remotePort}`)
    if (this.tlsServer === undefined) this.run(this.serve(socket))
    else this.tlsServer.emit("connection", socket)
  }

  /** Sends a reply over an open incoming connection of `node`; never dials. Counts what it drops. */
  reply(node: string, frame: EncodedFrame): void {
    const incoming = this.byNode.get(node)?.filter((candidate) => !candidate.closing).at(-1)
    if (incoming === undefined) {
      this.counters.undeliverable++
      return
    }
    const socket = incoming.connection.socket
    if (socket.writableLength + frame.size > this.config.replyBufferBytes) {
      this.counters.droppedOverflow++
      return
    }
    const bytes = Buffer.allocUnsafe(frame.size)
    writeFrame(bytes, 0, frame)
    socket.write(bytes)
  }

  /** Closes connections whose frame is overdue or that stayed idle. */
  sweep(): void {
    const now = Date.now()
    const readTimeout = Duration.toMillis(this.config.readTimeout)
    const idleTimeout = Duration.toMillis(this.config.idleTimeout)
    for (const incoming of this.open) {
      if (incoming.closing) continue
      if (incoming.buffered > 0 && now - incoming.partialSince >= readTimeout) {
        this.counters.timedOut++
        this.close(incoming)
      } else if (now - incoming.lastFrameAt >= idleTimeout) {
        this.counters.idleClosed++
        this.close(incoming)
      }
    }
  }

  destroyAll(): void {
    this.sockets.forEach((socket) => socket.destroy())
  }

  private makeTlsServer(): Tls.Server | undefined {
    if (this.config.tls === undefined) return undefined
    const server = Tls.createServer({ ...this.config.tls.serverOptions, handshakeTimeout: Duration.toMillis(this.config.connectTimeout) })
    server.on("secureConnection", (socket: Tls.TLSSocket) => {
      socket.on("error", () => {})
      this.run(this.serve(socket))
    })
    server.on("tlsClientError", (error: Error, socket: Tls.TLSSocket) => {
      this.counters.handshakesRefused++
      // The TLS socket's `_parent` is the accepted socket it wraps (an internal of node:tls).
      const raw = (socket as unknown as { readonly _parent?: Net.Socket })._parent
      const origin = (raw === undefined ? undefined : this.origins.get(raw)) ?? "an unknown address"
      const reason = describeTlsError(error, "listener")
      this.logRefusal(origin.slice(0, origin.lastIndexOf(":")), reason, `refused a connection from ${origin}: ${reason}`)
    })
    return server
  }

  // Keyed by address and reason: a flood logs a line per source and reason, not per connection.
  private logRefusal(address: string, reason: string, line: string): void {
    if (this.refusals.allow(`${address} ${reason}`, Date.now())) this.run(Effect.logWarning(`socket transport: ${line}`))
  }

  /** One connection from its handshake (TLS done, if any) until it closes. */
  private serve(socket: Net.Socket): Effect.Effect<void> {
    const from = `${socket.remoteAddress}:${socket.remotePort}`
    let admitted: Incoming | undefined
    return Effect.scoped(Effect.gen(this, function*() {
      const connection = yield* Connection.make(socket)
      yield* this.handshake(connection, socket, (node) => {
        const incoming = this.admit(connection, node)
        admitted = incoming
        return (chunk) => this.onChunk(incoming, chunk)
      })
      yield* Deferred.await(connection.closed)
    })).pipe(
      Effect.catchAll((failure) =>
        Effect.sync(() => {
          this.counters.handshakesRefused++
          this.logRefusal(socket.remoteAddress ?? from, failure.reason, `refused a connection from ${from}: ${failure.reason}`)
        })
      ),
      Effect.ensuring(Effect.sync(() => admitted !== undefined && this.release(admitted)))
    )
  }

  private handshake(connection: Connection, socket: Net.Socket, frames: FrameReaderFor): Effect.Effect<string, HandshakeFailure> {
    const { config, parts } = this
    return Effect.gen(function*() {
      if (socket instanceof Tls.TLSSocket) {
        const problem = checkCertificate(socket, config.tls?.allowedNames)
        if (problem !== undefined) {
          yield* connection.refuse(problem, true)
          return yield* new HandshakeFailure({ reason: problem })
        }
      }
      return yield* welcome(connection, parts.self, parts.isNodeName, (hello) => vetName(parts, socket, hello), frames)
    }).pipe(
      Effect.timeoutFail({
        duration: config.connectTimeout,
        onTimeout: () => new HandshakeFailure({ reason: `its handshake took longer than connectTimeout (${Duration.format(config.connectTimeout)})` })
      })
    )
  }

  /** Takes a connection whose handshake succeeded into the set the sweep and `reply` see. */
  private admit(connection: Connection, node: string): Incoming {
    const now = Date.now()
    const accepts = (envelope: Envelope) => envelope.from.node === node && envelope.message._tag !== "LookupReply"
    const incoming: Incoming = {
      connection,
      node,
      intake: new FrameIntake(this.config.maxFrameSize, accepts, this.counters, this.parts.deliver),
      buffered: 0,
      partialSince: now,
      lastFrameAt: now,
      closing: false
    }
    this.counters.connectionsAccepted++
    this.open.add(incoming)
    this.byNode.set(node, [...(this.byNode.get(node) ?? []), incoming])
    return incoming
  }

  private release(incoming: Incoming): void {
    this.open.delete(incoming)
    const others = (this.byNode.get(incoming.node) ?? []).filter((other) => other !== incoming)
    if (others.length === 0) this.byNode.delete(incoming.node)
    else this.byNode.set(incoming.node, others)
    this.counters.inboundBufferedBytes -= incoming.buffered
    incoming.buffered = 0
  }

  private onChunk(incoming: Incoming, chunk: Buffer): void {
    if (incoming.closing) return
    const counters = this.counters
    if (incoming.intake.push(chunk) !== undefined) {
      // Past a violation the stream has no trustworthy framing left: close this connection only.
      counters.connectionsRejected++
      this.close(incoming)
      return
    }
    const buffered = incoming.intake.buffered
    if (incoming.intake.completed > 0 || (buffered > 0 && incoming.buffered === 0)) {
      const now = Date.now()
      if (incoming.intake.completed > 0) incoming.lastFrameAt = now
      incoming.partialSince = now
    }
    counters.inboundBufferedBytes += buffered - incoming.buffered
    incoming.buffered = buffered
    if (counters.inboundBufferedBytes > counters.peakInboundBufferedBytes) counters.peakInboundBufferedBytes = counters.inboundBufferedBytes
    if (buffered > SmallFrameAllowance && counters.inboundBufferedBytes > this.config.inboundBufferBytes) {
      counters.droppedInboundOverflow++
      this.close(incoming)
    }
  }

  private close(incoming: Incoming): void {
    incoming.closing = true
    incoming.connection.destroy()
  }
}

/**
 * This node's check of the name a dialer announces: with TLS its certificate must name the host;
 * without, the host must resolve to where it connects from (unless `verifyPeerHost` is off).
 */
const vetName = (parts: InboundParts, socket: Net.Socket, hello: Hello): Effect.Effect<string | undefined> => {
  const host = parts.hostOf(hello.node)
  if (socket instanceof Tls.TLSSocket) return Effect.succeed(checkCertificateHost(socket, hello.node, host))
  return parts.config.verifyPeerHost ? checkHostAddress(hello.node, host, socket.remoteAddress) : Effect.succeed(undefined)
}
