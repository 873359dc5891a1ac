/**
 * An error as the text that travels in a settle and is kept with a dead letter, bounded to what
 * the wire message allows. A handler's typed failure is named by its tag and fields (a
 * `Data.TaggedError` without a message would otherwise read "An error has occurred"); defects and
 * interruptions keep the cause's pretty form, stack included.
 */
import { Cause, Option } from "effect"
import { MaxErrorText } from "../../Protocol/WireMessage.js"

export const errorText = (error: unknown): string => {
  const text = describe(error)
  return text.length <= MaxErrorText ? text : `${text.slice(0, MaxErrorText - 1)}…`
}

const describe = (error: unknown): string => {
  if (Cause.isCause(error)) {
    const failure = Cause.failureOption(error)
    return Option.isSome(failure) && Cause.isFailType(error) ? describe(failure.value) : Cause.pretty(error)
  }
  if (error instanceof Error) return describeError(error)
  return typeof error === "string" ? error : safeJson(error)
}

/** `Tag: message {fields}`, leaving out what is empty. */
const describeError = (error: Error): string => {
  const tag = (error as { readonly _tag?: unknown })._tag
  const name = typeof tag === "string" ? tag : error.name
  const fields = Object.fromEntries(Object.entries(error).filter(([key]) => key !== "_tag" && key !== "message"))
  const details = Object.keys(fields).length > 0 ? ` ${safeJson(fields)}` : ""
  return error.message === "" ? `${name}${details}` : `${name}: ${error.message}${details}`
}

const safeJson = (value: unknown): string => {
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}
