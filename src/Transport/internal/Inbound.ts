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

/** One refusal log line per remote address per this window. */
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
    const { config, counters } = parts
    const run = yield* FiberSet.makeRuntime<never>()
    const sockets = new Set<Net.Socket>()
    const perAddress = new Map<string, number>()
    const open = new Set<Incoming>()
    // A node's incoming connections, latest last (its ordinary one and, once used, its bulk one).
    const byNode = new Map<string, Array<Incoming>>()
    const refusals = new LogThrottle(RefusalLogWindowMs)
    yield* Effect.addFinalizer(() => Effect.sync(() => sockets.forEach((socket) => socket.destroy())))

    // Keyed by address and reason: a flood logs a line per source and reason, not per connection.
    const logRefusal = (address: string, reason: string, line: string) => {
      if (refusals.allow(`${address} ${reason}`, Date.now())) run(Effect.logWarning(`socket transport: ${line}`))
    }
    // Where each accepted socket came from, kept past its close for the log line of a failed TLS
    // handshake (a TLS socket forgets its peer's address once destroyed).
    const origins = new WeakMap<Net.Socket, string>()

    const onChunk = (incoming: Incoming, chunk: Buffer) => {
      if (incoming.closing) return
      const violation = incoming.intake.push(chunk)
      if (violation !== undefined) {
        // Past a violation the stream has no trustworthy framing left: close this connection only.
        counters.connectionsRejected++
        close(incoming)
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
      if (buffered > SmallFrameAllowance && counters.inboundBufferedBytes > config.inboundBufferBytes) {
        counters.droppedInboundOverflow++
        close(incoming)
      }
    }

    const close = (incoming: Incoming) => {
      incoming.closing = true
      incoming.connection.destroy()
    }

    /** Takes a connection whose handshake succeeded into the set the sweep and `reply` see. */
    const admit = (connection: Connection, node: string): Incoming => {
      const now = Date.now()
      const incoming: Incoming = {
        connection,
        node,
        intake: new FrameIntake(config.maxFrameSize, (envelope) => envelope.from.node === node && envelope.message._tag !== "LookupReply", counters, parts.deliver),
        buffered: 0,
        partialSince: now,
        lastFrameAt: now,
        closing: false
      }
      counters.connectionsAccepted++
      open.add(incoming)
      byNode.set(node, [...(byNode.get(node) ?? []), incoming])
      return incoming
    }

    const release = (incoming: Incoming) => {
      open.delete(incoming)
      const others = (byNode.get(incoming.node) ?? []).filter((other) => other !== incoming)
      if (others.length === 0) byNode.delete(incoming.node)
      else byNode.set(incoming.node, others)
      counters.inboundBufferedBytes -= incoming.buffered
      incoming.buffered = 0
    }

    // This node's checks of the name a dialer announces: its certificate must name the host, or
    // without TLS the host must resolve to where it connects from.
    const vet = (socket: Net.Socket) => (hello: Hello): Effect.Effect<string | undefined> => {
      const host = parts.hostOf(hello.node)
      if (socket instanceof Tls.TLSSocket) return Effect.succeed(checkCertificateHost(socket, hello.node, host))
      return config.verifyPeerHost ? checkHostAddress(hello.node, host, socket.remoteAddress) : Effect.succeed(undefined)
    }

    const handshake = (connection: Connection, socket: Net.Socket, frames: FrameReaderFor): Effect.Effect<string, HandshakeFailure> =>
      Effect.gen(function*() {
        if (socket instanceof Tls.TLSSocket) {
          const problem = checkCertificate(socket, config.tls?.allowedNames)
          if (problem !== undefined) {
            yield* connection.refuse(problem, true)
            return yield* new HandshakeFailure({ reason: problem })
          }
        }
        return yield* welcome(connection, parts.self, parts.isNodeName, vet(socket), frames)
      }).pipe(
        Effect.timeoutFail({
          duration: config.connectTimeout,
          onTimeout: () => new HandshakeFailure({ reason: `its handshake took longer than connectTimeout (${Duration.format(config.connectTimeout)})` })
        })
      )

    const serve = (socket: Net.Socket): Effect.Effect<void> => {
      const from = `${socket.remoteAddress}:${socket.remotePort}`
      let admitted: Incoming | undefined
      return Effect.scoped(Effect.gen(function*() {
        const connection = yield* Connection.make(socket)
        yield* handshake(connection, socket, (node) => {
          const incoming = admit(connection, node)
          admitted = incoming
          return (chunk) => onChunk(incoming, chunk)
        })
        yield* Deferred.await(connection.closed)
      })).pipe(
        Effect.catchAll((failure) =>
          Effect.sync(() => {
            counters.handshakesRefused++
            logRefusal(socket.remoteAddress ?? from, failure.reason, `refused a connection from ${from}: ${failure.reason}`)
          })
        ),
        Effect.ensuring(Effect.sync(() => admitted !== undefined && release(admitted)))
      )
    }

    const tlsServer = config.tls === undefined ? undefined : Tls.createServer({
      ...config.tls.serverOptions,
      handshakeTimeout: Duration.toMillis(config.connectTimeout)
    })
    tlsServer?.on("secureConnection", (socket: Tls.TLSSocket) => {
      socket.on("error", () => {})
      run(serve(socket))
    })
    tlsServer?.on("tlsClientError", (error: Error, socket: Tls.TLSSocket) => {
      counters.handshakesRefused++
      // The TLS socket's `_parent` is the accepted socket it wraps (an internal of node:tls).
      const raw = (socket as unknown as { readonly _parent?: Net.Socket })._parent
      const origin = (raw === undefined ? undefined : origins.get(raw)) ?? "an unknown address"
      const reason = describeTlsError(error, "listener")
      logRefusal(origin.slice(0, origin.lastIndexOf(":")), reason, `refused a connection from ${origin}: ${reason}`)
    })

    const accept = (socket: Net.Socket) => {
      socket.on("error", () => {})
      const address = socket.remoteAddress ?? "unknown"
      const fromAddress = perAddress.get(address) ?? 0
      if (counters.incomingConnections >= config.maxConnections || fromAddress >= config.maxConnectionsPerAddress) {
        counters.connectionsRefused++
        socket.destroy()
        const cap = fromAddress >= config.maxConnectionsPerAddress
          ? `maxConnectionsPerAddress (${config.maxConnectionsPerAddress})`
          : `maxConnections (${config.maxConnections})`
        logRefusal(address, cap, `refused a connection from ${address}: ${cap} reached`)
        return
      }
      counters.incomingConnections++
      perAddress.set(address, fromAddress + 1)
      sockets.add(socket)
      socket.once("close", () => {
        counters.incomingConnections--
        sockets.delete(socket)
        const left = (perAddress.get(address) ?? 1) - 1
        if (left === 0) perAddress.delete(address)
        else perAddress.set(address, left)
      })
      socket.setNoDelay(true)
      origins.set(socket, `${address}:${socket.remotePort}`)
      if (tlsServer === undefined) run(serve(socket))
      else tlsServer.emit("connection", socket)
    }

    const readTimeoutMs = Duration.toMillis(config.readTimeout)
    const idleTimeoutMs = Duration.toMillis(config.idleTimeout)
    const sweep = Effect.sync(() => {
      const now = Date.now()
      for (const incoming of open) {
        if (incoming.closing) continue
        if (incoming.buffered > 0 && now - incoming.partialSince >= readTimeoutMs) {
          counters.timedOut++
          close(incoming)
        } else if (now - incoming.lastFrameAt >= idleTimeoutMs) {
          counters.idleClosed++
          close(incoming)
        }
      }
    })
    // A deadline is noticed within a quarter of the shorter timeout (at most a second late).
    const sweepEvery = Duration.millis(Math.min(1000, Math.max(10, Math.min(readTimeoutMs, idleTimeoutMs) / 4)))
    yield* Effect.forkScoped(Effect.repeat(sweep, Schedule.spaced(sweepEvery)))

    const reply = (node: string, frame: EncodedFrame) => {
      const incoming = byNode.get(node)?.filter((candidate) => !candidate.closing).at(-1)
      if (incoming === undefined) {
        counters.undeliverable++
        return
      }
      const socket = incoming.connection.socket
      if (socket.writableLength + frame.size > config.replyBufferBytes) {
        counters.droppedOverflow++
        return
      }
      const bytes = Buffer.allocUnsafe(frame.size)
      writeFrame(bytes, 0, frame)
      socket.write(bytes)
    }

    return { accept, reply }
  })
