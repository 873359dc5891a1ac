/**
 * The in-process transport: a hub of inboxes keyed by node and controller. Several logical nodes
 * can share one hub, so multi-node behaviour is testable in one process.
 */
import { Context, Effect, Layer, Queue } from "effect"
import { inboxKey } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import type { Envelope } from "../Protocol/WireMessage.js"
import { Transport } from "./Transport.js"
import type { TransportService } from "./Transport.js"

/**
 * Inbox capacity. The protocol bounds what is in flight by the windows; this cap only keeps a
 * misbehaving sender from growing memory without limit (overflow drops, which the protocol heals).
 */
export const InboxCapacity = 1 << 17

/** The shared routing table of an in-process hub. */
export interface MemoryHubService {
  readonly inboxes: Map<string, Queue.Queue<Envelope>>
}

export class MemoryHub extends Context.Tag("effect-reliable/MemoryHub")<MemoryHub, MemoryHubService>() {}

export const makeHub = (): MemoryHubService => ({ inboxes: new Map() })

const routeKey = (node: string, address: ControllerAddress) => `${node}|${inboxKey(address)}`

/** One node on a hub. */
export const makeNode = (hub: MemoryHubService, node: string): TransportService => {
  let delivered = 0
  let undeliverable = 0
  return {
    node,
    remoting: false,
    maxFrameSize: undefined,
    post: (envelopes) => {
      for (const envelope of envelopes) {
        const inbox = hub.inboxes.get(routeKey(envelope.to.node, envelope.to))
        if (inbox !== undefined && inbox.unsafeOffer(envelope)) delivered++
        else undeliverable++
      }
    },
    open: (address) => {
      const key = routeKey(node, address)
      return Effect.acquireRelease(
        Effect.tap(Queue.dropping<Envelope>(InboxCapacity), (queue) => Effect.sync(() => hub.inboxes.set(key, queue))),
        (queue) =>
          Effect.suspend(() => {
            if (hub.inboxes.get(key) === queue) hub.inboxes.delete(key)
            return Queue.shutdown(queue)
          })
      )
    },
    stats: () => ({ delivered, undeliverable, malformed: 0 })
  }
}

/** A hub for several in-process nodes (`layerMemoryNode`). */
export const layerHub: Layer.Layer<MemoryHub> = Layer.sync(MemoryHub, makeHub)

/** One node named `node` on the shared hub. */
export const layerMemoryNode = (node: string): Layer.Layer<Transport, never, MemoryHub> =>
  Layer.effect(Transport, Effect.map(MemoryHub, (hub) => makeNode(hub, node)))

/** A private hub with a single node: the in-process default. */
export const layerMemory: Layer.Layer<Transport> = Layer.sync(Transport, () => makeNode(makeHub(), "memory"))
