/**
 * The transports over which a producer may recycle a confirmed message's buffers (see
 * `Controller/internal/SnapshotPool`): those that hand each envelope, once, to the controller it
 * is addressed to and keep nothing after. That is the memory transport, as long as no inbox of
 * its hub was ever opened as a queue (code reading envelopes itself may keep a payload past its
 * confirmation). No other transport qualifies: the fault injector holds and duplicates
 * envelopes, the socket transport queues frames that its writer copies out later, and a
 * transport written elsewhere may keep what it is given.
 */
import type { TransportService } from "../Transport.js"

// Kept by object identity, not as a field of the transport: a wrapper made by spreading a
// transport (`{ ...memory, post: keepingPost }`) would copy a field and claim a safety it may not
// have; here only the very object the memory transport made qualifies.
const checks = new WeakMap<TransportService, () => boolean>()

/** Declares `transport` recyclable whenever `check` answers true. */
export const register = <T extends TransportService>(transport: T, check: () => boolean): T => {
  checks.set(transport, check)
  return transport
}

export const recyclable = (transport: TransportService): boolean => checks.get(transport)?.() === true
