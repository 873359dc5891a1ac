/**
 * Frames read from one connection, turned into envelopes for this node's inboxes. A connection
 * carries its peer node's envelopes only, and of the kinds its direction carries: anything else
 * (an envelope sent in another node's name, a reply where no question went) is dropped and
 * counted, never delivered.
 */
import type { Envelope } from "../../Protocol/WireMessage.js"
import { FrameReader, makeBodyDecoder } from "./FrameCodec.js"
import type { ReadViolation } from "./FrameCodec.js"
import type { Counters } from "./SocketStats.js"

export class FrameIntake {
  private readonly reader: FrameReader
  private readonly decode = makeBodyDecoder()
  /** Frames completed by the last `push`. */
  completed = 0

  constructor(
    maxFrameSize: number,
    private readonly accepts: (envelope: Envelope) => boolean,
    private readonly counters: Counters,
    private readonly deliver: (envelope: Envelope) => void
  ) {
    this.reader = new FrameReader(maxFrameSize)
  }

  /** Bytes held for the frame not yet complete. */
  get buffered(): number {
    return this.reader.buffered
  }

  /** Reads one chunk; a violation means the connection's framing can no longer be trusted. */
  push(chunk: Buffer): ReadViolation | undefined {
    this.completed = 0
    return this.reader.push(chunk, this.onFrame)
  }

  private readonly onFrame = (buffer: Buffer, start: number, end: number, owned: boolean): void => {
    this.completed++
    const envelope = this.decode(buffer, start, end, owned)
    if (envelope === undefined) this.counters.malformed++
    else if (!this.accepts(envelope)) this.counters.droppedSpoofed++
    else this.deliver(envelope)
  }
}
