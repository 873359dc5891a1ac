/**
 * The socket transport's options, their defaults and their validation. Every limit that bounds
 * what peers can make a node hold is an option here; the defaults keep a node with no options
 * set within about 100 MiB of extra memory whatever its peers send.
 */
import { checkKeys, optionKeys } from "../../Protocol/Config.js"
import { Data, Duration, Effect, Either, Option, Redacted, Schedule } from "effect"
import { MaxFrameSize } from "./FrameCodec.js"
import { loadTls } from "./PeerIdentity.js"
import type { SocketTlsOptions, TlsMaterial } from "./PeerIdentity.js"

/** The smallest `maxFrameSize` accepted. */
export const MinFrameSize = 1024

/**
 * Default per-peer cap on queued plus in-flight bytes: room for two maximal frames. Ordinary
 * traffic is bounded far below this by the flow-control windows; the cap only matters for large
 * messages and for a peer that is down or has stopped reading.
 */
export const DefaultOutgoingBufferBytes = 32 * 1024 * 1024

/** Reconnect delays: exponential from 50ms, jittered, never more than 2s apart. */
export const defaultReconnect: Schedule.Schedule<unknown> = Schedule.exponential(Duration.millis(50)).pipe(
  Schedule.jittered,
  Schedule.union(Schedule.spaced(Duration.seconds(2)))
)

/** The defaults of the limits on what peers can make a node hold (see `SocketTransportOptions`). */
export const DefaultSocketLimits = {
  connectTimeout: Duration.seconds(5),
  maxConnections: 512,
  maxConnectionsPerAddress: 64,
  inboundBufferBytes: 32 * 1024 * 1024,
  readTimeout: Duration.seconds(20),
  idleTimeout: Duration.seconds(60),
  maxPeers: 1024,
  replyBufferBytes: 1024 * 1024
} as const

/** The shortest shared secret accepted, in bytes. */
export const MinSecretBytes = 16

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
  /**
   * How long connecting to a peer may take, TLS and the handshake included; a connection to this
   * node whose handshake takes longer is closed. Default 5s.
   */
  readonly connectTimeout?: Duration.DurationInput
  /** Runs every connection over mutual TLS 1.3 (see `SocketTlsOptions`). */
  readonly tls?: SocketTlsOptions
  /**
   * A secret every node of the deployment holds (at least 16 bytes): each connection starts with
   * an HMAC challenge-response both ways, and a peer without the secret is refused. It
   * authenticates peers, it does not encrypt; combine it with `tls` or use TLS alone where
   * traffic can be read or altered.
   */
  readonly sharedSecret?: string | Redacted.Redacted<string>
  /**
   * Without TLS, a dialing peer's announced node host must resolve to the address it connects
   * from; default true. Turn it off behind NAT or port mapping, at the price of trusting the node
   * names peers announce.
   */
  readonly verifyPeerHost?: boolean
  /** Incoming connections open at once; more are closed at accept (`connectionsRefused`). Default 512. */
  readonly maxConnections?: number
  /** Incoming connections open at once from one remote address. Default 64. */
  readonly maxConnectionsPerAddress?: number
  /**
   * Bytes of incomplete frames held over all incoming connections; at least `maxFrameSize + 4`.
   * Past it, a connection holding more than 64 KiB of one frame is closed (`droppedInboundOverflow`).
   * Default 32 MiB.
   */
  readonly inboundBufferBytes?: number
  /** A frame must arrive whole this long after its first byte, or its connection is closed (`timedOut`). Default 20s. */
  readonly readTimeout?: Duration.DurationInput
  /**
   * An incoming connection that brought no frame for this long is closed (`idleClosed`); this node
   * closes its own outgoing connections after half of it without a post; a peer that stays
   * unreachable with nothing posted to it for this long is forgotten with what was queued for it.
   * Default 60s.
   */
  readonly idleTimeout?: Duration.DurationInput
  /** Peer nodes this node sends to at once; envelopes for more are dropped (`droppedPeerLimit`). Default 1024. */
  readonly maxPeers?: number
  /** Bytes of lookup replies queued on one incoming connection; past it they are dropped. Default 1 MiB. */
  readonly replyBufferBytes?: number
}

/** The transport could not start: bad options, or the address could not be bound. */
export class SocketTransportError extends Data.TaggedError("SocketTransportError")<{
  readonly reason: "InvalidOptions" | "Bind"
  readonly message: string
  readonly cause?: unknown
}> {}

/** Validated options, defaults applied. */
export interface SocketConfig {
  readonly maxFrameSize: number
  readonly outgoingBufferBytes: number
  readonly reconnect: Schedule.Schedule<unknown>
  readonly connectTimeout: Duration.Duration
  readonly tls: TlsMaterial | undefined
  readonly secret: Uint8Array | undefined
  readonly verifyPeerHost: boolean
  readonly maxConnections: number
  readonly maxConnectionsPerAddress: number
  readonly inboundBufferBytes: number
  readonly readTimeout: Duration.Duration
  readonly idleTimeout: Duration.Duration
  readonly maxPeers: number
  readonly replyBufferBytes: number
}

class Invalid extends Data.TaggedError("Invalid")<{ readonly message: string }> {}

const isIntegerIn = (value: unknown, min: number, max: number): value is number =>
  typeof value === "number" && Number.isInteger(value) && value >= min && value <= max

const integer = (name: string, value: number | undefined, fallback: number, min: number): number => {
  const chosen = value ?? fallback
  if (!isIntegerIn(chosen, min, Number.MAX_SAFE_INTEGER)) throw new Invalid({ message: `${name} must be an integer >= ${min}, got ${chosen}` })
  return chosen
}

const duration = (name: string, value: Duration.DurationInput | undefined, fallback: Duration.Duration): Duration.Duration => {
  const decoded = Duration.decodeUnknown(value ?? fallback)
  if (Option.isNone(decoded) || !(Duration.toMillis(decoded.value) > 0) || !Duration.isFinite(decoded.value)) {
    throw new Invalid({ message: `${name} must be a positive duration, got ${String(value)}` })
  }
  return decoded.value
}

const secretOf = (value: string | Redacted.Redacted<string> | undefined): Uint8Array | undefined => {
  if (value === undefined) return undefined
  const bytes = Buffer.from(Redacted.isRedacted(value) ? Redacted.value(value) : value, "utf8")
  if (bytes.length < MinSecretBytes) throw new Invalid({ message: `sharedSecret must have at least ${MinSecretBytes} bytes` })
  return bytes
}

const check = (options: SocketTransportOptions): SocketConfig => {
  if (typeof options.host !== "string" || options.host.length === 0) throw new Invalid({ message: "host must be a non-empty string" })
  if (!isIntegerIn(options.port, 0, 65535)) throw new Invalid({ message: `port must be an integer in [0, 65535], got ${options.port}` })
  const maxFrameSize = options.maxFrameSize ?? MaxFrameSize
  if (!isIntegerIn(maxFrameSize, MinFrameSize, MaxFrameSize)) {
    throw new Invalid({ message: `maxFrameSize must be an integer in [${MinFrameSize}, ${MaxFrameSize}], got ${maxFrameSize}` })
  }
  const defaults = DefaultSocketLimits
  const tls = options.tls === undefined ? undefined : loadTls(options.tls)
  if (tls !== undefined && Either.isLeft(tls)) throw new Invalid({ message: tls.left })
  return {
    maxFrameSize,
    outgoingBufferBytes: integer("outgoingBufferBytes", options.outgoingBufferBytes, Math.max(DefaultOutgoingBufferBytes, maxFrameSize + 4), maxFrameSize + 4),
    reconnect: options.reconnect ?? defaultReconnect,
    connectTimeout: duration("connectTimeout", options.connectTimeout, defaults.connectTimeout),
    tls: tls?.right,
    secret: secretOf(options.sharedSecret),
    verifyPeerHost: options.verifyPeerHost ?? true,
    maxConnections: integer("maxConnections", options.maxConnections, defaults.maxConnections, 1),
    maxConnectionsPerAddress: integer("maxConnectionsPerAddress", options.maxConnectionsPerAddress, defaults.maxConnectionsPerAddress, 1),
    inboundBufferBytes: integer("inboundBufferBytes", options.inboundBufferBytes, Math.max(defaults.inboundBufferBytes, maxFrameSize + 4), maxFrameSize + 4),
    readTimeout: duration("readTimeout", options.readTimeout, defaults.readTimeout),
    idleTimeout: duration("idleTimeout", options.idleTimeout, defaults.idleTimeout),
    maxPeers: integer("maxPeers", options.maxPeers, defaults.maxPeers, 1),
    replyBufferBytes: integer("replyBufferBytes", options.replyBufferBytes, defaults.replyBufferBytes, 1024)
  }
}

/** The options checked, defaults applied; `InvalidOptions` names the first bad one. */
const socketKeys = optionKeys<SocketTransportOptions>({
  host: true,
  port: true,
  advertisedHost: true,
  maxFrameSize: true,
  outgoingBufferBytes: true,
  reconnect: true,
  connectTimeout: true,
  tls: true,
  sharedSecret: true,
  verifyPeerHost: true,
  maxConnections: true,
  maxConnectionsPerAddress: true,
  inboundBufferBytes: true,
  readTimeout: true,
  idleTimeout: true,
  maxPeers: true,
  replyBufferBytes: true
})

/** Checks the options (an unknown one included) and gives the configuration with its defaults. */
export const validate = (options: SocketTransportOptions): Effect.Effect<SocketConfig, SocketTransportError> =>
  Effect.zipRight(
    Effect.mapError(checkKeys("Transport.layerSocket", options, socketKeys), (error) =>
      new SocketTransportError({ reason: "InvalidOptions", message: error.message, cause: error })),
    validateValues(options)
  )

const validateValues = (options: SocketTransportOptions): Effect.Effect<SocketConfig, SocketTransportError> =>
  Effect.try({
    try: () => check(options),
    catch: (error) =>
      new SocketTransportError({ reason: "InvalidOptions", message: error instanceof Invalid ? error.message : String(error), cause: error })
  })
