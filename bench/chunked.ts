/**
 * Large messages on the memory transport: binary payloads (`Schema.Uint8ArrayFromSelf`, carried
 * as raw bytes) split into chunks, reassembled and handed to `consumer.run`, measured in MiB/s.
 * The row's note states the memory bound the issue sets (four messages plus a window of chunks,
 * above the process's RSS before the flow) and what the run reached.
 *
 * Each message allocates one buffer of its size: the consumer's reassembly, which the handler
 * owns. The producer copies the caller's bytes into a buffer recycled from a confirmed message
 * (its chunks are views of that copy), so the flow holds the delivery in hand and the snapshots
 * of it and the next message: 24 MiB, at most 32. A reassembly the handler dropped is freed when
 * V8's own heuristics next collect (here a scavenge every few messages, leaving some for a full
 * collection), so with the collector left alone the peak is that live set plus 45-65 MiB of
 * reassemblies not yet collected and some heap; glibc keeps nothing extra (RSS peaks the same
 * with MALLOC_MMAP_THRESHOLD_ fixed). The `collect` variant runs a full collection after every
 * delivery (the harness passes --expose-gc) to show the live set itself: what the flow holds,
 * bounded by the windows.
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
      const consumer = yield* Consumer.make({ name: "blobs-in", producer: "blobs-out", payload: Schema.Uint8ArrayFromSelf, window })
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
          (gc === undefined ? "" : ", gc() after each delivery"),
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
