/**
 * An error as the text that travels in a settle and is kept with a dead letter: its message (or
 * its pretty form), bounded to what the wire message allows.
 */
import { Cause } from "effect"
import { MaxErrorText } from "../../Protocol/WireMessage.js"

export const errorText = (error: unknown): string => {
  const text = Cause.isCause(error)
    ? Cause.pretty(error)
    : error instanceof Error
    ? `${error.name}: ${error.message}`
    : typeof error === "string"
    ? error
    : safeJson(error)
  return text.length <= MaxErrorText ? text : `${text.slice(0, MaxErrorText - 1)}…`
}

const safeJson = (value: unknown): string => {
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}
