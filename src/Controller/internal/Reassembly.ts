/**
 * Joining the chunks of a message into the bytes handed to the consumer's endpoint.
 *
 * By default the handler owns what it gets, so every hand-out is a new array. A consumer that
 * lends payloads (`lendPayloads`) promises only that the bytes stay as they are until the delivery
 * is confirmed, so it allocates nothing per message: when the chunks lie end to end in one buffer
 * (in one process they are views of the producer's snapshot, which the producer reuses only once
 * the message is confirmed) the hand-out is a view of them; otherwise they are copied into one
 * buffer of the consumer's own, reused for every message and grown to the largest.
 */

/** A new array holding `chunks` in order. */
export const join = (chunks: ReadonlyArray<Uint8Array>): Uint8Array => copyInto(new Uint8Array(totalLength(chunks)), chunks)

export interface LentJoin {
  /** `chunks` in order, as bytes valid until the next call. */
  readonly join: (chunks: ReadonlyArray<Uint8Array>) => Uint8Array
}

export const makeLent = (): LentJoin => {
  let buffer: Uint8Array | undefined
  return {
    join: (chunks) => {
      const view = endToEnd(chunks)
      if (view !== undefined) return view
      const length = totalLength(chunks)
      if (buffer === undefined || buffer.length < length) buffer = new Uint8Array(length)
      return copyInto(buffer.subarray(0, length), chunks)
    }
  }
}

/** One view of `chunks` when each starts where the one before ends, in the same buffer. */
const endToEnd = (chunks: ReadonlyArray<Uint8Array>): Uint8Array | undefined => {
  const first = chunks[0]
  let end = first.byteOffset + first.length
  for (let index = 1; index < chunks.length; index++) {
    const chunk = chunks[index]
    if (chunk.buffer !== first.buffer || chunk.byteOffset !== end) return undefined
    end += chunk.length
  }
  return new Uint8Array(first.buffer, first.byteOffset, end - first.byteOffset)
}

const totalLength = (chunks: ReadonlyArray<Uint8Array>): number => {
  let length = 0
  for (const chunk of chunks) length += chunk.length
  return length
}

const copyInto = (target: Uint8Array, chunks: ReadonlyArray<Uint8Array>): Uint8Array => {
  let offset = 0
  for (const chunk of chunks) {
    target.set(chunk, offset)
    offset += chunk.length
  }
  return target
}
