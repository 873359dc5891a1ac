/**
 * Copies cut from shared slabs: each is its own bytes, whatever happens to the original or to the
 * copies around it; the smallest and the largest are arrays of their own.
 */
import { describe, expect, it } from "@effect/vitest"
import * as SeededRandom from "../../src/internal/SeededRandom.js"
import * as SlabCopy from "../../src/Protocol/SlabCopy.js"

const filled = (length: number, seed: number) => Uint8Array.from({ length }, (_, index) => (index * 31 + seed) & 0xff)

const ownsItsBuffer = (bytes: Uint8Array) => bytes.byteOffset === 0 && bytes.buffer.byteLength === bytes.length

describe("SlabCopy", () => {
  it("up to 64 bytes and above half a slab a copy is an array of its own; in between a view into a shared slab", () => {
    for (const length of [0, 1, 64, SlabCopy.MaxSlabCopy + 1, 3 * SlabCopy.SlabBytes]) {
      expect(ownsItsBuffer(SlabCopy.copy(filled(length, 1))), `${length} bytes`).toBe(true)
    }
    const first = SlabCopy.copy(filled(65, 1))
    const second = SlabCopy.copy(filled(SlabCopy.MaxSlabCopy, 2))
    expect([ownsItsBuffer(first), ownsItsBuffer(second), first.length, second.length]).toEqual([false, false, 65, SlabCopy.MaxSlabCopy])
  })

  it("a range of a larger source (a socket's read chunk) is copied out as the same bytes, in every size class", () => {
    for (const length of [0, 40, 64, 65, 1000, SlabCopy.MaxSlabCopy, SlabCopy.MaxSlabCopy + 1]) {
      const source = Buffer.from(filled(length + 20, length))
      const copied = SlabCopy.copyRange(source, 7, 7 + length)
      const expected = Uint8Array.from(source.subarray(7, 7 + length))
      source.fill(0)
      expect(copied, `${length} bytes`).toEqual(expected)
    }
  })

  it("copies keep their bytes: across slabs, after writes to the originals and to the copies beside them", () => {
    const random = SeededRandom.make(5)
    const copies: Array<[Uint8Array, Uint8Array]> = []
    for (let index = 0; index < 2000; index++) {
      const original = filled(random.int(0, 5000), index)
      const copied = SlabCopy.copy(original)
      const expected = original.slice()
      original.fill(0)
      copies.push([copied, expected])
    }
    // A holder may change its own copy: its neighbours in the slab do not see it.
    for (let index = 0; index < copies.length; index += 2) {
      copies[index][0].fill(0xab)
      copies[index][1].fill(0xab)
    }
    for (const [copied, expected] of copies) expect(copied).toEqual(expected)
  })
})
