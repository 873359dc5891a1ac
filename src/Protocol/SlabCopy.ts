/**
 * Copies of small byte arrays cut from shared slabs: binary payloads' snapshots, handlers' bytes,
 * and payloads read off a socket. V8 makes an array of more than 64 bytes outside its heap, at
 * about 600 ns each here, while a view into a slab costs about 30 ns; Node's own `Buffer.from`
 * pools small buffers the same way. Each copy is a view of its own bytes: its holder may keep and
 * change them, and keeping them keeps their slab alive (8 KiB at most). Up to 64 bytes and beyond
 * half a slab a copy is an array of its own: the small ones V8 makes in its heap, cheaper than a
 * view, and for the large ones the copy costs more than the array.
 */

export const SlabBytes = 8192

/** The largest copy cut from a slab. */
export const MaxSlabCopy = SlabBytes / 2

const HeapArrayBytes = 64

let slab = new Uint8Array(SlabBytes)
let used = 0

/** A copy of `bytes`: a view into a shared slab from 65 bytes up to half a slab, an array of its own otherwise. */
export const copy = (bytes: Uint8Array): Uint8Array => copyRange(bytes, 0, bytes.length)

/** A copy of `source`'s bytes from `start` to `end`, as `copy` makes it. */
export const copyRange = (source: Uint8Array, start: number, end: number): Uint8Array => {
  const length = end - start
  const copied = length <= HeapArrayBytes || length > MaxSlabCopy ? new Uint8Array(length) : slabView(length)
  copied.set(start === 0 && end === source.length ? source : source.subarray(start, end))
  return copied
}

/** `length` bytes of the shared slab not handed out yet; a new slab when they do not fit. */
const slabView = (length: number): Uint8Array => {
  if (used + length > SlabBytes) {
    slab = new Uint8Array(SlabBytes)
    used = 0
  }
  const view = new Uint8Array(slab.buffer, used, length)
  used += length
  return view
}
