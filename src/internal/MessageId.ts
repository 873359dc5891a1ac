/**
 * Default message ids: UUID version 7 (RFC 9562), time-ordered. A durable queue indexes every
 * id; random (version 4) ids land on a random index page each, so a batch of a thousand dirties
 * about a thousand pages (and writes each to the log), while ids of messages sent one after the
 * other sort together and fill the same few pages.
 *
 * Layout: 48 bits of Unix milliseconds, the version, a 12-bit counter that keeps ids of one
 * millisecond in order (it starts at a random value in its lower half each millisecond; should it
 * overflow, the id borrows the next millisecond, so ids stay ordered even if the clock steps
 * back), the variant, and 62 random bits.
 */
import { randomFillSync } from "node:crypto"

/** The two ASCII hex digits of every byte value, at 2 * byte. */
const hexDigits = new Uint8Array(512)
for (let byte = 0; byte < 256; byte++) {
  const digits = byte.toString(16).padStart(2, "0")
  hexDigits[2 * byte] = digits.charCodeAt(0)
  hexDigits[2 * byte + 1] = digits.charCodeAt(1)
}

/** The id is written here as ASCII and read out as one flat string (no concatenations). */
const text = Buffer.alloc(36, 0x2d)

/**
 * Reads the id out: Buffer's own latin1 reader where the runtime has it (Node does), skipping
 * `toString`'s encoding dispatch; `toString` otherwise.
 */
const latin1Slice = (Buffer.prototype as unknown as { readonly latin1Slice?: (start: number, end: number) => string }).latin1Slice
const readText: () => string = typeof latin1Slice === "function"
  ? () => latin1Slice.call(text, 0, 36)
  : () => text.toString("latin1", 0, 36)

const put = (position: number, byte: number): void => {
  text[position] = hexDigits[2 * byte]
  text[position + 1] = hexDigits[2 * byte + 1]
}

/** Random bytes, drawn from the OS a few thousand at a time. */
const entropy = new Uint8Array(4096)
let used = entropy.length

const randomByte = (): number => {
  if (used === entropy.length) {
    randomFillSync(entropy)
    used = 0
  }
  return entropy[used++]
}

let lastMillis = -1
let counter = 0

/** The time part is written once per millisecond: the ids of one millisecond share it. */
const putMillis = (millis: number): void => {
  lastMillis = millis
  const high = Math.floor(millis / 0x10000)
  const low = millis % 0x10000
  put(0, (high >>> 24) & 0xff)
  put(2, (high >>> 16) & 0xff)
  put(4, (high >>> 8) & 0xff)
  put(6, high & 0xff)
  put(9, low >>> 8)
  put(11, low & 0xff)
}

/** A fresh, time-ordered message id (a UUID version 7 string). */
export const newMessageId = (): string => {
  const now = Date.now()
  if (now > lastMillis) {
    counter = ((randomByte() << 8) | randomByte()) & 0x7ff
    putMillis(now)
  } else if (++counter > 0xfff) {
    counter = 0
    putMillis(lastMillis + 1)
  }
  put(14, 0x70 | (counter >>> 8))
  put(16, counter & 0xff)
  put(19, 0x80 | (randomByte() & 0x3f))
  put(21, randomByte())
  for (let index = 0; index < 6; index++) put(24 + 2 * index, randomByte())
  return readText()
}
