/**
 * Lookups between nodes. Every system serves `Lookup` requests at a fixed system address
 * (endpoint `@system`) from its own endpoint registry, and asks another node the same way, so a
 * caller learns a remote endpoint's live controller from the node that hosts it, never from a
 * cached copy. A request that gets no answer within the lookup timeout counts as "unknown";
 * callers retry on their own timers, so an unreachable peer is only a delay.
 *
 * The answer goes to the request's sender. Over TCP the transport carries it back over the
 * connection the request came in on and never dials for it, and it delivers a request only from
 * the node the connection belongs to, so a request in another node's name is never answered.
 */
import { Deferred, Effect, FiberId } from "effect"
import type { Duration, Scope } from "effect"
import type { ControllerAddress } from "../Protocol/Address.js"
import type { Envelope, LookupRecord, SystemMessage } from "../Protocol/WireMessage.js"
import type { TransportService } from "../Transport/Transport.js"
import type { EndpointRecord, EndpointRegistry } from "./EndpointRegistry.js"

/** The endpoint name of every node's system address; user endpoint names cannot start with "@" (`Config.checkName`). */
export const SystemEndpoint = "@system"
/** Fixed, so a node can be asked knowing only its `host:port`. */
export const SystemIncarnation = "system"

export const systemAddress = (node: string): ControllerAddress => ({
  node,
  endpoint: SystemEndpoint,
  incarnation: SystemIncarnation
})

/** Counters for operators and tests. */
export interface LookupStats {
  /** Requests this node sent, answered in time, and left unanswered (timeout). */
  readonly asked: number
  readonly answered: number
  readonly unanswered: number
  /** Requests from other nodes this node answered. */
  readonly served: number
  /** Requests waiting for an answer right now. */
  readonly pending: number
}

export interface NodeLookup {
  /** Asks `node` for its endpoint `name`; undefined when unknown there or unanswered in time. */
  readonly ask: (node: string, name: string) => Effect.Effect<EndpointRecord | undefined>
  readonly stats: () => LookupStats
}

const toWire = (record: EndpointRecord): LookupRecord => ({
  kind: record.kind,
  ...(record.peer === undefined ? {} : { peer: record.peer }),
  ...(record.address === undefined ? {} : { address: record.address })
})

const fromWire = (name: string, record: LookupRecord): EndpointRecord => ({
  name,
  kind: record.kind,
  peer: record.peer,
  address: record.address
})

const isSystemMessage = (message: Envelope["message"]): message is SystemMessage =>
  message._tag === "Lookup" || message._tag === "LookupReply"

/** Serves this node's registry and asks other nodes, for the life of the scope. */
export const make = (options: {
  readonly transport: TransportService
  readonly registry: EndpointRegistry
  readonly timeout: Duration.Duration
  readonly newId: () => string
}): Effect.Effect<NodeLookup, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { registry, transport } = options
    const self = systemAddress(transport.node)
    const pending = new Map<string, Deferred.Deferred<LookupRecord | undefined>>()
    const counters = { asked: 0, answered: 0, unanswered: 0, served: 0 }

    const answer = (from: ControllerAddress, requestId: string, name: string): Envelope => {
      const record = registry.get(name)?.record
      return {
        from: self,
        to: from,
        message: record === undefined
          ? { _tag: "LookupReply", requestId }
          : { _tag: "LookupReply", requestId, record: toWire(record) }
      }
    }

    const serve = (batch: Iterable<Envelope>): void => {
      const replies: Array<Envelope> = []
      for (const envelope of batch) {
        const message = envelope.message
        if (!isSystemMessage(message)) continue
        if (message._tag === "Lookup") {
          counters.served++
          replies.push(answer(envelope.from, message.requestId, message.name))
        } else {
          // An answer nobody waits for any more (timed out, or meant for an earlier process) is dropped.
          const waiting = pending.get(message.requestId)
          if (waiting === undefined) continue
          pending.delete(message.requestId)
          Deferred.unsafeDone(waiting, Effect.succeed(message.record))
        }
      }
      if (replies.length > 0) transport.post(replies)
    }
    yield* transport.attach(self, serve)

    const ask = (node: string, name: string): Effect.Effect<EndpointRecord | undefined> =>
      Effect.suspend(() => {
        const requestId = options.newId()
        const reply = Deferred.unsafeMake<LookupRecord | undefined>(FiberId.none)
        pending.set(requestId, reply)
        counters.asked++
        transport.post([{ from: self, to: systemAddress(node), message: { _tag: "Lookup", requestId, name } }])
        return Deferred.await(reply).pipe(
          Effect.timeout(options.timeout),
          Effect.map((record) => {
            counters.answered++
            return record === undefined ? undefined : fromWire(name, record)
          }),
          Effect.orElse(() =>
            Effect.sync(() => {
              counters.unanswered++
              return undefined
            })
          ),
          Effect.ensuring(Effect.sync(() => pending.delete(requestId)))
        )
      })

    return { ask, stats: () => ({ ...counters, pending: pending.size }) }
  })
