/**
 * The socket transport's counters: what it sent and delivered, and every limit that refused,
 * dropped or closed something, so an operator can see a hostile or misconfigured peer at work.
 */
import type { TransportStats } from "../Transport.js"

/** Counters of the socket transport; the gauges say so, the rest only grow. */
export interface SocketTransportStats extends TransportStats {
  /** Frames handed to sockets, and the socket writes that carried them. */
  readonly framesSent: number
  readonly writes: number
  /** Envelopes whose frame exceeded `maxFrameSize`, refused at `post`. */
  readonly refusedOversize: number
  /** Envelopes dropped because their peer's outgoing buffer (or an incoming connection's reply buffer) was full. */
  readonly droppedOverflow: number
  /** Envelopes dropped because their peer stayed unreachable until `reconnect` gave up or the peer went unused. */
  readonly droppedUnreachable: number
  /** Envelopes dropped because `maxPeers` other peers were known. */
  readonly droppedPeerLimit: number
  /**
   * Envelopes dropped because their connection may not carry them: sent in the name of a node
   * that is not the connection's peer, or a lookup reply that does not come back over the
   * connection that asked.
   */
  readonly droppedSpoofed: number
  /** Gauge: outgoing bytes queued or in flight, over all connections; and the highest any one connection reached. */
  readonly bufferedBytes: number
  readonly peakPeerBufferedBytes: number
  /** Gauge: outgoing connections up, and peers known (connected, connecting or waiting to reconnect). */
  readonly connectedPeers: number
  readonly knownPeers: number
  /** Outgoing connections established (handshake done), incoming ones accepted (handshake done). */
  readonly connectionsOpened: number
  readonly connectionsAccepted: number
  /** Gauge: incoming connections open, handshaking or not. */
  readonly incomingConnections: number
  /** Incoming connections closed at accept: over `maxConnections` or `maxConnectionsPerAddress`. */
  readonly connectionsRefused: number
  /** Incoming handshakes that failed: TLS or not, secret, certificate, node name, hang-up or timeout. */
  readonly handshakesRefused: number
  /** Outgoing handshakes that failed once TCP was up (refused by the peer, or the peer failed this node's checks). */
  readonly handshakesFailed: number
  /** Connections closed for bad framing (an oversized frame announced). */
  readonly connectionsRejected: number
  /** Incoming connections closed because a frame took longer than `readTimeout`. */
  readonly timedOut: number
  /** Incoming connections closed after `idleTimeout` without a frame. */
  readonly idleClosed: number
  /** Incoming connections closed because incomplete frames exceeded `inboundBufferBytes`. */
  readonly droppedInboundOverflow: number
  /** Gauge: bytes of incomplete incoming frames held now; and the most held at once. */
  readonly inboundBufferedBytes: number
  readonly peakInboundBufferedBytes: number
}

export type Counters = { -readonly [K in keyof SocketTransportStats]: SocketTransportStats[K] }

export const makeCounters = (): Counters => ({
  delivered: 0,
  undeliverable: 0,
  malformed: 0,
  framesSent: 0,
  writes: 0,
  refusedOversize: 0,
  droppedOverflow: 0,
  droppedUnreachable: 0,
  droppedPeerLimit: 0,
  droppedSpoofed: 0,
  bufferedBytes: 0,
  peakPeerBufferedBytes: 0,
  connectedPeers: 0,
  knownPeers: 0,
  connectionsOpened: 0,
  connectionsAccepted: 0,
  incomingConnections: 0,
  connectionsRefused: 0,
  handshakesRefused: 0,
  handshakesFailed: 0,
  connectionsRejected: 0,
  timedOut: 0,
  idleClosed: 0,
  droppedInboundOverflow: 0,
  inboundBufferedBytes: 0,
  peakInboundBufferedBytes: 0
})
