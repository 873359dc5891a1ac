/**
 * The TCP transport: envelopes between nodes over length-prefixed frames (layout in
 * `internal/FrameCodec.ts`). A node is named `host:port`; an envelope goes to the node named by
 * `to.node`, or straight to a local inbox when that is this node.
 *
 * A node dials each peer it posts to (`internal/Outbound.ts`) and reads what the peers that
 * dialed it send (`internal/Inbound.ts`). Every connection opens with a handshake
 * (`internal/Handshake.ts`) in which the dialer announces its node name, authenticated by its TLS
 * certificate or the shared secret when configured; from then on a connection carries only its
 * peer's envelopes. Over a connection it accepted, a node sends back only the answers to the
 * lookups that came in on it, so a lookup never makes a node dial the node named inside it.
 *
 * Everything a peer can make a node hold is bounded by an option (`internal/SocketConfig.ts`),
 * and every refusal, drop and close is counted (`internal/SocketStats.ts`).
 */
import { Config, Effect, Either, Layer } from "effect"
import type { ConfigError, Scope } from "effect"
import * as Net from "node:net"
import { formatNode, inboxKey } from "../Protocol/Address.js"
import { FrameTooLarge } from "../Protocol/Errors.js"
import type { Envelope } from "../Protocol/WireMessage.js"
import { bodyLength, encodeFrame, MaxFrameSize, writeFrame } from "./internal/FrameCodec.js"
import { makeInbound } from "./internal/Inbound.js"
import type { Inbound } from "./internal/Inbound.js"
import { LocalInboxes } from "./internal/LocalInboxes.js"
import { makeOutbound } from "./internal/Outbound.js"
import { SocketTransportError, validate } from "./internal/SocketConfig.js"
import type { SocketTransportOptions } from "./internal/SocketConfig.js"
import { makeCounters } from "./internal/SocketStats.js"
import type { SocketTransportStats } from "./internal/SocketStats.js"
import { Transport } from "./Transport.js"
import type { TransportService } from "./Transport.js"

export { MaxFrameSize }
export { Preamble } from "./internal/HandshakeProtocol.js"
export type { SocketTlsOptions } from "./internal/PeerIdentity.js"
export {
  DefaultOutgoingBufferBytes,
  DefaultSocketLimits,
  defaultReconnect,
  MinFrameSize,
  MinSecretBytes,
  SocketTransportError
} from "./internal/SocketConfig.js"
export type { SocketTransportOptions } from "./internal/SocketConfig.js"
export type { SocketTransportStats } from "./internal/SocketStats.js"

export interface SocketTransportService extends TransportService {
  /** The port actually bound. */
  readonly port: number
  readonly stats: () => SocketTransportStats
}

/** An envelope whose frame would exceed the frame size limit; it is never sent. */
export { FrameTooLarge } from "../Protocol/Errors.js"

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

/** Binds `host:port`; connections reach `onConnection` from then on, until the scope closes. */
const listen = (
  host: string,
  port: number,
  onConnection: (socket: Net.Socket) => void
): Effect.Effect<Net.Server, SocketTransportError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<Net.Server, SocketTransportError>((resume) => {
      const server = Net.createServer({ keepAlive: true, noDelay: true }, onConnection)
      server.once("error", (cause) =>
        resume(Effect.fail(new SocketTransportError({ reason: "Bind", message: `cannot listen on ${host}:${port}: ${String(cause)}`, cause }))))
      server.listen(port, host, () => resume(Effect.succeed(server)))
    }),
    (server) => Effect.sync(() => server.close())
  )

/** Binds `host:port` and serves until the scope closes. */
export const makeSocket = (
  options: SocketTransportOptions
): Effect.Effect<SocketTransportService, SocketTransportError, Scope.Scope> =>
  Effect.gen(function*() {
    const config = yield* validate(options)
    // Connections that arrive before the node knows its own name (its bound port) are closed.
    const accepting: { inbound?: Inbound } = {}
    const server = yield* listen(options.host, options.port, (socket) => accepting.inbound === undefined ? socket.destroy() : accepting.inbound.accept(socket))
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : options.port
    const node = formatNode(options.advertisedHost ?? options.host, port)
    const counters = makeCounters()
    const inboxes = new LocalInboxes()
    const self = { node, secret: config.secret }

    // Whatever arrives at this node's port is for this node: routing is by inbox key alone, so an
    // alias of this node's name (advertised vs bound host) still reaches the controller.
    const deliverLocal = (envelope: Envelope) => {
      if (inboxes.deliver(inboxKey(envelope.to), envelope)) counters.delivered++
      else counters.undeliverable++
    }

    const outbound = yield* makeOutbound({ config, counters, self, parseNode, deliver: deliverLocal })
    const inbound = yield* makeInbound({
      config,
      counters,
      self,
      isNodeName: (name) => parseNode(name) !== undefined,
      hostOf: (name) => parseNode(name)?.host ?? name,
      deliver: deliverLocal
    })
    accepting.inbound = inbound

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
          // A lookup is answered over the connection it came in on, never by dialing its sender.
          if (envelope.message._tag === "LookupReply") inbound.reply(envelope.to.node, frame)
          else outbound.send(envelope.to.node, inboxKey(envelope.from), frame)
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

/**
 * `layerSocket` with its options read from Effect `Config` (e.g. the environment), as
 * `PgClient.layerConfig` reads its own:
 * `layerSocketConfig({ host: Config.string("RELIABLE_HOST"), port: Config.port("RELIABLE_PORT"),
 * sharedSecret: Config.redacted("RELIABLE_SECRET") })`. A value `Config` cannot read is a
 * `ConfigError`; one it reads but the transport refuses (a short secret, a limit out of range,
 * TLS material that does not load) is a `SocketTransportError` with reason `InvalidOptions`, as
 * from `layerSocket`.
 */
export const layerSocketConfig = (
  config: Config.Config.Wrap<SocketTransportOptions>
): Layer.Layer<Transport, ConfigError.ConfigError | SocketTransportError> =>
  Layer.unwrapEffect(Effect.map(Config.unwrap(config), layerSocket))
