/**
 * Derived ids of the chunks of one large business message: `ReliableChunk:<index>/<count>:<id>`,
 * index from 0. Application ids may not use the prefix, so a derived id never collides.
 */
import { ReservedMessageIdPrefix } from "./Contract.js"

export const chunkMessageId = (messageId: string, index: number, count: number): string =>
  `${ReservedMessageIdPrefix}${index}/${count}:${messageId}`

export interface ParsedChunkId {
  readonly messageId: string
  readonly index: number
  readonly count: number
}

const pattern = /^ReliableChunk:(\d+)\/(\d+):(.+)$/s

export const parseChunkMessageId = (id: string): ParsedChunkId | undefined => {
  const match = pattern.exec(id)
  if (match === null) return undefined
  const index = Number(match[1])
  const count = Number(match[2])
  return index < count ? { index, count, messageId: match[3] } : undefined
}

export const isReservedMessageId = (id: string): boolean => id.startsWith(ReservedMessageIdPrefix)
