/**
 * Buffers for a volatile producer's snapshots of payloads too large for one chunk, recycled once
 * their message is confirmed. Without it each such message leaves a buffer of its size to the
 * garbage collector, which V8 frees only some 64 MiB of external memory later.
 *
 * A buffer may be recycled only when nothing else can still reach it. The producer controller
 * makes sure of that (see `release` and `keep`); the pool recycles only the buffers it handed
 * out, each at most once, and never hands one out twice at the same time.
 */
import * as SlabCopy from "../../Protocol/SlabCopy.js"

export interface SnapshotPool {
  /** A copy of `bytes`; in a recycled buffer when it is larger than a chunk and one fits. */
  readonly copy: (bytes: Uint8Array) => Uint8Array
  /**
   * The message whose snapshot `bytes` (or any chunk of it) belongs to is confirmed, and no
   * envelope outside the producer can still hold it: its buffer may be handed out again.
   */
  readonly release: (bytes: Uint8Array) => void
  /** Another envelope may hold `bytes` beyond its confirmation: its buffer is never recycled. */
  readonly keep: (bytes: Uint8Array) => void
}

export const make = (options: {
  readonly chunkSize: number
  /** How many idle buffers to keep; a release beyond that leaves its buffer to the collector. */
  readonly idle: number
}): SnapshotPool => {
  const { chunkSize } = options
  const idle: Array<ArrayBufferLike> = []
  const lent = new WeakSet<ArrayBufferLike>()

  /** An idle buffer that holds `length` bytes with less than a chunk to spare. */
  const take = (length: number): ArrayBufferLike | undefined => {
    for (let index = 0; index < idle.length; index++) {
      const buffer = idle[index]
      if (buffer.byteLength >= length && buffer.byteLength - length < chunkSize) {
        idle.splice(index, 1)
        return buffer
      }
    }
    return undefined
  }

  return {
    copy: (bytes) => {
      if (bytes.length <= chunkSize) return SlabCopy.copy(bytes)
      const recycled = take(bytes.length)
      const copy = recycled === undefined ? bytes.slice() : new Uint8Array(recycled, 0, bytes.length)
      if (recycled !== undefined) copy.set(bytes)
      lent.add(copy.buffer)
      return copy
    },
    release: (bytes) => {
      if (lent.delete(bytes.buffer) && idle.length < options.idle) idle.push(bytes.buffer)
    },
    keep: (bytes) => void lent.delete(bytes.buffer)
  }
}
