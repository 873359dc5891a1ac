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

const hex: ReadonlyArray<string> = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, "0"))

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

/** A fresh, time-ordered message id (a UUID version 7 string). */
export const newMessageId = (): string => {
  const now = Date.now()
  if (now > lastMillis) {
    lastMillis = now
    counter = ((randomByte() << 8) | randomByte()) & 0x7ff
  } else if (++counter > 0xfff) {
    lastMillis++
    counter = 0
  }
  const high = Math.floor(lastMillis / 0x10000)
  const low = lastMillis % 0x10000
  let tail = ""
  for (let index = 0; index < 6; index++) tail += hex[randomByte()]
  return hex[(high >>> 24) & 0xff] + hex[(high >>> 16) & 0xff] + hex[(high >>> 8) & 0xff] + hex[high & 0xff] + "-" +
    hex[low >>> 8] + hex[low & 0xff] + "-" +
    hex[0x70 | (counter >>> 8)] + hex[counter & 0xff] + "-" +
    hex[0x80 | (randomByte() & 0x3f)] + hex[randomByte()] + "-" + tail
}
