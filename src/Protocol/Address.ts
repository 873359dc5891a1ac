/**
 * Controller addresses. A controller address names the node that hosts it, the endpoint it
 * serves and the controller's incarnation, so nothing addressed to a dead incarnation ever
 * reaches its successor.
 */
import { Schema } from "effect"

/** Where a controller lives: the node, the endpoint name, and this controller's incarnation. */
export const ControllerAddress = Schema.Struct({
  node: Schema.String,
  endpoint: Schema.NonEmptyString,
  incarnation: Schema.NonEmptyString
})
export type ControllerAddress = typeof ControllerAddress.Type

/** The key a node uses to route an envelope to one controller's inbox. */
export const inboxKey = (address: ControllerAddress): string => `${address.endpoint}#${address.incarnation}`

export const sameAddress = (a: ControllerAddress | undefined, b: ControllerAddress | undefined): boolean =>
  a !== undefined && b !== undefined && a.incarnation === b.incarnation && a.endpoint === b.endpoint &&
  a.node === b.node

export const formatAddress = (address: ControllerAddress): string =>
  `${address.endpoint}#${address.incarnation}@${address.node}`

/** A node's `host:port` name as the socket transport spells it (IPv6 hosts bracketed). */
export const formatNode = (host: string, port: number): string =>
  host.includes(":") && !host.startsWith("[") ? `[${host}]:${port}` : `${host}:${port}`
