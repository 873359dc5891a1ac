/**
 * Test support: a memory transport that records every envelope posted (with the clock time),
 * fake endpoints whose inbox the test reads, and the test kit's helpers (`effect-reliable/testing`)
 * that drive the TestClock.
 */
import { Context, Duration, Effect, Layer, Queue, TestClock } from "effect"
import type { Scope } from "effect"
import type { EndpointKind } from "../../src/internal/EndpointRegistry.js"
import type { ControllerAddress } from "../../src/Protocol/Address.js"
import type { Envelope, WireMessage } from "../../src/Protocol/WireMessage.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as Testing from "../../src/Testing.js"
import { settle } from "../../src/Testing.js"
import * as MemoryTransport from "../../src/Transport/MemoryTransport.js"
import { Transport } from "../../src/Transport/Transport.js"

export interface Recorded {
  readonly at: number
  readonly envelope: Envelope
}

export class Recorder extends Context.Tag("test/Recorder")<Recorder, { readonly log: Array<Recorded> }>() {}

/** A memory transport that records what is posted; plus a system on it. */
export const layerRecording = (): Layer.Layer<Recorder | Transport | ReliableSystem.ReliableSystem> => {
  const recording = Layer.effectContext(Effect.gen(function*() {
    const clock = yield* Effect.clock
    const log: Array<Recorded> = []
    const inner = MemoryTransport.makeNode(MemoryTransport.makeHub(), "memory")
    const transport = {
      ...inner,
      post: (envelopes: ReadonlyArray<Envelope>) => {
        for (const envelope of envelopes) log.push({ at: clock.unsafeCurrentTimeMillis(), envelope })
        inner.post(envelopes)
      }
    }
    return Context.make(Transport, transport).pipe(Context.add(Recorder, { log }))
  }))
  return Layer.orDie(Layer.provideMerge(ReliableSystem.layer(), recording))
}

/** Messages of one tag the recorder saw, with their times. */
export const recorded = <T extends WireMessage["_tag"]>(tag: T) =>
  Effect.map(Recorder, ({ log }) =>
    log.filter((entry) => entry.envelope.message._tag === tag) as Array<{ readonly at: number; readonly envelope: Envelope & { message: Extract<WireMessage, { _tag: T }> } }>
  )

/**
 * A fake endpoint: a registry record naming `peer`, and an inbox the test reads. Lets a test
 * play one side of the protocol by hand.
 */
export const fakeEndpoint = (
  name: string,
  kind: EndpointKind,
  peer: string
): Effect.Effect<{ readonly address: ControllerAddress; readonly inbox: Queue.Dequeue<Envelope> }, never, ReliableSystem.ReliableSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const system = (yield* ReliableSystem.ReliableSystem).internal
    const address: ControllerAddress = { node: system.transport.node, endpoint: name, incarnation: `fake-${name}` }
    const inbox = yield* system.transport.open(address)
    yield* Effect.orDie(system.registry.claim({ name, kind, peer, address }, Effect.void))
    return { address, inbox }
  })

/** The live controller address of a local endpoint. */
export const addressOf = (name: string) =>
  Effect.flatMap(ReliableSystem.ReliableSystem, (system) => {
    const address = system.internal.registry.get(name)?.record.address
    return address === undefined ? Effect.dieMessage(`no live controller for ${name}`) : Effect.succeed(address)
  })

/** Posts one message as if `from` had sent it. */
export const inject = (from: ControllerAddress, to: ControllerAddress, message: WireMessage) =>
  Effect.flatMap(ReliableSystem.ReliableSystem, (system) => Effect.sync(() => system.internal.transport.post([{ from, to, message }])))

export { advanceBy, microtaskScheduler, onMicrotasks, settle } from "../../src/Testing.js"
/** Moves the TestClock to an absolute time (ms since start) and lets fibers run. */
export const advanceTo = (millis: number) =>
  Effect.gen(function*() {
    const now = yield* TestClock.currentTimeMillis
    if (millis > now) yield* TestClock.adjust(Duration.millis(millis - now))
    yield* settle
  })

/** A condition's own source, as the label of a wait that was given none. */
const labelOf = (done: () => boolean): string => {
  const source = done.toString().replace(/\s+/g, " ")
  return source.length > 160 ? `${source.slice(0, 157)}...` : source
}

/**
 * The kit's `advanceUntil` (`effect-reliable/testing`) with positional step and limit: advances
 * the TestClock until `done` holds; after `limitMs` of test time fails naming `label` (by default
 * the condition's source), with the stats of the system in context.
 */
export const advanceUntil = (done: () => boolean, stepMs: number, limitMs: number, label = labelOf(done)) =>
  Testing.advanceUntil(done, { label, step: Duration.millis(stepMs), within: Duration.millis(limitMs) })

/** Drains what is queued in an inbox right now. */
export const drain = (inbox: Queue.Dequeue<Envelope>) => Effect.map(Queue.takeAll(inbox), (chunk) => Array.from(chunk))
