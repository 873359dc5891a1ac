/**
 * What a message id may be, checked when a message is sent, identically for every backend: a
 * durable queue keeps ids as text in an index, and an id one backend cannot hold (PostgreSQL
 * refuses NUL and ill-formed UTF-16; an index entry has a size limit) must be refused up front,
 * not by one backend later. So memory, SQLite and PostgreSQL accept exactly the same ids.
 */
import { isReservedMessageId } from "./ChunkId.js"

/** The longest message id, in UTF-16 code units (at most 1,536 bytes of UTF-8). */
export const MaxMessageIdLength = 512

/** Why an id is refused, or undefined when it is fine. */
export type MessageIdProblem = "Blank" | "Invalid" | "Reserved"

const isWellFormed = (text: string): boolean => (text as unknown as { isWellFormed(): boolean }).isWellFormed()

export const checkMessageId = (messageId: unknown): { readonly problem: MessageIdProblem; readonly message: string } | undefined => {
  if (typeof messageId !== "string" || messageId.trim().length === 0) {
    return { problem: "Blank", message: "a messageId must be a non-blank string" }
  }
  if (messageId.length > MaxMessageIdLength) {
    return { problem: "Invalid", message: `a messageId must be at most ${MaxMessageIdLength} characters, got ${messageId.length}` }
  }
  if (messageId.includes("\u0000")) return { problem: "Invalid", message: "a messageId must not contain NUL characters" }
  if (!isWellFormed(messageId)) return { problem: "Invalid", message: "a messageId must be well-formed Unicode (no lone surrogates)" }
  if (isReservedMessageId(messageId)) {
    return { problem: "Reserved", message: `a messageId must not start with the reserved prefix: ${messageId.slice(0, 40)}` }
  }
  return undefined
}
