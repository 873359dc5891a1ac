/**
 * Byte payloads for large-message tests: content that depends on its salt, so a mixed-up,
 * overwritten or reordered chunk shows, and an equality check fast enough for a MiB.
 */

/** `length` bytes whose content depends on `salt`. */
export const blob = (length: number, salt = 0): Uint8Array => {
  const bytes = new Uint8Array(length)
  for (let index = 0; index < length; index++) bytes[index] = (index * 7 + salt * 13 + (index >> 10)) & 0xff
  return bytes
}

/** Byte equality without a per-element deep compare (slow for a MiB); views are not copied. */
export const sameBytes = (actual: Uint8Array, expected: Uint8Array): boolean =>
  Buffer.from(actual.buffer, actual.byteOffset, actual.length).equals(Buffer.from(expected.buffer, expected.byteOffset, expected.length))
