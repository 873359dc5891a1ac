import { describe, expect, it } from "@effect/vitest"
import { newMessageId } from "../src/internal/MessageId.js"

describe("default message ids", () => {
  it("are UUID version 7 strings, unique, in creation order, with the creation time up front", () => {
    const before = Date.now()
    const ids = Array.from({ length: 20_000 }, () => newMessageId())
    for (const id of ids.slice(0, 100)) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(new Set(ids).size).toBe(ids.length)
    for (let index = 1; index < ids.length; index++) expect(ids[index] > ids[index - 1]).toBe(true)
    const millis = parseInt(ids[0].replace("-", "").slice(0, 12), 16)
    expect(millis).toBeGreaterThanOrEqual(before)
    expect(millis).toBeLessThanOrEqual(Date.now())
  })
})
