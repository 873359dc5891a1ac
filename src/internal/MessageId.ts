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

/** Two and three lowercase hex digits of every value. */
const hex2 = Array.from({ length: 256 }, (_, value) => value.toString(16).padStart(2, "0"))
const hex3 = Array.from({ length: 4096 }, (_, value) => value.toString(16).padStart(3, "0"))
/** The variant's hex digit (binary 10xx) for two random bits. */
const variantDigit = ["8", "9", "a", "b"]

/**
 * Random bytes drawn from the OS a few thousand at a time, and the same bytes as hex: an id takes
 * 8 bytes (16 digits) of it, reading the variant's two random bits from its first byte and its
 * other 60 random bits as the digits that follow (no per-byte formatting).
 */
const entropy = Buffer.alloc(4096)
let entropyHex = ""
let used = entropy.length

const refill = (): void => {
  randomFillSync(entropy)
  entropyHex = entropy.toString("hex")
  used = 0
}

let lastMillis = -1
let counter = 0
/** `tttttttt-tttt-7` for `lastMillis`: the part of the id that changes once per millisecond. */
let prefix = ""

const startMillis = (millis: number): void => {
  lastMillis = millis
  const high = Math.floor(millis / 0x10000)
  const low = millis % 0x10000
  prefix = hex2[(high >>> 24) & 0xff] + hex2[(high >>> 16) & 0xff] + hex2[(high >>> 8) & 0xff] + hex2[high & 0xff] +
    "-" + hex2[low >>> 8] + hex2[low & 0xff] + "-7"
}

/** A fresh, time-ordered message id (a UUID version 7 string). */
export const newMessageId = (): string => {
  if (used + 10 > entropy.length) refill()
  const now = Date.now()
  if (now > lastMillis) {
    startMillis(now)
    counter = ((entropy[used] << 8) | entropy[used + 1]) & 0x7ff
    used += 2
  } else if (++counter > 0xfff) {
    startMillis(lastMillis + 1)
    counter = 0
  }
  const at = 2 * used
  const id = prefix + hex3[counter] + "-" + variantDigit[entropy[used] >>> 6] + entropyHex.substring(at + 1, at + 4) + "-" +
    entropyHex.substring(at + 4, at + 16)
  used += 8
  return id
}
