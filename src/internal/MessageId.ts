/**
 * Default message ids: UUID version 7 (RFC 9562), time-ordered. A durable queue indexes every
 * id; random (version 4) ids land on a random index page each, so a batch of a thousand dirties
 * about a thousand pages (and writes each to the log), while ids of messages sent one after the
 * other sort together and fill the same few pages.
 *
 * Layout: 48 bits of Unix milliseconds, the version, 12 bits, the variant, 62 bits. The 74 bits
 * after the time are drawn at random for the first id of a millisecond, and each further id of
 * that millisecond adds one to their last 48 (RFC 9562's "monotonic random" method): ids of one
 * millisecond stay in order and unique, another process's ids start 74 random bits away, and an
 * id costs a clock read and a digit or two instead of ten random bytes. Should the clock step
 * back, the ids go on counting in the last millisecond used; should the count run past the last
 * 48 bits, the next id takes the millisecond after it. Either way ids stay ordered.
 */
import { randomFillSync } from "node:crypto"

/** The two ASCII hex digits of every byte value, at 2 * byte. */
const hexDigits = new Uint8Array(512)
for (let byte = 0; byte < 256; byte++) {
  const digits = byte.toString(16).padStart(2, "0")
  hexDigits[2 * byte] = digits.charCodeAt(0)
  hexDigits[2 * byte + 1] = digits.charCodeAt(1)
}

/**
 * Reads 36 ASCII bytes out as one flat string: Buffer's own latin1 reader where the runtime has
 * it (Node does), skipping `toString`'s encoding dispatch; `toString` otherwise.
 */
const latin1Slice = (Buffer.prototype as unknown as { readonly latin1Slice?: (start: number, end: number) => string }).latin1Slice
const readText: (text: Buffer) => string = typeof latin1Slice === "function"
  ? (text) => latin1Slice.call(text, 0, 36)
  : (text) => text.toString("latin1", 0, 36)

const Zero = 0x30
const Nine = 0x39
const LowerA = 0x61
const LowerF = 0x66

/** Where the 48 random bits after the last dash are written, as 12 hex digits. */
const TailStart = 24

/** Makes ids from a clock (Unix milliseconds) and a source of random bytes. */
export const makeIdSource = (clock: () => number, fillRandom: (bytes: Uint8Array) => void): () => string => {
  const text = Buffer.alloc(36, 0x2d)
  const put = (position: number, byte: number): void => {
    text[position] = hexDigits[2 * byte]
    text[position + 1] = hexDigits[2 * byte + 1]
  }
  // Random bytes, drawn a few thousand at a time (ten per millisecond that sends).
  const entropy = new Uint8Array(4096)
  let used = entropy.length
  const randomByte = (): number => {
    if (used === entropy.length) {
      fillRandom(entropy)
      used = 0
    }
    return entropy[used++]
  }
  let lastMillis = -1

  /** A millisecond's first id: its time, then 74 fresh random bits around the version and variant. */
  const start = (millis: number): void => {
    lastMillis = millis
    const high = Math.floor(millis / 0x10000)
    const low = millis % 0x10000
    put(0, (high >>> 24) & 0xff)
    put(2, (high >>> 16) & 0xff)
    put(4, (high >>> 8) & 0xff)
    put(6, high & 0xff)
    put(9, low >>> 8)
    put(11, low & 0xff)
    put(14, 0x70 | (randomByte() & 0x0f))
    put(16, randomByte())
    put(19, 0x80 | (randomByte() & 0x3f))
    put(21, randomByte())
    for (let index = 0; index < 6; index++) put(TailStart + 2 * index, randomByte())
  }

  /** Adds one to the last 48 bits; false when they were all ones (then they wrap to zero). */
  const increment = (): boolean => {
    for (let position = 35; position >= TailStart; position--) {
      const digit = text[position]
      if (digit !== LowerF) {
        text[position] = digit === Nine ? LowerA : digit + 1
        return true
      }
      text[position] = Zero
    }
    return false
  }

  return () => {
    const now = clock()
    if (now > lastMillis) start(now)
    else if (!increment()) start(lastMillis + 1)
    return readText(text)
  }
}

/** A fresh, time-ordered message id (a UUID version 7 string). */
export const newMessageId: () => string = makeIdSource(Date.now, (bytes) => void randomFillSync(bytes))
