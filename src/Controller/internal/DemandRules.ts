/**
 * The checks a producer-side controller applies to a consumer's (or worker's) `Request` and `Ack`:
 * a confirmation beyond what was sent, or demand that shrinks below the confirmation or exceeds
 * the maximum window, breaks the protocol. Point-to-point treats a violation as terminal;
 * work-pulling ends only the offending worker's binding.
 */
import { MaxWindow } from "../../Protocol/Config.js"
import { ProtocolViolation } from "../../Protocol/Errors.js"
import type { Request } from "../../Protocol/WireMessage.js"

/** `peer` confirmed `confirmedSeq` of a flow whose last sent seq is `lastSeq`. */
export const confirmationViolation = (peer: string, confirmedSeq: number, lastSeq: number): ProtocolViolation | undefined =>
  confirmedSeq > lastSeq
    ? new ProtocolViolation({ message: `${peer} confirmed seq ${confirmedSeq} but the last seq sent is ${lastSeq}` })
    : undefined

/** `peer` asked for an impossible range of demand. */
export const demandViolation = (peer: string, request: Request): ProtocolViolation | undefined => {
  if (request.requestUpToSeq < request.confirmedSeq) {
    return new ProtocolViolation({
      message: `${peer} requested up to seq ${request.requestUpToSeq}, below its confirmed seq ${request.confirmedSeq}`
    })
  }
  if (request.requestUpToSeq - request.confirmedSeq > MaxWindow) {
    return new ProtocolViolation({
      message: `${peer} requested ${request.requestUpToSeq - request.confirmedSeq} messages, more than the maximum window ${MaxWindow}`
    })
  }
  return undefined
}
