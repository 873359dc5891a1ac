/**
 * The envelopes one fold posts, gathered to go to the transport together.
 */
import type { Envelope } from "../../Protocol/WireMessage.js"

/**
 * Adds `envelope` to a fold's batch, starting one when there is none. A fold usually posts a
 * single envelope: an array literal holds it in the room it needs, where a first push onto an
 * empty array would make room for 17.
 */
export const withEnvelope = (batch: Array<Envelope> | undefined, envelope: Envelope): Array<Envelope> => {
  if (batch === undefined) return [envelope]
  batch.push(envelope)
  return batch
}
