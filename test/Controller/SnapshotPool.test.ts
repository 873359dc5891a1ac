import { describe, expect, it } from "@effect/vitest"
import * as SnapshotPool from "../../src/Controller/internal/SnapshotPool.js"

const chunkSize = 1024

const bytes = (length: number, salt: number): Uint8Array => {
  const out = new Uint8Array(length)
  for (let index = 0; index < length; index++) out[index] = (index * 7 + salt) & 0xff
  return out
}

/** A pool holding one idle buffer of `length` bytes. */
const poolWithIdle = (length: number) => {
  const pool = SnapshotPool.make({ chunkSize, idle: 2 })
  const first = pool.copy(bytes(length, 1))
  pool.release(first)
  return { pool, buffer: first.buffer }
}

describe("SnapshotPool", () => {
  it("copies: equal bytes in an array of their own, whatever the source does next", () => {
    const pool = SnapshotPool.make({ chunkSize, idle: 2 })
    for (const length of [0, 1, chunkSize, chunkSize + 1, 5000]) {
      const source = bytes(length, 3)
      const copy = pool.copy(source)
      source.fill(0xee)
      expect(copy).toEqual(bytes(length, 3))
      expect(copy.buffer).not.toBe(source.buffer)
    }
  })

  it("a released buffer holds a later payload that fits with less than a chunk to spare (exact multiples, one byte under and over)", () => {
    const reuse = (held: number, next: number) => {
      const { buffer, pool } = poolWithIdle(held)
      const copy = pool.copy(bytes(next, 2))
      expect(copy).toEqual(bytes(next, 2))
      return copy.buffer === buffer
    }
    expect(reuse(3 * chunkSize, 3 * chunkSize)).toBe(true)
    expect(reuse(3 * chunkSize, 3 * chunkSize - 1)).toBe(true)
    expect(reuse(3 * chunkSize, 2 * chunkSize + 1)).toBe(true)
    expect(reuse(3 * chunkSize + 1, 3 * chunkSize)).toBe(true)
    // A whole chunk or more to spare, or too small: a new buffer.
    expect(reuse(3 * chunkSize, 2 * chunkSize)).toBe(false)
    expect(reuse(3 * chunkSize, 3 * chunkSize + 1)).toBe(false)
    expect(reuse(3 * chunkSize - 1, 3 * chunkSize)).toBe(false)
  })

  it("payloads of one chunk or less are plain copies, never recycled", () => {
    const pool = SnapshotPool.make({ chunkSize, idle: 2 })
    const small = pool.copy(bytes(chunkSize, 1))
    pool.release(small)
    const next = pool.copy(bytes(chunkSize, 2))
    // Released, the first copy still holds its own bytes: the next one was not written over it.
    expect([small, next]).toEqual([bytes(chunkSize, 1), bytes(chunkSize, 2)])
  })

  it("releasing any chunk of a snapshot releases its buffer, once: it is never lent twice", () => {
    const pool = SnapshotPool.make({ chunkSize, idle: 2 })
    const snapshot = pool.copy(bytes(4 * chunkSize, 1))
    pool.release(snapshot.subarray(3 * chunkSize))
    pool.release(snapshot)
    const next = pool.copy(bytes(4 * chunkSize, 2))
    const after = pool.copy(bytes(4 * chunkSize, 3))
    expect(next.buffer).toBe(snapshot.buffer)
    expect(after.buffer).not.toBe(snapshot.buffer)
    expect(next).toEqual(bytes(4 * chunkSize, 2))
  })

  it("a kept buffer, or one the pool did not lend, is never recycled", () => {
    const pool = SnapshotPool.make({ chunkSize, idle: 2 })
    const kept = pool.copy(bytes(2 * chunkSize, 1))
    pool.keep(kept.subarray(0, chunkSize))
    pool.release(kept)
    const foreign = bytes(2 * chunkSize, 2)
    pool.release(foreign)
    const next = pool.copy(bytes(2 * chunkSize, 3))
    expect(next.buffer).not.toBe(kept.buffer)
    expect(next.buffer).not.toBe(foreign.buffer)
    expect(kept).toEqual(bytes(2 * chunkSize, 1))
    expect(foreign).toEqual(bytes(2 * chunkSize, 2))
  })

  it("keeps at most `idle` buffers", () => {
    const pool = SnapshotPool.make({ chunkSize, idle: 2 })
    const lent = [1, 2, 3].map((salt) => pool.copy(bytes(2 * chunkSize, salt)))
    for (const snapshot of lent) pool.release(snapshot)
    const again = [4, 5, 6].map((salt) => pool.copy(bytes(2 * chunkSize, salt)).buffer)
    const buffers = new Set(lent.map((snapshot) => snapshot.buffer))
    expect(again.filter((buffer) => buffers.has(buffer))).toHaveLength(2)
  })
})
