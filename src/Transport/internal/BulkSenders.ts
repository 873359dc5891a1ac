/**
 * Which senders' frames take a peer's bulk connection. A node opens a second connection to a
 * peer for senders of large frames (chunks of big messages, big unchunked payloads): kernel
 * socket buffers hold megabytes, and on a shared connection every small frame of every other
 * flow would queue behind those bytes in the kernel, where no scheduling of ours can reach them.
 *
 * A sender moves to the bulk connection with its first large frame and stays there, so its
 * frames keep their order from then on (only the frames it sent just before that first large one
 * may be overtaken, once, which the protocol tolerates).
 */

/** A frame body above this many bytes is large. */
export const BulkFrameBytes = 64 * 1024

/** Remembered bulk senders; the oldest are forgotten beyond this many (controller incarnations). */
const Capacity = 4096

export class BulkSenders {
  private readonly senders = new Set<string>()

  /** True when `sender`'s frame of `bodyBytes` goes over the bulk connection. */
  classify(sender: string, bodyBytes: number): boolean {
    if (this.senders.has(sender)) return true
    if (bodyBytes <= BulkFrameBytes) return false
    if (this.senders.size >= Capacity) this.senders.delete(this.senders.values().next().value!)
    this.senders.add(sender)
    return true
  }
}
