/**
 * Test support for attacks on the socket transport: a steady flow of sequenced envelopes between
 * two honest nodes while a test attacks one of them.
 */
import { expect } from "@effect/vitest"
import { Chunk, Duration, Effect, Fiber, Queue, Schedule } from "effect"
import type { ControllerAddress } from "../../src/Protocol/Address.js"
import type { Envelope } from "../../src/Protocol/WireMessage.js"
import type { SocketTransportService } from "../../src/Transport/SocketTransport.js"
import { waitUntil } from "./Nodes.js"

const sequenced = (from: ControllerAddress, to: ControllerAddress, seq: number): Envelope => ({
  from,
  to,
  message: { _tag: "SequencedMessage", sessionId: "honest", messageId: `m-${seq}`, seq, payload: new Uint8Array(64).fill(seq & 0xff) }
})

export interface HonestFlow {
  /** Waits until `count` more envelopes arrived: the flow is moving now. */
  readonly progresses: (count?: number) => Effect.Effect<void, Error>
  /** Stops sending and checks that every envelope sent arrived, once, in order. */
  readonly check: Effect.Effect<void, Error>
}

/**
 * From `from` to an inbox on `to`, 20 envelopes every 10 ms over the real transport, for the life
 * of the scope (or until `check`). Nothing in it may be lost: the attacks must not touch it.
 */
export const honestFlow = (from: SocketTransportService, to: SocketTransportService) =>
  Effect.gen(function*() {
    const source: ControllerAddress = { node: from.node, endpoint: "honest-out", incarnation: "i-1" }
    const target: ControllerAddress = { node: to.node, endpoint: "honest-in", incarnation: "i-1" }
    const inbox = yield* to.open(target)
    const received: Array<number> = []
    let sent = 0
    yield* Effect.forkScoped(Effect.forever(Effect.map(Queue.takeBetween(inbox, 1, 1000), (envelopes) => {
      for (const envelope of Chunk.toReadonlyArray(envelopes)) received.push(envelope.message._tag === "SequencedMessage" ? envelope.message.seq : -1)
    })))
    const sender = yield* Effect.forkScoped(Effect.repeat(
      Effect.sync(() => from.post(Array.from({ length: 20 }, () => sequenced(source, target, ++sent)))),
      Schedule.spaced(Duration.millis(10))
    ))
    yield* waitUntil("the honest flow to start", () => received.length > 0)
    const flow: HonestFlow = {
      progresses: (count = 200) =>
        Effect.suspend(() => {
          const start = received.length
          return waitUntil("the honest flow to move on", () => received.length >= start + count)
        }),
      check: Effect.gen(function*() {
        yield* Fiber.interrupt(sender)
        yield* waitUntil("every honest envelope", () => received.length >= sent)
        expect(received.length).toBe(sent)
        expect(received.every((seq, index) => seq === index + 1)).toBe(true)
      })
    }
    return flow
  })
