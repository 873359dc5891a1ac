/**
 * Transports: how envelopes travel between controllers. `layerMemory` for one process,
 * `layerSocket` (TCP) between processes, `layerFaulty` / `layerWithFaults` to test resends against
 * loss, duplication and reordering.
 */
export { Transport } from "./Transport/Transport.js"
export type { TransportService, TransportStats } from "./Transport/Transport.js"
export type { ControllerAddress } from "./Protocol/Address.js"
export type { Envelope, WireMessage } from "./Protocol/WireMessage.js"
export { layerHub, layerMemory, layerMemoryNode, MemoryHub } from "./Transport/MemoryTransport.js"
export { FaultInjector, layerFaulty, layerWithFaults } from "./Transport/FaultyTransport.js"
export type { FaultOptions, FaultStats } from "./Transport/FaultyTransport.js"
export {
  defaultReconnect,
  DefaultOutgoingBufferBytes,
  FrameTooLarge,
  layerSocket,
  layerSocketConfig,
  makeSocket,
  MaxFrameSize,
  MinFrameSize,
  SocketTransportError
} from "./Transport/SocketTransport.js"
export type { SocketTransportOptions, SocketTransportService, SocketTransportStats } from "./Transport/SocketTransport.js"
export { DefaultSocketLimits, MinSecretBytes } from "./Transport/SocketTransport.js"
export type { SocketTlsOptions } from "./Transport/SocketTransport.js"
