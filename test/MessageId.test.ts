import { describe, expect, it } from "@effect/vitest"
import { makeIdSource, newMessageId } from "../src/internal/MessageId.js"

const Uuid7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

const millisOf = (id: string) => parseInt(id.replace("-", "").slice(0, 12), 16)

/** A source on a clock the test sets, its random bytes all `byte`. */
const fixedSource = (byte: number) => {
  let now = 1_700_000_000_000
  const next = makeIdSource(() => now, (bytes) => void bytes.fill(byte))
  return { next, setNow: (millis: number) => void (now = millis) }
}

describe("default message ids", () => {
  it("are UUID version 7 strings, unique, in creation order, with the creation time up front", () => {
    const before = Date.now()
    const ids = Array.from({ length: 20_000 }, () => newMessageId())
    for (const id of ids.slice(0, 100)) expect(id).toMatch(Uuid7)
    expect(new Set(ids).size).toBe(ids.length)
    for (let index = 1; index < ids.length; index++) expect(ids[index] > ids[index - 1]).toBe(true)
    expect(millisOf(ids[0])).toBeGreaterThanOrEqual(before)
    expect(millisOf(ids[0])).toBeLessThanOrEqual(Date.now())
  })

  it("start each millisecond at random and count up within it, carrying across hex digits", () => {
    const source = fixedSource(0x19)
    const first = source.next()
    expect(first).toBe("018bcfe5-6800-7919-9919-191919191919")
    expect(source.next()).toBe("018bcfe5-6800-7919-9919-19191919191a")
    for (let index = 0; index < 5; index++) source.next()
    expect(source.next()).toBe("018bcfe5-6800-7919-9919-191919191920")
    source.setNow(1_700_000_000_001)
    expect(source.next()).toBe("018bcfe5-6801-7919-9919-191919191919")
  })

  it("stay ordered when the clock steps back", () => {
    const source = fixedSource(0x42)
    const ids = [source.next()]
    source.setNow(1_699_999_999_000)
    ids.push(source.next(), source.next())
    expect(ids.map(millisOf)).toEqual([1_700_000_000_000, 1_700_000_000_000, 1_700_000_000_000])
    expect(ids[1] > ids[0] && ids[2] > ids[1]).toBe(true)
  })

  it("take the next millisecond when the count runs past the random bits, and stay ordered", () => {
    const source = fixedSource(0xff)
    const last = source.next()
    expect(last).toBe("018bcfe5-6800-7fff-bfff-ffffffffffff")
    const next = source.next()
    expect(next).toMatch(Uuid7)
    expect(millisOf(next)).toBe(1_700_000_000_001)
    expect(next > last).toBe(true)
  })
})
