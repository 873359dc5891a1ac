/**
 * The in-process transport: a hub of inboxes keyed by node and controller. Several logical nodes
 * can share one hub, so multi-node behaviour is testable in one process.
 */
import { Context, Effect, Layer } from "effect"
import { inboxKey } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import { LocalInboxes } from "./internal/LocalInboxes.js"
import * as RecyclingTransports from "./internal/RecyclingTransports.js"
import { Transport } from "./Transport.js"
import type { TransportService } from "./Transport.js"

export { InboxCapacity } from "./internal/LocalInboxes.js"

/** The shared routing table of an in-process hub. */
export interface MemoryHubService {
  readonly inboxes: LocalInboxes
}

export class MemoryHub extends Context.Tag("effect-reliable/MemoryHub")<MemoryHub, MemoryHubService>() {}

export const makeHub = (): MemoryHubService => ({ inboxes: new LocalInboxes() })

// Addresses are long-lived objects (a binding's, a registration's), so their key is kept.
const routeKeys = new WeakMap<ControllerAddress, string>()
const routeKey = (address: ControllerAddress) => {
  let key = routeKeys.get(address)
  if (key === undefined) {
    key = `${address.node}|${inboxKey(address)}`
    routeKeys.set(address, key)
  }
  return key
}

/** One node on a hub. */
export const makeNode = (hub: MemoryHubService, node: string): TransportService => {
  let delivered = 0
  let undeliverable = 0
  return RecyclingTransports.register({
    node,
    remoting: false,
    maxFrameSize: undefined,
    post: (envelopes) => {
      for (const envelope of envelopes) {
        if (hub.inboxes.deliver(routeKey(envelope.to), envelope)) delivered++
        else undeliverable++
      }
    },
    attach: (address, receive) => hub.inboxes.attach(routeKey({ ...address, node }), receive),
    open: (address) => hub.inboxes.open(routeKey({ ...address, node })),
    stats: () => ({ delivered, undeliverable, malformed: 0 })
  }, () => !hub.inboxes.opened)
}

/** A hub for several in-process nodes (`layerMemoryNode`). */
export const layerHub: Layer.Layer<MemoryHub> = Layer.sync(MemoryHub, makeHub)

/** One node named `node` on the shared hub. */
export const layerMemoryNode = (node: string): Layer.Layer<Transport, never, MemoryHub> =>
  Layer.effect(Transport, Effect.map(MemoryHub, (hub) => makeNode(hub, node)))

/** A private hub with a single node: the in-process default. */
export const layerMemory: Layer.Layer<Transport> = Layer.sync(Transport, () => makeNode(makeHub(), "memory"))
