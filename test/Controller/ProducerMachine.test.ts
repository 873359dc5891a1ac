import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import * as Machine from "../../src/Controller/ProducerMachine.js"
import type { ProducerAction, ProducerConfig, ProducerEvent, ProducerState } from "../../src/Controller/ProducerMachine.js"
import type { StoreResult } from "../../src/DurableQueue/DurableProducerQueue.js"
import { chunkMessageId } from "../../src/Protocol/ChunkId.js"
import { MaxWindow, MinChunkSize } from "../../src/Protocol/Config.js"
import { RequestNext, StoredAck } from "../../src/Protocol/Contract.js"
import type { Stored } from "../../src/Protocol/Contract.js"
import type { SequencedMessage } from "../../src/Protocol/WireMessage.js"
import { checkedRun } from "../support/PureStep.js"

const consumer = { node: "n", endpoint: "c", incarnation: "c1" }
const consumer2 = { node: "n", endpoint: "c", incarnation: "c2" }
const bytes = (text: string) => new TextEncoder().encode(text)

const config = (overrides: Partial<ProducerConfig> = {}): ProducerConfig => ({
  endpoint: "p",
  consumer: "c",
  incarnation: "p1",
  sessionId: "s1",
  deliveryConfirmation: false,
  retryIntervalMs: 500,
  durable: false,
  chunkSize: undefined,
  ...overrides
})

/** Folds events, returning the final state and every action in order. */
/** Every step is also checked to leave its input state as it was. */
const run = checkedRun<ProducerState, ProducerEvent, ProducerAction>(Machine.step)

const tags = (actions: ReadonlyArray<ProducerAction>) => actions.map((action) => action._tag)
const sent = (actions: ReadonlyArray<ProducerAction>) =>
  actions.flatMap((action) => action._tag === "Send" || action._tag === "Resend" ? [action.message] : [])
const seqs = (actions: ReadonlyArray<ProducerAction>, tag: "Send" | "Resend" = "Send") =>
  actions.flatMap((action) => action._tag === tag && action.message._tag === "SequencedMessage" ? [action.message.seq] : [])

const verified = (address = consumer, nonce = "n1"): ProducerEvent => ({ _tag: "Verified", address, nonce, ok: true, now: 0 })
const request = (confirmedSeq: number, upTo: number, options: { viaTimeout?: boolean; nonce?: string; sessionId?: string; from?: typeof consumer } = {}): ProducerEvent => ({
  _tag: "Wire",
  from: options.from ?? consumer,
  message: {
    _tag: "Request",
    sessionId: options.sessionId ?? "s1",
    nonce: options.nonce ?? "n1",
    confirmedSeq,
    requestUpToSeq: upTo,
    viaTimeout: options.viaTimeout ?? false
  },
  now: 0
})
const ackEvent = (confirmedSeq: number): ProducerEvent => ({
  _tag: "Wire",
  from: consumer,
  message: { _tag: "Ack", sessionId: "s1", nonce: "n1", confirmedSeq },
  now: 0
})

const grantOf = (state: ProducerState): RequestNext => {
  const handshake = state.handshake
  if (handshake._tag !== "Granted") throw new Error(`no grant outstanding: ${handshake._tag}`)
  return handshake.grant
}

const storedOf = (actions: ReadonlyArray<ProducerAction>): Stored => {
  for (const action of actions) {
    if (action._tag === "Answer" && Either.isRight(action.result)) return action.result.right[0]
  }
  throw new Error("no Stored answer")
}

/** Produces and acknowledges one message under the outstanding grant. */
const produceOne = (state: ProducerState, messageId: string, payload = bytes(messageId), now = 0) => {
  const grant = grantOf(state)
  const produced = run(state, { _tag: "Produce", grant, items: [{ messageId, payload }], now })
  const stored = storedOf(produced.actions)
  const acked = run(produced.state, { _tag: "StoredAck", ack: StoredAck.make(stored), now })
  return { state: acked.state, actions: [...produced.actions, ...acked.actions], stored }
}

/** A running producer bound to `consumer` with demand up to `upTo`. */
const bound = (upTo = 10, overrides: Partial<ProducerConfig> = {}) =>
  run(Machine.initial(config(overrides), 0).state, verified(), request(0, upTo)).state

describe("ProducerMachine", () => {
  describe("registration", () => {
    it("grants no demand: a verified registration answers RegistrationAck and offers no grant", () => {
      const { actions, state } = run(Machine.initial(config(), 0).state, verified())
      expect(tags(actions)).toEqual(["Send"])
      expect(sent(actions)[0]).toEqual({ _tag: "RegistrationAck", sessionId: "s1", nextSeq: 1, nonce: "n1" })
      expect(state.demandUpTo).toBe(0)
      expect(state.handshake._tag).toBe("Idle")
    })

    it("asks the resolver to verify a new sender; an unverified one is dropped", () => {
      const initial = Machine.initial(config(), 0).state
      const registered = run(initial, { _tag: "Wire", from: consumer, message: { _tag: "RegisterConsumer", nonce: "n1" }, now: 0 })
      expect(registered.actions).toEqual([{ _tag: "Verify", address: consumer, nonce: "n1" }])
      const refused = run(initial, { _tag: "Verified", address: consumer, nonce: "n1", ok: false, now: 0 })
      expect(refused.actions).toEqual([{ _tag: "Dropped", reason: "UnverifiedSender" }])
      expect(refused.state.binding).toBeUndefined()
    })

    it("drops a registration from an endpoint other than the configured consumer", () => {
      const other = { node: "n", endpoint: "intruder", incarnation: "x" }
      const { actions } = run(Machine.initial(config(), 0).state, { _tag: "Wire", from: other, message: { _tag: "RegisterConsumer", nonce: "n" }, now: 0 })
      expect(actions).toEqual([{ _tag: "Dropped", reason: "UnverifiedSender" }])
    })

    it("re-registration of the bound controller needs no verification and keeps demand", () => {
      const state = bound(10)
      const { actions, state: next } = run(state, { _tag: "Wire", from: consumer, message: { _tag: "RegisterConsumer", nonce: "n2" }, now: 0 })
      expect(tags(actions)).toEqual(["Send"])
      expect(next.binding?.nonce).toBe("n2")
      expect(next.demandUpTo).toBe(10)
    })

    it("a new consumer incarnation replaces the binding, resets demand and restarts from the first unconfirmed seq", () => {
      let state = bound(10)
      state = produceOne(state, "m1").state
      state = produceOne(state, "m2").state
      state = run(state, ackEvent(1)).state
      const { actions, state: next } = run(state, verified(consumer2, "z1"))
      expect(sent(actions)[0]).toEqual({ _tag: "RegistrationAck", sessionId: "s1", nextSeq: 2, nonce: "z1" })
      expect(next.demandUpTo).toBe(1)
      expect(next.sentUpTo).toBe(1)
      // The first request of the new binding resends what the old one never confirmed.
      const resumed = run(next, request(1, 11, { from: consumer2, nonce: "z1", viaTimeout: true }))
      expect(seqs(resumed.actions, "Send")).toEqual([2])
    })
  })

  describe("demand and grants", () => {
    it("a Request sets demand and opens a grant when the handshake is idle", () => {
      const state = run(Machine.initial(config(), 0).state, verified()).state
      const { actions, state: next } = run(state, request(0, 5))
      expect(tags(actions)).toEqual(["Offer"])
      expect(next.demandUpTo).toBe(5)
      expect(next.handshake._tag).toBe("Granted")
    })

    it("offers no second grant while one is outstanding", () => {
      const state = bound(5)
      const { actions } = run(state, request(0, 8))
      expect(tags(actions)).toEqual([])
    })

    it("offers no grant once everything demanded is emitted", () => {
      let state = bound(2)
      state = produceOne(state, "m1").state
      const last = produceOne(state, "m2")
      expect(tags(last.actions).filter((tag) => tag === "Offer")).toEqual([])
      expect(last.state.handshake._tag).toBe("Idle")
      const more = run(last.state, request(0, 3))
      expect(tags(more.actions)).toEqual(["Offer"])
    })

    it("demand only grows within one binding (a reordered older Request changes nothing)", () => {
      const state = bound(10)
      const { state: next } = run(state, request(0, 4))
      expect(next.demandUpTo).toBe(10)
    })

    it("emits a message when acknowledged, within demand", () => {
      const state = bound(5)
      const { actions } = produceOne(state, "m1")
      const messages = sent(actions) as Array<SequencedMessage>
      expect(messages).toHaveLength(1)
      expect(messages[0]).toMatchObject({ _tag: "SequencedMessage", sessionId: "s1", messageId: "m1", seq: 1 })
    })
  })

  describe("stale and illegal consumer input", () => {
    it.each([
      ["another session", { sessionId: "old" }, "StaleSession"],
      ["another sender", { from: consumer2 }, "UnboundSender"]
    ] as const)("drops a Request from %s", (_, options, reason) => {
      const { actions, state } = run(bound(5), request(0, 9, options))
      expect(actions).toEqual([{ _tag: "Dropped", reason }])
      expect(state.demandUpTo).toBe(5)
    })

    it("takes a Request of the bound controller under another of its registrations (a delayed duplicate rebound it)", () => {
      const { state } = run(bound(5), request(0, 9, { nonce: "n0" }))
      expect(state.demandUpTo).toBe(9)
    })

    it.each([
      ["confirming beyond the last seq sent", request(3, 10), "confirmed seq 3 but the last seq sent is 0"],
      ["more demand than the maximum window", request(0, MaxWindow + 1), "more than the maximum window"]
    ] as const)("fails terminally on %s", (_, event, text) => {
      const { actions, state } = run(bound(5), event)
      expect(state.phase).toBe("Stopped")
      const failure = actions.find((action) => action._tag === "Fail")
      expect(failure).toMatchObject({ _tag: "Fail", stage: "Protocol" })
      expect(String((failure as { cause: Error }).cause.message)).toContain(text)
    })

    it("fails when the requested range ends below the confirmed seq", () => {
      let state = bound(5)
      state = produceOne(state, "m1").state
      const { state: next } = run(state, request(1, 0))
      expect(next.phase).toBe("Stopped")
    })

    it("ignores an older confirmation that arrives late", () => {
      let state = bound(5)
      state = produceOne(state, "m1").state
      state = produceOne(state, "m2").state
      state = run(state, ackEvent(2)).state
      const { actions, state: next } = run(state, ackEvent(1))
      expect(actions).toEqual([])
      expect(next.confirmedSeq).toBe(2)
    })

    it("a stopped controller ignores everything", () => {
      const stopped = run(bound(5), request(9, 10)).state
      expect(run(stopped, request(0, 10)).actions).toEqual([{ _tag: "Dropped", reason: "NotRunning" }])
    })
  })

  describe("confirmation and resend", () => {
    it("a confirmation drops the prefix and counts whole messages", () => {
      let state = bound(5)
      for (const id of ["m1", "m2", "m3"]) state = produceOne(state, id).state
      const { actions, state: next } = run(state, ackEvent(2))
      expect(actions).toContainEqual({ _tag: "Confirmed", count: 2 })
      expect(next.confirmedSeq).toBe(2)
      expect(next.unconfirmed.length).toBe(1)
    })

    it("with deliveryConfirmation, notifies every confirmed message with its store seq", () => {
      let state = bound(5, { deliveryConfirmation: true })
      for (const id of ["m1", "m2"]) state = produceOne(state, id).state
      const { actions } = run(state, ackEvent(2))
      const notify = actions.find((action) => action._tag === "Notify")
      expect(notify).toBeDefined()
      expect((notify as { confirmed: ReadonlyArray<{ messageId: string; seq: number }> }).confirmed.map((c) => [c.messageId, c.seq]))
        .toEqual([["m1", 1], ["m2", 2]])
    })

    it("a timeout Request resends every unconfirmed message already sent, up to demand", () => {
      let state = bound(3)
      for (const id of ["m1", "m2", "m3"]) state = produceOne(state, id).state
      const { actions } = run(state, request(1, 3, { viaTimeout: true }))
      expect(seqs(actions, "Resend")).toEqual([2, 3])
    })

    it("holds an emitted message beyond demand and sends it when demand grows", () => {
      let state = bound(1)
      state = produceOne(state, "m1").state
      // A new binding starts with no demand: the old unconfirmed message waits for the Request.
      state = run(state, verified(consumer2, "z1")).state
      const first = run(state, request(0, 0, { from: consumer2, nonce: "z1" }))
      expect(seqs(first.actions)).toEqual([])
      const second = run(first.state, request(0, 1, { from: consumer2, nonce: "z1" }))
      expect(seqs(second.actions)).toEqual([1])
    })
  })

  describe("the producer contract", () => {
    it.each([
      ["a blank message id", "  ", "x", "BlankMessageId"],
      ["a reserved message id", "ReliableChunk:0/2:x", "x", "ReservedMessageId"],
      ["a missing payload", "m1", undefined, "MissingPayload"]
    ] as const)("rejects %s", (_, messageId, payload, reason) => {
      const state = bound(5)
      expect(Machine.checkProduced(state, grantOf(state), messageId, payload)?.reason).toBe(reason)
    })

    it("rejects a grant of another endpoint and of an earlier controller", () => {
      const state = bound(5)
      const grant = grantOf(state)
      const foreign = new RequestNext({ ...grant, endpoint: "other" })
      const stale = new RequestNext({ ...grant, controller: "p0" })
      expect(Machine.checkProduced(state, foreign, "m", "x")?.reason).toBe("ForeignGrant")
      expect(Machine.checkProduced(state, stale, "m", "x")?.reason).toBe("StaleGrant")
    })

    it("answers a token that is not outstanding with StaleGrant", () => {
      const state = bound(5)
      const wrong = new RequestNext({ ...grantOf(state), token: "p1:99" })
      const { actions } = run(state, { _tag: "Produce", grant: wrong, items: [{ messageId: "m", payload: bytes("x") }], now: 0 })
      const answer = actions[0] as Extract<ProducerAction, { _tag: "Answer" }>
      expect(Either.isLeft(answer.result) && answer.result.left._tag === "ProducerContractError" && answer.result.left.reason).toBe("StaleGrant")
    })

    it("a retried grant answered with the same Produced gets the same Stored; a different one is refused", () => {
      const state = bound(5)
      const grant = grantOf(state)
      const first = run(state, { _tag: "Produce", grant, items: [{ messageId: "m1", payload: bytes("a") }], now: 0 })
      const again = run(first.state, { _tag: "Produce", grant, items: [{ messageId: "m1", payload: bytes("a") }], now: 0 })
      expect(storedOf(again.actions)).toEqual(storedOf(first.actions))
      expect(Machine.answeredBefore(first.state, grant, "m2")).toMatchObject({ _tag: "Left", left: { reason: "TokenAlreadyAnswered" } })
    })

    it("rejects a StoredAck that matches no Stored, and ignores a repeated one", () => {
      const state = bound(5)
      const { state: done, stored } = produceOne(state, "m1")
      const repeated = run(done, { _tag: "StoredAck", ack: StoredAck.make(stored), now: 0 })
      expect(repeated.actions).toEqual([])
      const bogus = StoredAck.make({ ...stored, token: "p1:77" } as Stored)
      const rejected = run(done, { _tag: "StoredAck", ack: bogus, now: 0 })
      expect(rejected.actions[0]).toMatchObject({ _tag: "AckRejected", error: { reason: "UnknownStored" } })
    })

    it("store seqs count up from 1; Stored carries the seq", () => {
      let state = bound(5)
      const one = produceOne(state, "m1")
      state = one.state
      const two = produceOne(state, "m2")
      expect([one.stored.seq, two.stored.seq]).toEqual([1, 2])
      expect(one.stored.alreadyStored).toBe(false)
    })
  })

  describe("retry timer", () => {
    it("re-offers an unanswered grant only after the retry interval", () => {
      const state = bound(5)
      expect(run(state, { _tag: "Tick", now: 499 }).actions).toEqual([])
      const { actions } = run(state, { _tag: "Tick", now: 500 })
      expect(actions).toEqual([{ _tag: "Offer", grant: grantOf(state) }])
    })

    it("re-offers the grant of an unacknowledged Stored after the retry interval", () => {
      const state = bound(5)
      const grant = grantOf(state)
      const { state: stored } = run(state, { _tag: "Produce", grant, items: [{ messageId: "m1", payload: bytes("a") }], now: 100 })
      expect(run(stored, { _tag: "Tick", now: 599 }).actions).toEqual([])
      expect(run(stored, { _tag: "Tick", now: 600 }).actions).toEqual([{ _tag: "Offer", grant }])
    })
  })

  describe("chunking", () => {
    it("splits a payload into ceil(len / chunkSize) chunks, one seq each, Stored.seq the last chunk's", () => {
      let state = bound(10, { chunkSize: 4 })
      const { actions, stored } = produceOne(state, "big", bytes("0123456789"))
      const messages = sent(actions) as Array<SequencedMessage>
      expect(messages.map((m) => [m.seq, m.messageId, m.chunk])).toEqual([
        [1, "big", { first: true, last: false }],
        [2, "big", { first: false, last: false }],
        [3, "big", { first: false, last: true }]
      ])
      expect(stored.seq).toBe(3)
      state = run(produceOne(state, "big", bytes("0123456789")).state, ackEvent(3)).state
      expect(state.confirmedSeq).toBe(3)
    })

    it("pauses mid-message at the demand limit and resumes when demand grows", () => {
      const state = bound(2, { chunkSize: 4 })
      const { actions, state: next } = produceOne(state, "big", bytes("0123456789"))
      expect(seqs(actions)).toEqual([1, 2])
      expect(run(next, request(0, 3)).actions.flatMap((a) => a._tag === "Send" ? [a.message] : [])).toHaveLength(1)
    })

    it("a payload of exactly the chunk size is one whole message", () => {
      const { actions } = produceOne(bound(10, { chunkSize: 4 }), "m", bytes("0123"))
      expect((sent(actions) as Array<SequencedMessage>).map((m) => m.chunk)).toEqual([undefined])
    })

    it.each([
      ["one byte under the chunk size", 1023, [1023]],
      ["exactly the chunk size", 1024, [1024]],
      ["one byte over", 1025, [1024, 1]],
      ["exactly twice the chunk size", 2048, [1024, 1024]],
      ["one byte under three times", 3071, [1024, 1024, 1023]],
      ["exactly three times", 3072, [1024, 1024, 1024]],
      ["one byte over three times", 3073, [1024, 1024, 1024, 1]]
    ] as const)("split: %s (%i bytes) gives chunks of %j", (_, length, sizes) => {
      const payload = new Uint8Array(length).map((_, index) => index & 0xff)
      const chunks = Machine.split(payload, 1024)
      expect(chunks.map((chunk) => chunk.length)).toEqual(sizes)
      // Views of the encoded payload, not copies; together exactly the payload.
      for (const chunk of chunks) expect(chunk.buffer).toBe(payload.buffer)
      expect(Buffer.concat(chunks)).toEqual(Buffer.from(payload))
    })

    it("split: without a chunk size any payload is one part", () => {
      const payload = new Uint8Array(5000)
      expect(Machine.split(payload, undefined)).toEqual([payload])
    })

    it("split: a 1 MiB payload at the minimum chunk size is 1024 chunks of 1 KiB", () => {
      const chunks = Machine.split(new Uint8Array(1024 * 1024), MinChunkSize)
      expect(chunks).toHaveLength(1024)
      expect(chunks.every((chunk) => chunk.length === MinChunkSize)).toBe(true)
    })

    it("one Produced gets one Stored; every chunk carries the business id; marks only on the first and last", () => {
      const state = bound(50, { chunkSize: 4 })
      const grant = grantOf(state)
      const { actions } = run(state, { _tag: "Produce", grant, items: [{ messageId: "big", payload: bytes("0123456789abcdef!") }], now: 0 })
      const answers = actions.filter((action) => action._tag === "Answer")
      expect(answers).toHaveLength(1)
      const answer = answers[0] as Extract<ProducerAction, { _tag: "Answer" }>
      expect(Either.isRight(answer.result) && answer.result.right.map((stored) => [stored.messageId, stored.seq])).toEqual([["big", 5]])
      const acked = run(run(state, { _tag: "Produce", grant, items: [{ messageId: "big", payload: bytes("0123456789abcdef!") }], now: 0 }).state, {
        _tag: "StoredAck",
        ack: StoredAck.make(storedOf(actions)),
        now: 0
      })
      const messages = sent(acked.actions) as Array<SequencedMessage>
      expect(messages.map((m) => [m.messageId, m.chunk?.first, m.chunk?.last, new TextDecoder().decode(m.payload)])).toEqual([
        ["big", true, false, "0123"],
        ["big", false, false, "4567"],
        ["big", false, false, "89ab"],
        ["big", false, false, "cdef"],
        ["big", false, true, "!"]
      ])
    })

    it("confirmations report business messages: one DeliveryConfirmed per message, with its last chunk's store seq", () => {
      let state = bound(20, { chunkSize: 4, deliveryConfirmation: true })
      state = produceOne(state, "a", bytes("0123456789")).state
      state = produceOne(state, "b", bytes("xy")).state
      const { actions } = run(state, ackEvent(4))
      const notify = actions.find((action) => action._tag === "Notify") as Extract<ProducerAction, { _tag: "Notify" }>
      expect(notify.confirmed.map((c) => [c.messageId, c.seq])).toEqual([["a", 3], ["b", 4]])
      let quiet = bound(20, { chunkSize: 4 })
      quiet = produceOne(quiet, "a", bytes("0123456789")).state
      expect(run(quiet, ackEvent(3)).actions).toContainEqual({ _tag: "Confirmed", count: 1 })
    })

    it.each([
      ["an Ack", ackEvent(2)],
      ["a Request", request(2, 12)]
    ] as const)("a confirmation inside a chunked message (%s) is a protocol violation", (_, event) => {
      const state = produceOne(bound(10, { chunkSize: 4 }), "big", bytes("0123456789")).state
      const { actions, state: next } = run(state, event)
      expect(next.phase).toBe("Stopped")
      const failure = actions.find((action) => action._tag === "Fail") as { stage: string; cause: Error }
      expect(failure.stage).toBe("Protocol")
      expect(failure.cause.message).toContain("inside the chunks of message big")
    })

    it("offers no grant while chunks beyond demand are held; the timeout resend covers only what was sent", () => {
      const state = bound(2, { chunkSize: 4 })
      const { actions, state: held } = produceOne(state, "big", bytes("0123456789"))
      expect(tags(actions)).not.toContain("Offer")
      expect(held.sentUpTo).toBe(2)
      const resent = run(held, request(0, 2, { viaTimeout: true }))
      expect(seqs(resent.actions, "Resend")).toEqual([1, 2])
      const grown = run(held, request(0, 5))
      expect(seqs(grown.actions)).toEqual([3])
      expect(tags(grown.actions)).toContain("Offer")
    })

    it("freeMessages: free demand in messages, estimated from the latest message's chunk count", () => {
      expect(Machine.freeMessages(bound(10))).toBe(10)
      let state = bound(10, { chunkSize: 4 })
      expect(Machine.freeMessages(state)).toBe(1)
      state = produceOne(state, "big", bytes("0123456789")).state
      expect(Machine.freeMessages(state)).toBe(2)
      state = produceOne(state, "more", bytes("0123456789")).state
      state = produceOne(state, "more2", bytes("0123456789")).state
      // One seq left: worth the one message a grant takes.
      expect(Machine.freeMessages(state)).toBe(1)
      state = produceOne(state, "more3", bytes("0123456789")).state
      expect(Machine.freeMessages(state)).toBe(0)
    })
  })

  describe("chunking, durable", () => {
    const loaded = (upTo = 20) =>
      run(Machine.initial(config({ durable: true, chunkSize: 4 }), 0).state, {
        _tag: "Loaded",
        state: { currentSeq: 0, confirmedSeq: 0, unconfirmed: [] },
        now: 0
      }, verified(), request(0, upTo)).state
    const chunkEntry = (seq: number, index: number, count: number, payload: string) => ({
      seq,
      messageId: chunkMessageId("big", index, count),
      payload: bytes(payload),
      chunk: { first: index === 0, last: index === count - 1 }
    })

    it("stores a chunked message as one Store item carrying every chunk", () => {
      const state = loaded()
      const grant = grantOf(state)
      const { actions } = run(state, { _tag: "Produce", grant, items: [{ messageId: "big", payload: bytes("0123456789") }], now: 0 })
      expect(actions).toHaveLength(1)
      const store = actions[0] as Extract<ProducerAction, { _tag: "Store" }>
      expect(store.items.map((item) => [item.messageId, item.chunks.map((chunk) => new TextDecoder().decode(chunk))])).toEqual([
        ["big", ["0123", "4567", "89"]]
      ])
    })

    const settle = (state: ProducerState, results: ReadonlyArray<StoreResult>) => {
      const grant = grantOf(state)
      const storing = run(state, { _tag: "Produce", grant, items: [{ messageId: "big", payload: bytes("fresh") }], now: 0 }).state
      const stored = run(storing, { _tag: "StoreCompleted", token: grant.token, results, now: 0 })
      const value = storedOf(stored.actions)
      const emitted = run(stored.state, { _tag: "StoredAck", ack: StoredAck.make(value), now: 0 }, { _tag: "AcceptCompleted", token: grant.token, now: 0 })
      return { stored: value, messages: sent(emitted.actions) as Array<SequencedMessage>, state: emitted.state }
    }

    it("a resubmission follows the stored shape: stored chunked, the fresh encoding whole", () => {
      const { messages, stored } = settle(loaded(), [{
        messageId: "big",
        entries: [chunkEntry(1, 0, 3, "ab"), chunkEntry(2, 1, 3, "cd"), chunkEntry(3, 2, 3, "e")],
        alreadyStored: true,
        accepted: false
      }])
      expect(stored).toMatchObject({ messageId: "big", seq: 3, alreadyStored: true })
      expect(messages.map((m) => [m.seq, m.messageId, m.chunk, new TextDecoder().decode(m.payload)])).toEqual([
        [1, "big", { first: true, last: false }, "ab"],
        [2, "big", { first: false, last: false }, "cd"],
        [3, "big", { first: false, last: true }, "e"]
      ])
    })

    it("a resubmission follows the stored shape: stored whole, the fresh encoding chunked", () => {
      const { messages, stored } = settle(loaded(), [{
        messageId: "big",
        entries: [{ seq: 1, messageId: "big", payload: bytes("whole") }],
        alreadyStored: true,
        accepted: false
      }])
      expect(stored).toMatchObject({ messageId: "big", seq: 1, alreadyStored: true })
      expect(messages.map((m) => [m.seq, m.messageId, m.chunk, new TextDecoder().decode(m.payload)])).toEqual([[1, "big", undefined, "whole"]])
    })

    it("reloads chunk entries under their business id, marks intact, before any new grant", () => {
      const state = run(Machine.initial(config({ durable: true, chunkSize: 4 }), 0).state, {
        _tag: "Loaded",
        state: { currentSeq: 4, confirmedSeq: 1, unconfirmed: [chunkEntry(2, 0, 3, "ab"), chunkEntry(3, 1, 3, "cd"), chunkEntry(4, 2, 3, "e")] },
        now: 0
      }, verified()).state
      const { actions } = run(state, request(1, 3, { viaTimeout: true }))
      expect((sent(actions) as Array<SequencedMessage>).map((m) => [m.seq, m.messageId, m.chunk])).toEqual([
        [2, "big", { first: true, last: false }],
        [3, "big", { first: false, last: false }]
      ])
      expect(tags(actions)).not.toContain("Offer")
      const rest = run(run(state, request(1, 3, { viaTimeout: true })).state, request(1, 11))
      expect(seqs(rest.actions)).toEqual([4])
      expect(tags(rest.actions)).toContain("Offer")
    })

    it("persists the confirmed watermark as the last chunk's store seq", () => {
      const { state } = settle(loaded(), [{
        messageId: "big",
        entries: [chunkEntry(1, 0, 2, "ab"), chunkEntry(2, 1, 2, "cd")],
        alreadyStored: false,
        accepted: false
      }])
      expect(run(state, ackEvent(2)).actions).toContainEqual({ _tag: "PersistConfirm", upToStoreSeq: 2 })
    })
  })

  describe("durable lifecycle", () => {
    const durable = (): ProducerState => Machine.initial(config({ durable: true }), 0).state

    it("starts by loading and ignores consumers until loaded", () => {
      expect(Machine.initial(config({ durable: true }), 0).actions).toEqual([{ _tag: "Load" }])
      expect(run(durable(), verified()).actions).toEqual([{ _tag: "Dropped", reason: "NotRunning" }])
    })

    it("redelivers reloaded messages before granting new demand", () => {
      const loaded = run(durable(), {
        _tag: "Loaded",
        state: {
          currentSeq: 7,
          confirmedSeq: 4,
          unconfirmed: [
            { seq: 5, messageId: "a", payload: bytes("a") },
            { seq: 6, messageId: "b", payload: bytes("b") }
          ]
        },
        now: 0
      }).state
      expect(loaded.confirmedSeq).toBe(4)
      expect(loaded.lastStoreSeq).toBe(7)
      const boundNow = run(loaded, verified())
      expect(sent(boundNow.actions)[0]).toMatchObject({ nextSeq: 5 })
      const small = run(boundNow.state, request(4, 6, { viaTimeout: true }))
      expect(seqs(small.actions)).toEqual([5, 6])
      expect(tags(small.actions)).not.toContain("Offer")
      const more = run(small.state, request(4, 7))
      expect(tags(more.actions)).toContain("Offer")
    })

    it("stores before Stored, accepts on StoredAck, emits after the accept, persists confirmations", () => {
      let state = run(durable(), { _tag: "Loaded", state: { currentSeq: 0, confirmedSeq: 0, unconfirmed: [] }, now: 0 }, verified(), request(0, 5)).state
      const grant = grantOf(state)
      const storing = run(state, { _tag: "Produce", grant, items: [{ messageId: "m1", payload: bytes("a") }], now: 0 })
      expect(tags(storing.actions)).toEqual(["Store"])
      const stored = run(storing.state, {
        _tag: "StoreCompleted",
        token: grant.token,
        results: [{ messageId: "m1", entries: [{ seq: 1, messageId: "m1", payload: bytes("a") }], alreadyStored: false, accepted: false }],
        now: 0
      })
      const storedValue = storedOf(stored.actions)
      const accepting = run(stored.state, { _tag: "StoredAck", ack: StoredAck.make(storedValue), now: 0 })
      expect(accepting.actions).toEqual([{ _tag: "Accept", token: grant.token, messageIds: ["m1"] }])
      const emitted = run(accepting.state, { _tag: "AcceptCompleted", token: grant.token, now: 0 })
      expect(seqs(emitted.actions)).toEqual([1])
      state = emitted.state
      expect(run(state, ackEvent(1)).actions).toContainEqual({ _tag: "PersistConfirm", upToStoreSeq: 1 })
    })

    describe("produce-and-acknowledge (the everyday path): one store-and-accept step", () => {
      /** Loaded with `held` reloaded (store seqs 3..), bound, with demand for 50. */
      const ready = (held: ReadonlyArray<string> = []) =>
        run(durable(), {
          _tag: "Loaded",
          state: {
            currentSeq: 10,
            confirmedSeq: 2,
            unconfirmed: held.map((messageId, index) => ({ seq: 3 + index, messageId, payload: bytes(messageId) }))
          },
          now: 0
        }, verified(), request(2, 50)).state

      it("stores with accept, then answers, emits and offers the next grant in the completion's fold", () => {
        const state = ready()
        const grant = grantOf(state)
        const storing = run(state, { _tag: "ProduceAcked", grant, items: [{ messageId: "m1", payload: bytes("a") }], now: 0 })
        expect(storing.actions).toEqual([{ _tag: "Store", token: grant.token, items: [{ messageId: "m1", chunks: [bytes("a")] }], accept: true }])
        expect(storing.state.handshake).toMatchObject({ _tag: "Storing", acknowledged: true })
        // an AckAll or StoredAck while it stores changes nothing: the store accepts
        const acked = run(storing.state, { _tag: "AckAll", token: grant.token, now: 0 })
        expect(acked.actions).toEqual([])
        const done = run(acked.state, {
          _tag: "StoreCompleted",
          token: grant.token,
          results: [{ messageId: "m1", entries: [{ seq: 11, messageId: "m1", payload: bytes("a") }], alreadyStored: false, accepted: false }],
          now: 0
        })
        expect(tags(done.actions)).toEqual(["Answer", "Completed", "Send", "Offer"])
        expect(storedOf(done.actions)).toMatchObject({ messageId: "m1", seq: 11, alreadyStored: false })
        expect(seqs(done.actions)).toEqual([3]) // wire seqs continue from the confirmed watermark
        // a late StoredAck of the completed grant is a no-op
        expect(run(done.state, { _tag: "StoredAck", ack: StoredAck.make(storedOf(done.actions)), now: 0 }).actions).toEqual([])
      })

      // Which results are emitted: exactly what a one-by-one store then accept would emit.
      const cases: ReadonlyArray<{
        readonly name: string
        readonly alreadyStored: boolean
        readonly accepted: boolean
        readonly held?: boolean
        readonly retried?: boolean
        /** The stored entry's seq; default 3, just above the loaded watermark (2). */
        readonly seq?: number
        readonly emitted: boolean
      }> = [
        { name: "a new message", alreadyStored: false, accepted: false, emitted: true },
        { name: "stored by an earlier producer that crashed before accepting", alreadyStored: true, accepted: false, emitted: true },
        { name: "accepted and confirmed before", alreadyStored: true, accepted: true, emitted: false },
        { name: "accepted before and reloaded (held)", alreadyStored: true, accepted: true, held: true, emitted: false },
        { name: "held, on a retried store", alreadyStored: true, accepted: true, held: true, retried: true, emitted: false },
        // the first attempt committed and its answer was lost: `accepted` is this store's own
        { name: "accepted by a retried store's own first attempt", alreadyStored: true, accepted: true, retried: true, emitted: true },
        // reloaded, emitted and confirmed (payload compacted) while the resubmission was retried
        { name: "at or below the confirmed watermark, on a retried store", alreadyStored: true, accepted: true, retried: true, seq: 2, emitted: false }
      ]
      for (const row of cases) {
        it(`${row.emitted ? "emits" : "does not emit"} a message ${row.name}`, () => {
          const state = ready(row.held === true ? ["m"] : [])
          const grant = grantOf(state)
          const done = run(state, { _tag: "ProduceAcked", grant, items: [{ messageId: "m", payload: bytes("fresh") }], now: 0 }, {
            _tag: "StoreCompleted",
            token: grant.token,
            results: [{ messageId: "m", entries: [{ seq: row.seq ?? 3, messageId: "m", payload: bytes("m") }], alreadyStored: row.alreadyStored, accepted: row.accepted }],
            ...(row.retried === true ? { retried: true } : {}),
            now: 0
          })
          expect(storedOf(done.actions)).toMatchObject({ messageId: "m", seq: row.seq ?? 3, alreadyStored: row.alreadyStored })
          expect((sent(done.actions) as Array<SequencedMessage>).filter((m) => m.messageId === "m")).toHaveLength(row.emitted ? 1 : 0)
          expect(tags(done.actions)).toContain("Completed")
        })
      }

      it("emits an id repeated in one batch once", () => {
        const state = ready()
        const grant = grantOf(state)
        const entry = { seq: 11, messageId: "m", payload: bytes("m") }
        const done = run(state, {
          _tag: "ProduceAcked",
          grant,
          items: [{ messageId: "m", payload: bytes("m") }, { messageId: "m", payload: bytes("again") }],
          now: 0
        }, {
          _tag: "StoreCompleted",
          token: grant.token,
          results: [
            { messageId: "m", entries: [entry], alreadyStored: false, accepted: false },
            { messageId: "m", entries: [entry], alreadyStored: true, accepted: true }
          ],
          retried: true,
          now: 0
        })
        expect(seqs(done.actions)).toEqual([3])
      })
    })

    it("does not dispatch a resubmission of an already accepted message twice", () => {
      let state = run(durable(), { _tag: "Loaded", state: { currentSeq: 3, confirmedSeq: 3, unconfirmed: [] }, now: 0 }, verified(), request(3, 8)).state
      const grant = grantOf(state)
      state = run(state, { _tag: "Produce", grant, items: [{ messageId: "old", payload: bytes("a") }], now: 0 }).state
      const result = run(state, {
        _tag: "StoreCompleted",
        token: grant.token,
        results: [{ messageId: "old", entries: [{ seq: 2, messageId: "old", payload: bytes("a") }], alreadyStored: true, accepted: true }],
        now: 0
      })
      expect(storedOf(result.actions)).toMatchObject({ seq: 2, alreadyStored: true })
      const accepted = run(result.state, { _tag: "StoredAck", ack: StoredAck.make(storedOf(result.actions)), now: 0 }, {
        _tag: "AcceptCompleted",
        token: grant.token,
        now: 0
      })
      expect(seqs(accepted.actions)).toEqual([])
      expect(tags(accepted.actions)).toContain("Offer")
    })
  })
})

describe("volatile ProduceAcked", () => {
  const bound = (overrides: Partial<ProducerConfig> = {}) =>
    run(Machine.initial(config(overrides), 0).state, verified(), request(0, 10)).state

  /** A plain comparable view of a fold's outcome. */
  const view = (outcome: { readonly state: ProducerState; readonly actions: ReadonlyArray<ProducerAction> }) =>
    JSON.parse(JSON.stringify({ ...outcome, state: { ...outcome.state, unconfirmed: outcome.state.unconfirmed.toArray() } }))

  it.each([
    ["one message", undefined, ["a"]],
    ["a batch", undefined, ["a", "bb", "ccc"]],
    ["chunked messages (the general path)", 1024, ["a", "x".repeat(3000)]]
  ] as const)("%s: the same state and actions as Produce then AckAll", (_, chunkSize, payloads) => {
    const state = bound({ chunkSize })
    const grant = grantOf(state)
    const items = payloads.map((payload, index) => ({ messageId: `m${index}`, payload: bytes(payload) }))
    const acked = run(state, { _tag: "ProduceAcked", grant, items, now: 7 })
    const twoSteps = run(state, { _tag: "Produce", grant, items, now: 7 }, { _tag: "AckAll", token: grant.token, now: 7 })
    expect(view(acked)).toEqual(view(twoSteps))
    expect(tags(acked.actions)).toContain("Completed")
  })

  it("a repeat of a stored single message answers it again and completes its handshake", () => {
    const state = bound()
    const grant = grantOf(state)
    const items = [{ messageId: "m", payload: bytes("a") }]
    const stored = run(state, { _tag: "Produce", grant, items, now: 1 })
    const repeated = run(stored.state, { _tag: "ProduceAcked", grant, items, now: 2 })
    const acked = run(stored.state, { _tag: "AckAll", token: grant.token, now: 2 })
    expect(tags(repeated.actions)).toEqual(["Answer", ...tags(acked.actions)])
    expect(view({ state: repeated.state, actions: [] })).toEqual(view({ state: acked.state, actions: [] }))
  })

  describe("settles: dead letters", () => {
    const deadLetter = (seq: number, sessionId = "s1"): ProducerEvent => ({
      _tag: "Wire",
      from: consumer,
      message: { _tag: "Settle", sessionId, nonce: "n1", seq, outcome: { _tag: "DeadLettered", attempts: 3, error: "poison" } },
      now: 7
    })
    const settledReplies = (actions: ReadonlyArray<ProducerAction>) => sent(actions).filter((message) => message._tag === "Settled")
    const boundTo = (upTo: number, overrides: Partial<ProducerConfig> = {}) =>
      run(Machine.initial(config(overrides), 0).state, verified(), request(0, upTo)).state

    it("volatile: answers Settled at once, and the message is not reported as confirmed", () => {
      let state = produceOne(boundTo(5, { deliveryConfirmation: true }), "m1").state
      state = produceOne(state, "m2").state
      const settled = run(state, deadLetter(1))
      expect(settledReplies(settled.actions)).toEqual([{ _tag: "Settled", sessionId: "s1", seq: 1 }])
      const confirmed = run(settled.state, ackEvent(2))
      expect(confirmed.actions.flatMap((action) => action._tag === "Notify" ? action.confirmed.map((c) => c.messageId) : [])).toEqual(["m2"])
      // Asked again (the answer was lost): answered again.
      expect(settledReplies(run(settled.state, deadLetter(1)).actions)).toHaveLength(1)
    })

    it("durable: records the dead letter first, answers Settled once recorded, once", () => {
      const loaded = run(
        Machine.initial(config({ durable: true }), 0).state,
        { _tag: "Loaded", state: { currentSeq: 0, confirmedSeq: 0, unconfirmed: [] }, now: 0 },
        verified(),
        request(0, 5)
      ).state
      const grant = grantOf(loaded)
      const storing = run(loaded, { _tag: "ProduceAcked", grant, items: [{ messageId: "m1", payload: bytes("x") }], now: 0 })
      const stored = run(storing.state, {
        _tag: "StoreCompleted",
        token: grant.token,
        results: [{ messageId: "m1", entries: [{ seq: 1, messageId: "m1", payload: bytes("x") }], alreadyStored: false, accepted: false }],
        now: 0
      }).state
      const recording = run(stored, deadLetter(1))
      expect(recording.actions.filter((action) => action._tag === "DeadLetter")).toEqual([
        { _tag: "DeadLetter", seq: 1, messageId: "m1", attempts: 3, lastError: "poison", at: 7 }
      ])
      expect(settledReplies(recording.actions)).toEqual([])
      expect(run(recording.state, deadLetter(1)).actions).toEqual([])
      const recorded = run(recording.state, { _tag: "DeadLetterRecorded", seq: 1, now: 8 })
      expect(settledReplies(recorded.actions)).toEqual([{ _tag: "Settled", sessionId: "s1", seq: 1 }])
    })

    it("drops a settle of another session, of an unsent seq, or any outcome but a dead letter", () => {
      const state = produceOne(boundTo(5), "m1").state
      expect(tags(run(state, deadLetter(1, "old")).actions)).toEqual(["Dropped"])
      expect(tags(run(state, deadLetter(4)).actions)).toEqual(["Dropped"])
      const failed: ProducerEvent = {
        _tag: "Wire",
        from: consumer,
        message: { _tag: "Settle", sessionId: "s1", nonce: "n1", seq: 1, outcome: { _tag: "Released" } },
        now: 0
      }
      expect(tags(run(state, failed).actions)).toEqual(["Dropped"])
    })
  })

  describe("the persisted watermark never passes an emitted, unconfirmed message", () => {
    it("a message accepted late (a resubmission with an earlier store seq) keeps the watermark below it until confirmed", () => {
      // Reloaded: store seq 5 emitted first (wire 1), then a resubmission of store seq 3 is accepted (wire 2).
      let state = run(
        Machine.initial(config({ durable: true }), 0).state,
        { _tag: "Loaded", state: { currentSeq: 5, confirmedSeq: 2, unconfirmed: [{ seq: 5, messageId: "later", payload: bytes("l") }] }, now: 0 },
        verified(),
        request(2, 10)
      ).state
      const grant = grantOf(state)
      state = run(state, { _tag: "ProduceAcked", grant, items: [{ messageId: "early", payload: bytes("e") }], now: 0 }).state
      state = run(state, {
        _tag: "StoreCompleted",
        token: grant.token,
        results: [{ messageId: "early", entries: [{ seq: 3, messageId: "early", payload: bytes("e") }], alreadyStored: true, accepted: false }],
        now: 0
      }).state
      // The consumer confirms "later" (wire 3) only: the watermark may not reach store seq 5.
      const first = run(state, ackEvent(3))
      expect(first.actions.filter((action) => action._tag === "PersistConfirm")).toEqual([])
      const second = run(first.state, ackEvent(4))
      expect(second.actions.filter((action) => action._tag === "PersistConfirm")).toEqual([{ _tag: "PersistConfirm", upToStoreSeq: 5 }])
    })
  })
})

