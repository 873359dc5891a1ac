/**
 * The ingress of a producer endpoint against a scripted controller: senders are served in
 * arrival order, a grant serves only the senders it carries, waiting senders share one grant
 * (group commit) with answers identical to one by one, refusals fail only their sender, and a
 * closed endpoint fails every waiting and later caller.
 */
import { describe, expect, it } from "@effect/vitest"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { Effect, Either, Exit, Fiber } from "effect"
import { PendingAnswer } from "../src/Controller/internal/ProducerCalls.js"
import type { Answer } from "../src/Controller/internal/ProducerCalls.js"
import type { Handshake, ProduceItem } from "../src/Controller/internal/ProducerHandshake.js"
import { DeferredItem } from "../src/internal/DeferredItem.js"
import * as Ingress from "../src/internal/Ingress.js"
import { RequestNext, Stored } from "../src/Protocol/Contract.js"
import { FrameTooLarge, MessageRejected, PayloadEncodeError } from "../src/Protocol/Errors.js"
import { settle } from "./support/Harness.js"

interface Script {
  /** Messages the next grant may carry. */
  free: number
  /** Durable: answers wait until the test settles them. */
  durable: boolean
  /** Refuse items whose id is listed (before anything is stored, keeping the grant). */
  tooLarge: Set<string>
  /** A durable store refuses a batch holding any of these ids (the batch as a whole). */
  rejected: Set<string>
}

/** A controller that offers one grant at a time and stores what it is given. */
const scripted = (script: Script) => {
  let handshake: Handshake = { _tag: "Idle" }
  let grants = 0
  let seq = 0
  const batches: Array<ReadonlyArray<string>> = []
  const submitted: Array<ReadonlyArray<string>> = []
  const pending: Array<() => void> = []

  const offer = () => {
    const grant = new RequestNext({ endpoint: "p", controller: "c1", token: `t${++grants}` })
    handshake = { _tag: "Granted", grant, offeredAt: 0 }
    ingress.offer(grant)
  }

  const store = (grant: RequestNext, items: ReadonlyArray<ProduceItem>): Answer => {
    batches.push(items.map((item) => item.messageId))
    handshake = { _tag: "Idle" }
    return Either.right(items.map((item) =>
      new Stored({ endpoint: "p", controller: "c1", token: grant.token, messageId: item.messageId, seq: ++seq, alreadyStored: false })
    ))
  }

  const controller: Ingress.IngressController = {
    running: () => true,
    freeDemand: () => script.free,
    handshake: () => handshake,
    ackAll: () => {},
    submit: (grant, items) => {
      submitted.push(items.map((item) => item.messageId))
      const tooLarge = items.find((item) => script.tooLarge.has(item.messageId))
      if (tooLarge !== undefined) {
        return Either.left(new FrameTooLarge({ size: 1, maxFrameSize: 0, messageTag: "SequencedMessage", messageId: tooLarge.messageId }))
      }
      if (!script.durable) {
        const answer = store(grant, items)
        offer()
        return answer
      }
      handshake = { _tag: "Storing", grant, messageIds: items.map((item) => item.messageId), acknowledged: true }
      const answer = new PendingAnswer()
      pending.push(() => {
        if (items.some((item) => script.rejected.has(item.messageId))) {
          handshake = { _tag: "Granted", grant, offeredAt: 0 }
          const only = items.length === 1 ? items[0].messageId : undefined
          answer.resolve(Either.left(new MessageRejected({ endpointName: "p", messageId: only, cause: "refused" })))
          ingress.offer(grant)
          return
        }
        answer.resolve(store(grant, items))
        offer()
      })
      return answer
    }
  }
  const ingress = Ingress.make({ endpoint: "p", maxBatch: 1000, controllerOf: () => controller })
  /** Settles the durable answers waiting now, in order. */
  const answerAll = () => {
    const now = pending.splice(0)
    for (const answer of now) answer()
  }
  return { ingress, offer, batches, submitted, answerAll, pendingCount: () => pending.length }
}

const script = (overrides: Partial<Script> = {}): Script => ({
  free: 1,
  durable: false,
  tooLarge: new Set(),
  rejected: new Set(),
  ...overrides
})

/** A full garbage collection, on the next turn of the event loop (a WeakRef's target is kept for the current one). */
const collectGarbage = Effect.promise(() =>
  new Promise<void>((resolve) =>
    setImmediate(() => {
      setFlagsFromString("--expose-gc")
      ;(runInNewContext("gc") as () => void)()
      resolve()
    })
  )
)

const item = (messageId: string): ProduceItem => ({ messageId, payload: new Uint8Array([1]) })

/** Deferred items that count their encodings; an id in `broken` no longer encodes. */
const deferred = (broken: ReadonlySet<string> = new Set()) => {
  const encoded: Array<string> = []
  const make = (messageId: string) =>
    new DeferredItem(messageId, messageId, undefined, (_payload, id) => {
      if (broken.has(id)) return new PayloadEncodeError({ endpointName: "p", messageId: id, cause: "changed" })
      encoded.push(id)
      return { messageId: id, payload: new Uint8Array([2]) }
    })
  return { make, encoded }
}

/** Forks one sender per id, in order; each waits for its own answer. */
const senders = (ingress: Ingress.Ingress, ids: ReadonlyArray<string>) =>
  Effect.forEach(ids, (id) => Effect.fork(Effect.suspend(() => ingress.send([item(id)]))))

describe("Ingress", () => {
  it.effect("1,000 waiting senders are served in arrival order, one grant each serving exactly one", () =>
    Effect.gen(function*() {
      const { ingress, offer, submitted } = scripted(script({ free: 1, durable: true }))
      const ids = Array.from({ length: 1000 }, (_, index) => `m${index}`)
      const fibers = yield* senders(ingress, ids)
      yield* settle
      expect(ingress.waiting()).toBe(1000)
      // One grant serves the head only.
      offer()
      yield* settle
      expect(submitted).toEqual([["m0"]])
      expect(ingress.waiting()).toBe(1000)
      expect(fibers.filter((fiber) => fiber.unsafePoll() !== null)).toHaveLength(0)
    }))

  it.effect("volatile: each grant goes to the next sender in line, in arrival order", () =>
    Effect.gen(function*() {
      const { batches, ingress, offer } = scripted(script({ free: 1 }))
      const ids = Array.from({ length: 1000 }, (_, index) => `m${index}`)
      const fibers = yield* senders(ingress, ids)
      yield* settle
      offer()
      const results = yield* Effect.forEach(fibers, Fiber.join)
      expect(batches.map((batch) => batch.join())).toEqual(ids)
      expect(results.map((stored) => stored[0].seq)).toEqual(ids.map((_, index) => index + 1))
    }))

  it.effect("senders waiting together share one grant (group commit), each answered in its own order", () =>
    Effect.gen(function*() {
      const { answerAll, batches, ingress, offer } = scripted(script({ free: 1000, durable: true }))
      const first = yield* senders(ingress, ["a"])
      yield* settle
      offer()
      yield* settle
      expect(batches).toEqual([])
      // While "a" is being stored, 300 more senders arrive (one with two messages).
      const more = yield* senders(ingress, Array.from({ length: 299 }, (_, index) => `b${index}`))
      const pair = yield* Effect.fork(Effect.suspend(() => ingress.send([item("c0"), item("c1")])))
      yield* settle
      answerAll()
      yield* settle
      expect(batches).toEqual([["a"]])
      answerAll()
      yield* settle
      expect(batches[1]).toEqual([...Array.from({ length: 299 }, (_, index) => `b${index}`), "c0", "c1"])
      expect((yield* Fiber.join(first[0]))[0].seq).toBe(1)
      const seqs = (yield* Effect.forEach(more, Fiber.join)).map((stored) => stored[0].seq)
      expect(seqs).toEqual(Array.from({ length: 299 }, (_, index) => index + 2))
      expect((yield* Fiber.join(pair)).map((stored) => stored.seq)).toEqual([301, 302])
    }))

  it.effect("a sender that arrives while others wait joins the end of the line", () =>
    Effect.gen(function*() {
      const { answerAll, batches, ingress, offer } = scripted(script({ free: 2, durable: true }))
      yield* senders(ingress, ["a", "b", "c"])
      yield* settle
      offer()
      yield* settle
      yield* senders(ingress, ["late"])
      yield* settle
      answerAll()
      yield* settle
      answerAll()
      yield* settle
      answerAll()
      yield* settle
      expect(batches).toEqual([["a", "b"], ["c", "late"]])
    }))

  it.effect("a message refused before it is stored fails its sender only; the grant serves the rest", () =>
    Effect.gen(function*() {
      const { batches, ingress, offer } = scripted(script({ free: 10, tooLarge: new Set(["big"]) }))
      const fibers = yield* senders(ingress, ["a", "big", "b"])
      yield* settle
      offer()
      const exits = yield* Effect.forEach(fibers, Fiber.await)
      expect(Exit.isSuccess(exits[0]) && Exit.isSuccess(exits[2])).toBe(true)
      expect(exits[1]).toMatchObject({ _tag: "Failure" })
      expect(batches).toEqual([["a", "b"]])
    }))

  it.effect("a batch the queue refuses as a whole is retried one message at a time: only the refused one fails", () =>
    Effect.gen(function*() {
      const { answerAll, batches, ingress, offer, pendingCount } = scripted(script({ free: 10, durable: true, rejected: new Set(["bad"]) }))
      const fibers = yield* senders(ingress, ["a", "bad", "b"])
      yield* settle
      offer()
      yield* settle
      while (pendingCount() > 0) {
        answerAll()
        yield* settle
      }
      const exits = yield* Effect.forEach(fibers, Fiber.await)
      expect(exits.map((exit) => exit._tag)).toEqual(["Success", "Failure", "Success"])
      expect(batches).toEqual([["a"], ["b"]])
    }))

  it.effect("closing fails every waiting caller and every later call with EndpointClosed", () =>
    Effect.gen(function*() {
      const { ingress } = scripted(script())
      const waiting = yield* senders(ingress, ["a", "b"])
      const grantWaiter = yield* Effect.fork(ingress.requestNext)
      yield* settle
      ingress.close()
      const exits: Array<Exit.Exit<unknown, unknown>> = [...yield* Effect.forEach(waiting, Fiber.await), yield* Fiber.await(grantWaiter)]
      for (const exit of exits) {
        expect(Exit.isFailure(exit) && JSON.stringify(exit.cause)).toContain("EndpointClosed")
      }
      expect((yield* Effect.flip(Effect.suspend(() => ingress.send([item("c")]))))._tag).toBe("EndpointClosed")
      expect((yield* Effect.flip(ingress.requestNext))._tag).toBe("EndpointClosed")
    }))

  it.effect("a sender interrupted while it waits sends nothing", () =>
    Effect.gen(function*() {
      const { batches, ingress, offer } = scripted(script({ free: 10 }))
      const [a, b] = yield* senders(ingress, ["a", "b"])
      yield* settle
      yield* Fiber.interrupt(a)
      offer()
      yield* Fiber.join(b)
      expect(batches).toEqual([["b"]])
    }))

  it.effect("senders who went away while no grant comes are dropped as the line grows: the line stays bounded", () =>
    Effect.gen(function*() {
      const { batches, ingress, offer } = scripted(script({ free: 10 }))
      for (let round = 0; round < 5; round++) {
        const gone = yield* senders(ingress, Array.from({ length: 1000 }, (_, index) => `gone-${round}-${index}`))
        yield* settle
        yield* Effect.forEach(gone, Fiber.interrupt, { discard: true })
      }
      const [last] = yield* senders(ingress, ["last"])
      yield* settle
      // Five thousand callers came and went; what is left of them stays within twice the live ones
      // (at least the 1,024 below which the line never looks).
      expect(ingress.waiting()).toBeLessThanOrEqual(2048)
      offer()
      yield* Fiber.join(last)
      expect(batches).toEqual([["last"]])
    }))

  it.effect("requestNext callers wait in the same line as senders", () =>
    Effect.gen(function*() {
      const { batches, ingress, offer } = scripted(script({ free: 10 }))
      yield* senders(ingress, ["a"])
      const grant = yield* Effect.fork(ingress.requestNext)
      yield* senders(ingress, ["b"])
      yield* settle
      offer()
      yield* settle
      expect(batches).toEqual([["a"]])
      expect((yield* Fiber.join(grant)).token).toBe("t2")
    }))
  it.effect("deferred items are encoded only when a grant takes them", () =>
    Effect.gen(function*() {
      const { batches, ingress, offer } = scripted(script({ free: 2, durable: false }))
      const { encoded, make } = deferred()
      const all = yield* Effect.fork(Effect.suspend(() => ingress.send(["d1", "d2", "d3", "d4", "d5"].map(make))))
      yield* settle
      expect(encoded).toEqual([])
      offer()
      const stored = yield* Fiber.join(all)
      // Each grant of two encoded its own two, and the sender got all five answers in order.
      expect(batches).toEqual([["d1", "d2"], ["d3", "d4"], ["d5"]])
      expect(encoded).toEqual(["d1", "d2", "d3", "d4", "d5"])
      expect(stored.map((answer) => answer.seq)).toEqual([1, 2, 3, 4, 5])
    }))

  it.effect("a deferred item that no longer encodes fails its sender only; the grant serves the others", () =>
    Effect.gen(function*() {
      const { batches, ingress, offer } = scripted(script({ free: 10 }))
      const { make } = deferred(new Set(["x2"]))
      const [a] = yield* senders(ingress, ["a"])
      const broken = yield* Effect.fork(Effect.suspend(() => ingress.send([make("x1"), make("x2")])))
      const [b] = yield* senders(ingress, ["b"])
      yield* settle
      offer()
      expect((yield* Fiber.join(a))[0].messageId).toBe("a")
      expect((yield* Fiber.join(b))[0].messageId).toBe("b")
      const error = yield* Effect.flip(Fiber.join(broken))
      expect(error).toMatchObject({ _tag: "PayloadEncodeError", messageId: "x2" })
      expect(batches).toEqual([["a", "b"]])
    }))

  it.effect("a lone sender whose deferred item no longer encodes fails at once and leaves the grant", () =>
    Effect.gen(function*() {
      const { batches, ingress, offer } = scripted(script({ free: 10 }))
      const { make } = deferred(new Set(["x"]))
      offer()
      const error = yield* Effect.flip(Effect.suspend(() => ingress.send([make("x")])))
      expect(error._tag).toBe("PayloadEncodeError")
      yield* Effect.suspend(() => ingress.send([item("next")]))
      expect(batches).toEqual([["next"]])
    }))

  it.effect("an answered sender's wait no longer reaches its messages (they were promoted with the wait's closures)", () =>
    Effect.gen(function*() {
      const { ingress, offer } = scripted(script({ free: 10 }))
      let items: Array<ProduceItem> | undefined = [item("a"), item("b")]
      const sent = new WeakRef(items)
      // No grant yet: the sender waits in line, and its wait holds the entry.
      const wait = ingress.send(items)
      items = undefined
      const fiber = yield* Effect.fork(wait)
      yield* settle
      offer()
      expect((yield* Fiber.join(fiber)).map((stored) => stored.messageId)).toEqual(["a", "b"])
      yield* collectGarbage
      expect(sent.deref()).toBeUndefined()
      expect(wait).toBeDefined()
    }))
})
