/**
 * Large messages on the memory transport: binary payloads (`Schema.Uint8ArrayFromSelf`, carried
 * as raw bytes) split into chunks, reassembled and handed to `consumer.run`, measured in MiB/s.
 * The row's note states the memory bound the issue sets (four messages plus a window of chunks,
 * above the process's RSS before the flow) and what the run reached.
 *
 * The producer copies the caller's bytes into a buffer recycled from a confirmed message (its
 * chunks are views of that copy). By default the consumer joins each message into a new array
 * the handler owns: one allocation of the message's size per message, which V8 frees only when
 * its own heuristics next collect, so the peak is the live set (24 MiB, at most 32) plus some
 * 40 MiB of joined messages not yet collected plus heap. The `lend` variant sets `lendPayloads`:
 * the handler gets a view of the producer's snapshot, valid until confirmed, and nothing is
 * allocated per message. The `collect` variant keeps the default and runs a full collection after
 * every delivery (the harness passes --expose-gc) to show the default's live set itself.
 */
import { Deferred, Effect, Layer, Schema } from "effect"
import * as Consumer from "../src/Consumer.js"
import * as Producer from "../src/Producer.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import { measure } from "./Row.js"

const MiB = 1024 * 1024

const rssMiB = () => process.memoryUsage.rss() / MiB

export const chunkedFlow = (options: {
  readonly messages: number
  readonly messageBytes: number
  readonly chunkSize: number
  readonly window: number
  /** A full garbage collection after every delivery. */
  readonly collect?: boolean
  /** The consumer lends payloads (`lendPayloads`) instead of handing each out in an array of its own. */
  readonly lend?: boolean
}) =>
  Effect.suspend(() => {
    const { chunkSize, messageBytes, messages, window } = options
    const gc = options.collect === true ? (globalThis as { gc?: () => void }).gc : undefined
    if (options.collect === true && gc === undefined) return Effect.dieMessage("run with --expose-gc")
    const payload = new Uint8Array(messageBytes)
    for (let index = 0; index < messageBytes; index += 4096) payload[index] = index & 0xff
    const before = rssMiB()
    // ArrayBuffer bytes alive right after a collection, beyond the bench's own source payload.
    let liveBytes = 0
    const flow = Effect.gen(function*() {
      const producer = yield* Producer.make({ name: "blobs-out", consumer: "blobs-in", payload: Schema.Uint8ArrayFromSelf, chunkSize })
      const consumer = yield* Consumer.make({ name: "blobs-in", producer: "blobs-out", payload: Schema.Uint8ArrayFromSelf, window, lendPayloads: options.lend === true })
      const done = yield* Deferred.make<void>()
      let received = 0
      let bytes = 0
      yield* Effect.forkScoped(consumer.run((delivery) =>
        Effect.sync(() => {
          bytes += delivery.payload.length
          if (gc !== undefined) {
            gc()
            liveBytes = Math.max(liveBytes, process.memoryUsage().arrayBuffers - messageBytes)
          }
          if (++received === messages) Deferred.unsafeDone(done, Effect.void)
        })
      ))
      for (let index = 0; index < messages; index++) yield* producer.send(payload)
      yield* Deferred.await(done)
      if (bytes !== messages * messageBytes) return yield* Effect.dieMessage(`received ${bytes} bytes`)
    }).pipe(
      Effect.scoped,
      Effect.provide(ReliableSystem.layer().pipe(Layer.provide(MemoryTransport.layerMemory)))
    )
    const total = (messages * messageBytes) / MiB
    const bound = 4 * (messageBytes / MiB) + (window * chunkSize) / MiB
    return Effect.map(
      measure(
        `chunked send loop, ${messages} msgs of ${messageBytes / MiB} MiB, ${chunkSize / 1024} KiB chunks, window ${window}` +
          (options.lend === true ? ", lendPayloads" : "") + (gc === undefined ? "" : ", gc() after each delivery"),
        total,
        flow,
        "MiB/s"
      ),
      (row) => ({
        ...row,
        note: `RSS ${before.toFixed(0)} MiB before the flow, +${(row.peakRssMiB - before).toFixed(0)} MiB at peak` +
          (gc === undefined ? "" : `, live payload bytes at most ${(liveBytes / MiB).toFixed(0)} MiB`) +
          `; bound ${bound.toFixed(1)} MiB (4 messages + ${window} chunks)`
      })
    )
  })
