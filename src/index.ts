/**
 * effect-reliable: confirmed, ordered, flow-controlled delivery between Effect programs.
 */
export * as Cluster from "./Cluster.js"
export * as Consumer from "./Consumer.js"
export * as DurableQueue from "./DurableQueue.js"
export * as Producer from "./Producer.js"
export * as ReliableSystem from "./ReliableSystem.js"
export * as Transport from "./Transport.js"
export * as WorkPulling from "./WorkPulling.js"
export type { Delivery } from "./Protocol/Contract.js"
export { DeliveryConfirmed, Enqueued, Produced, RequestNext, ReservedMessageIdPrefix, Stored, StoredAck } from "./Protocol/Contract.js"
export {
  EndpointClosed,
  EndpointNotFound,
  HandlerTimeout,
  MessageRejected,
  PayloadDecodeError,
  PayloadEncodeError,
  ProducerContractError,
  FrameTooLarge,
  ProtocolViolation,
  ReliableClusterRequired,
  ReliableConfigError,
  ReliablePeerClusterConflict,
  ReliablePeerRemotingRequired
} from "./Protocol/Errors.js"
export type { ProducerContractReason, ReliableEndpointConfigError } from "./Protocol/Errors.js"
export type { PeerAddress, QueueRetry } from "./Protocol/Config.js"
export { ClusterPlacementError, ClusterRegistryError, ReliableOwnershipLost } from "./Cluster/ClusterErrors.js"
export { ReliableDeliveryFailed } from "./Protocol/Failure.js"
export { ReliableDegraded, ReliableRecovered } from "./Protocol/Health.js"
export { DeliveryDeadLettered } from "./Protocol/DeadLetter.js"
export type { ReliableHealthEvent } from "./Protocol/Health.js"
export type { ReliableControllerRole, ReliableDeliveryStage } from "./Protocol/Failure.js"
export {
  DefaultResendInterval,
  DefaultRetryInterval,
  DefaultWindow,
  MaxChunkSize,
  MaxWindow,
  MinChunkSize,
  MinWindow
} from "./Protocol/Config.js"
