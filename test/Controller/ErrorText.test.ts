/** The text of a handler's failure, as a settle carries it and a dead letter keeps it. */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Data } from "effect"
import { errorText } from "../../src/Controller/internal/ErrorText.js"
import { MaxErrorText } from "../../src/Protocol/WireMessage.js"

class ImageUnreadable extends Data.TaggedError("ImageUnreadable")<{ readonly imageId: number }> {}
class Declined extends Data.TaggedError("Declined")<{ readonly message: string; readonly code: number }> {}

describe("errorText", () => {
  const rows: ReadonlyArray<readonly [string, unknown, string]> = [
    ["a tagged error without a message: its tag and fields", Cause.fail(new ImageUnreadable({ imageId: 7 })), "ImageUnreadable {\"imageId\":7}"],
    ["a tagged error with a message", Cause.fail(new Declined({ message: "card declined", code: 51 })), "Declined: card declined {\"code\":51}"],
    ["a plain Error", new TypeError("bad input"), "TypeError: bad input"],
    ["a string", "no stock", "no stock"],
    ["a plain value", { reason: "late" }, "{\"reason\":\"late\"}"]
  ]
  for (const [name, error, text] of rows) it(name, () => expect(errorText(error)).toBe(text))

  it("a defect keeps the cause's pretty form", () => {
    expect(errorText(Cause.die(new Error("boom")))).toContain("Error: boom")
  })

  it("is bounded to what a settle carries", () => {
    const text = errorText("x".repeat(MaxErrorText * 2))
    expect(text.length).toBe(MaxErrorText)
    expect(text.endsWith("…")).toBe(true)
  })
})
