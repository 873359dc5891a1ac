/**
 * The Transport service: best-effort delivery of envelopes between controllers. A send may be
 * dropped, duplicated or reordered; the protocol survives all three. Each controller attaches a
 * receiver for its own address (`attach`), called with batches of envelopes; `open` gives an
 * address's envelopes as a scoped queue instead, for tests and tools.
 */
import { Context } from "effect"
import type { Effect, Queue, Scope } from "effect"
import type { ControllerAddress } from "../Protocol/Address.js"
import type { Envelope } from "../Protocol/WireMessage.js"

/** Counters a transport keeps for operators and tests. */
export interface TransportStats {
  /** Envelopes handed to a local inbox. */
  readonly delivered: number
  /** Envelopes addressed to no live inbox (a dead incarnation, an unknown endpoint). */
  readonly undeliverable: number
  /** Input that failed to decode or validate and was dropped. */
  readonly malformed: number
}

export interface TransportService {
  /** This node's address; controller addresses created here carry it. */
  readonly node: string
  /**
   * True when envelopes can reach other processes (TCP): only then may an endpoint name a peer
   * address (`remoteConsumer`, `remoteProducer`).
   */
  readonly remoting: boolean
  /** The largest frame body that can leave this node, or undefined when there is no limit. */
  readonly maxFrameSize: number | undefined
  /**
   * Hands envelopes to the transport without waiting. Never blocks and never fails: what cannot
   * be delivered is dropped and counted. Controllers call this from inside a state fold.
   */
  readonly post: (envelopes: ReadonlyArray<Envelope>) => void
  /**
   * Hands every envelope for one local controller address to `receive`, for the life of the
   * scope. Envelopes posted together arrive together, on a later microtask, never inside the
   * sender's call.
   */
  readonly attach: (
    address: ControllerAddress,
    receive: (envelopes: ReadonlyArray<Envelope>) => void
  ) => Effect.Effect<void, never, Scope.Scope>
  /** Opens the inbox of one local controller address as a queue, for the life of the scope. */
  readonly open: (address: ControllerAddress) => Effect.Effect<Queue.Dequeue<Envelope>, never, Scope.Scope>
  /** A snapshot of the counters. */
  readonly stats: () => TransportStats
}

export class Transport extends Context.Tag("effect-reliable/Transport")<Transport, TransportService>() {}
