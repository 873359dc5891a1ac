import { describe, expect, it } from "@effect/vitest"
import * as Machine from "../../src/Controller/ConsumerMachine.js"
import type { ConsumerAction, ConsumerEvent, ConsumerState } from "../../src/Controller/ConsumerMachine.js"
import type { ChunkMark } from "../../src/Protocol/WireMessage.js"
import { checkedRun } from "../support/PureStep.js"

const producer = { node: "n", endpoint: "p", incarnation: "p1" }
const producer2 = { node: "n", endpoint: "p", incarnation: "p2" }
const bytes = (text: string) => new TextEncoder().encode(text)
/** A whole payload's text, or the text of a chunked message's chunks in order. */
const text = (data: Uint8Array | ReadonlyArray<Uint8Array>) =>
  data instanceof Uint8Array ? new TextDecoder().decode(data) : data.map((chunk) => new TextDecoder().decode(chunk)).join("")

const config = (window = 4, resendIntervalMs = 1000, more: { concurrency?: number; releaseStuckAfterMs?: number } = {}) => ({
  endpoint: "c",
  incarnation: "c1",
  window,
  resendIntervalMs,
  ...more
})

/** Every step is also checked to leave its input state as it was. */
const run = checkedRun<ConsumerState, ConsumerEvent, ConsumerAction>(Machine.step)

const tags = (actions: ReadonlyArray<ConsumerAction>) => actions.map((action) => action._tag)
const sentMessages = (actions: ReadonlyArray<ConsumerAction>) => actions.flatMap((action) => action._tag === "Send" ? [action.message] : [])
const delivered = (actions: ReadonlyArray<ConsumerAction>) =>
  actions.flatMap((action) => action._tag === "Deliver" ? [[action.delivery.seq, text(action.payload)] as const] : [])

const resolved = (address = producer): ConsumerEvent => ({ _tag: "Resolved", producer: address, now: 0 })
const regAck = (nonce: string, nextSeq = 1, sessionId = "s1", from = producer): ConsumerEvent => ({
  _tag: "Wire",
  from,
  message: { _tag: "RegistrationAck", sessionId, nextSeq, nonce },
  now: 0
})
const message = (seq: number, options: { id?: string; chunk?: ChunkMark; sessionId?: string; from?: typeof producer; now?: number } = {}): ConsumerEvent => ({
  _tag: "Wire",
  from: options.from ?? producer,
  message: options.chunk === undefined
    ? { _tag: "SequencedMessage", sessionId: options.sessionId ?? "s1", messageId: options.id ?? `m${seq}`, seq, payload: bytes(`m${seq}`) }
    : { _tag: "SequencedMessage", sessionId: options.sessionId ?? "s1", messageId: options.id ?? `m${seq}`, seq, payload: bytes(`m${seq}`), chunk: options.chunk },
  now: options.now ?? 0
})
const confirm = (state: ConsumerState, now = 0): ConsumerEvent => ({ _tag: "Confirm", id: Machine.inFlight(state)!.id, now })
const tick = (now: number): ConsumerEvent => ({ _tag: "Tick", now })

/** A worker registered in session s1 from seq 1: `concurrency` handlers, stuck after `releaseAfter`. */
const worker = (window: number, concurrency: number, releaseAfter?: number) =>
  run(
    Machine.initial(config(window, 1000, { concurrency, ...(releaseAfter === undefined ? {} : { releaseStuckAfterMs: releaseAfter }) })).state,
    resolved(),
    regAck("c1.1")
  ).state
const settled = (seq: number): ConsumerEvent => ({ _tag: "Wire", from: producer, message: { _tag: "Settled", sessionId: "s1", seq }, now: 0 })
const ids = (state: ConsumerState) => state.handedOut.map((handed) => [handed.seq, handed.status])

/** A consumer registered in session s1 from seq 1, with the given window. */
const registered = (window = 4, resendIntervalMs = 1000) =>
  run(Machine.initial(config(window, resendIntervalMs)).state, resolved(), regAck("c1.1")).state

describe("ConsumerMachine", () => {
  describe("registration", () => {
    it("looks the producer up at start and registers with a fresh nonce", () => {
      expect(Machine.initial(config()).actions).toEqual([{ _tag: "Resolve" }])
      const first = run(Machine.initial(config()).state, resolved())
      const second = run(first.state, resolved())
      expect(sentMessages(first.actions)).toEqual([{ _tag: "RegisterConsumer", nonce: "c1.1" }])
      expect(sentMessages(second.actions)).toEqual([{ _tag: "RegisterConsumer", nonce: "c1.2" }])
    })

    it("does nothing when the producer cannot be resolved", () => {
      expect(run(Machine.initial(config()).state, { _tag: "Resolved", producer: undefined, now: 0 }).actions).toEqual([])
    })

    it("adopts the session of its latest registration and asks for a window with a resend", () => {
      const { actions, state } = run(Machine.initial(config(4)).state, resolved(), regAck("c1.1", 7))
      expect(sentMessages(actions)[1]).toEqual({
        _tag: "Request",
        sessionId: "s1",
        nonce: "c1.1",
        confirmedSeq: 6,
        requestUpToSeq: 10,
        viaTimeout: true
      })
      expect(state.session?.sessionId).toBe("s1")
    })

    it("drops an answer to an older registration", () => {
      const state = run(Machine.initial(config()).state, resolved(), resolved()).state
      expect(run(state, regAck("c1.1")).actions).toEqual([{ _tag: "Dropped", reason: "StaleSession" }])
    })

    it("keeps its progress when the same session answers a re-registration", () => {
      let state = registered()
      state = run(state, message(1), message(2)).state
      state = run(state, confirm(state)).state
      const { state: again } = run(state, resolved(), regAck("c1.2", 1))
      expect(again.confirmedSeq).toBe(1)
      expect(again.received.length).toBe(1)
      expect(Machine.inFlight(again)?.seq).toBe(2)
    })

    it("a new session (new producer controller) starts over from its nextSeq", () => {
      let state = registered()
      state = run(state, message(1), message(2)).state
      const { state: next } = run(state, resolved(producer2), regAck("c1.2", 1, "s2", producer2))
      expect(next.session?.sessionId).toBe("s2")
      expect(next.confirmedSeq).toBe(0)
      expect(next.received.length).toBe(0)
      expect(Machine.inFlight(next)).toBeUndefined()
    })
  })

  describe("delivery", () => {
    it("delivers in order, one unconfirmed delivery at a time", () => {
      let state = registered()
      const first = run(state, message(1), message(2))
      expect(delivered(first.actions)).toEqual([[1, "m1"]])
      state = first.state
      const next = run(state, confirm(state))
      expect(delivered(next.actions)).toEqual([[2, "m2"]])
    })

    it.each([
      ["another session", message(1, { sessionId: "s0" }), "StaleSession"],
      ["another producer controller", message(1, { from: producer2 }), "UnknownSender"],
      ["a seq beyond the demand it granted", message(5), "BeyondDemand"]
    ] as const)("drops a message from %s", (_, event, reason) => {
      expect(run(registered(4), event).actions).toEqual([{ _tag: "Dropped", reason }])
    })

    it("answers a duplicate of a confirmed message with an Ack", () => {
      let state = registered()
      state = run(state, message(1)).state
      state = run(state, confirm(state)).state
      const { actions } = run(state, message(1))
      expect(sentMessages(actions)).toEqual([{ _tag: "Ack", sessionId: "s1", nonce: "c1.1", confirmedSeq: 1 }])
    })

    it("ignores a duplicate of a buffered or in-flight message", () => {
      let state = registered()
      state = run(state, message(1), message(2)).state
      expect(run(state, message(1)).actions).toEqual([])
      expect(run(state, message(2)).actions).toEqual([])
    })

    it("tops demand up once half the window is used, and to a whole window whenever it runs out of work", () => {
      let state = registered(4)
      state = run(state, message(1), message(2)).state
      const first = run(state, confirm(state))
      expect(sentMessages(first.actions)).toEqual([])
      state = first.state
      const second = run(state, confirm(state))
      expect(sentMessages(second.actions)).toEqual([
        { _tag: "Request", sessionId: "s1", nonce: "c1.1", confirmedSeq: 2, requestUpToSeq: 6, viaTimeout: false }
      ])
      state = run(second.state, message(3)).state
      // Only a quarter of the window is used, but nothing is left to work on: a consumer that
      // only acknowledged here would advertise less than its window until it next used half of
      // it, and a producer sizes its grants (so its stores) by that demand.
      const idle = run(state, confirm(state))
      expect(sentMessages(idle.actions)).toEqual([
        { _tag: "Request", sessionId: "s1", nonce: "c1.1", confirmedSeq: 3, requestUpToSeq: 7, viaTimeout: false }
      ])
    })

    it("ignores a confirmation of a superseded delivery", () => {
      const state = run(registered(), message(1)).state
      expect(run(state, { _tag: "Confirm", id: 999, now: 0 }).actions).toEqual([])
    })
  })

  describe("gaps", () => {
    it("buffers past a gap and asks for a resend, at most once per resend interval", () => {
      const state = registered(4, 1000)
      const first = run(state, message(2, { now: 10 }))
      expect(sentMessages(first.actions)).toEqual([
        { _tag: "Request", sessionId: "s1", nonce: "c1.1", confirmedSeq: 0, requestUpToSeq: 4, viaTimeout: true }
      ])
      const soon = run(first.state, message(3, { now: 500 }))
      expect(sentMessages(soon.actions)).toEqual([])
      const later = run(soon.state, message(4, { now: 1010 }))
      expect(sentMessages(later.actions)).toHaveLength(1)
    })

    it("delivers in order once the gap fills", () => {
      let state = run(registered(), message(3), message(2)).state
      expect(state.parked.map((m) => m.seq)).toEqual([2, 3])
      const filled = run(state, message(1))
      expect(delivered(filled.actions)).toEqual([[1, "m1"]])
      state = filled.state
      expect(state.received.length).toBe(3)
      const next = run(state, confirm(state))
      expect(delivered(next.actions)).toEqual([[2, "m2"]])
    })
  })

  describe("tick", () => {
    it("re-resolves and re-registers when it has no session", () => {
      const state = Machine.initial(config()).state
      expect(run(state, tick(1000)).actions).toEqual([{ _tag: "Resolve" }])
    })

    it("looks the producer up again only when it was silent since the previous tick", () => {
      let state = registered()
      const heard = run(state, tick(1000))
      expect(heard.actions).toEqual([])
      state = heard.state
      expect(tags(run(state, tick(2000)).actions)).toContain("Resolve")
    })

    it("a silent producer that still lives is not registered with again; a new controller is", () => {
      const state = run(registered(), tick(1000)).state
      const silent = run(state, tick(2000))
      const same = run(silent.state, { _tag: "Resolved", producer, now: 2000 })
      expect(sentMessages(same.actions)).toEqual([])
      expect(same.state.registrations).toBe(state.registrations)
      const moved = run(silent.state, { _tag: "Resolved", producer: producer2, now: 2000 })
      expect(sentMessages(moved.actions)).toMatchObject([{ _tag: "RegisterConsumer" }])
    })

    it("on a silent tick with nothing left to work through, asks again for everything it requested", () => {
      const state = run(registered(4), tick(1000)).state
      expect(sentMessages(run(state, tick(2000)).actions)).toEqual([
        { _tag: "Request", sessionId: "s1", nonce: "c1.1", confirmedSeq: 0, requestUpToSeq: 4, viaTimeout: true }
      ])
      // With received messages still to work through, silence is expected: nothing is asked.
      const busy = run(registered(4), message(1), message(2), tick(1000)).state
      expect(sentMessages(run(busy, tick(2000)).actions)).toEqual([])
    })

    it("never hands out again a delivery the endpoint holds, however long it takes", () => {
      let state = run(registered(4, 1000), message(1, { now: 100 })).state
      for (let now = 1000; now <= 60_000; now += 1000) {
        const ticked = run(state, tick(now))
        expect(tags(ticked.actions)).not.toContain("Deliver")
        state = ticked.state
      }
    })

    it("a delivery given back is handed out again at once, as a redelivery; not while draining", () => {
      const state = run(registered(4, 1000), message(1, { now: 100 })).state
      const id = Machine.inFlight(state)!.id
      const again = run(state, { _tag: "Release", id, now: 200 })
      expect(again.actions.filter((action) => action._tag === "Deliver")).toMatchObject([
        { _tag: "Deliver", redelivery: true, delivery: { seq: 1, id } }
      ])
      const draining = run(state, { _tag: "Drain" }, { _tag: "Release", id, now: 200 })
      expect(tags(draining.actions)).not.toContain("Deliver")
    })

    it("draining hands nothing more out once the delivery in flight is confirmed", () => {
      const state = run(registered(4), message(1), message(2), { _tag: "Drain" }).state
      const confirmed = run(state, confirm(state))
      expect(tags(confirmed.actions)).not.toContain("Deliver")
    })

    it("re-requests an open gap", () => {
      const state = run(registered(4, 1000), message(3, { now: 0 })).state
      expect(sentMessages(run(state, tick(999)).actions)).toEqual([])
      expect(sentMessages(run(state, tick(1000)).actions)).toEqual([
        { _tag: "Request", sessionId: "s1", nonce: "c1.1", confirmedSeq: 0, requestUpToSeq: 4, viaTimeout: true }
      ])
    })
  })

  describe("chunks", () => {
    const first = { first: true, last: false }
    const middle = { first: false, last: false }
    const last = { first: false, last: true }

    it("reassembles a chunk run and delivers it once, under the last chunk's seq", () => {
      const { actions, state } = run(
        registered(4),
        message(1, { id: "big", chunk: first }),
        message(2, { id: "big", chunk: middle }),
        message(3, { id: "big", chunk: last })
      )
      expect(delivered(actions)).toEqual([[3, "m1m2m3"]])
      const after = run(state, confirm(state))
      expect(after.state.confirmedSeq).toBe(3)
    })

    it("confirms nothing mid-message: an incomplete run waits", () => {
      const { actions } = run(registered(4), message(1, { id: "big", chunk: first }), message(2, { id: "big", chunk: middle }))
      expect(delivered(actions)).toEqual([])
    })

    it.each([
      ["a run not starting with a first chunk", [message(1, { id: "big", chunk: middle })], "never started"],
      ["a changed message id inside a run", [message(1, { id: "a", chunk: first }), message(2, { id: "b", chunk: last })], "broken at seq 2"],
      ["a second first chunk", [message(1, { id: "a", chunk: first }), message(2, { id: "a", chunk: first })], "broken at seq 2"],
      ["a whole message inside a run", [message(1, { id: "a", chunk: first }), message(2, { id: "a" })], "broken at seq 2"]
    ] as const)("fails terminally on %s", (_, events, reason) => {
      const { actions, state } = run(registered(4), ...events)
      expect(state.phase).toBe("Stopped")
      const failure = actions.find((action) => action._tag === "Fail") as { stage: string; cause: Error }
      expect(failure.stage).toBe("Protocol")
      expect(failure.cause.message).toContain(reason)
    })

    it("a run of exactly the window's size is delivered; one chunk more fails", () => {
      const fits = run(registered(3), message(1, { id: "big", chunk: first }), message(2, { id: "big", chunk: middle }), message(3, { id: "big", chunk: last }))
      expect(delivered(fits.actions)).toEqual([[3, "m1m2m3"]])
      const over = run(registered(3), message(1, { id: "big", chunk: first }), message(2, { id: "big", chunk: middle }), message(3, { id: "big", chunk: middle }))
      expect(over.state.phase).toBe("Stopped")
      expect(tags(over.actions)).toContain("Fail")
    })

    it("a lone chunk marked first and last is one whole message", () => {
      const { actions } = run(registered(4), message(1, { id: "one", chunk: { first: true, last: true } }), message(2))
      expect(delivered(actions)).toEqual([[1, "m1"]])
    })

    it("reassembles chunks that arrive out of order, and ignores duplicate chunks", () => {
      const { actions, state } = run(
        registered(4),
        message(3, { id: "big", chunk: last }),
        message(1, { id: "big", chunk: first }),
        message(1, { id: "big", chunk: first }),
        message(2, { id: "big", chunk: middle })
      )
      expect(delivered(actions)).toEqual([[3, "m1m2m3"]])
      expect(state.parked).toEqual([])
    })

    it("delivers back-to-back runs and whole messages in order, each under its last seq", () => {
      let state = run(
        registered(8),
        message(1, { id: "a", chunk: first }),
        message(2, { id: "a", chunk: last }),
        message(3),
        message(4, { id: "b", chunk: first }),
        message(5, { id: "b", chunk: last })
      ).state
      const seen: Array<readonly [number, string]> = []
      for (let round = 0; round < 3; round++) {
        const next = run(state, confirm(state))
        seen.push(...delivered(next.actions))
        state = next.state
      }
      expect(seen).toEqual([[3, "m3"], [5, "m4m5"]])
      expect(state.confirmedSeq).toBe(5)
    })

    it("a chunked delivery confirms all its seqs at once and tops demand up from there", () => {
      let state = run(registered(4), message(1, { id: "big", chunk: first }), message(2, { id: "big", chunk: middle }), message(3, { id: "big", chunk: last })).state
      const { actions, state: next } = run(state, confirm(state))
      expect(sentMessages(actions)).toEqual([
        { _tag: "Request", sessionId: "s1", nonce: "c1.1", confirmedSeq: 3, requestUpToSeq: 7, viaTimeout: false }
      ])
      state = next
      expect(state.received.length).toBe(0)
    })

    it("an incomplete run at the head tops demand up to a full window, so a long message can drain", () => {
      // Window 4: m1 takes seq 1; after its confirmation demand (up to 4) is not yet topped up, but
      // the next message needs seqs 2..5.
      let state = run(registered(4), message(1)).state
      state = run(state, message(2, { id: "big", chunk: first }), message(3, { id: "big", chunk: middle }), message(4, { id: "big", chunk: middle })).state
      const confirmed = run(state, confirm(state))
      expect(sentMessages(confirmed.actions)).toEqual([
        { _tag: "Request", sessionId: "s1", nonce: "c1.1", confirmedSeq: 1, requestUpToSeq: 5, viaTimeout: false }
      ])
      // Asked once: more chunks of the same run ask for nothing more.
      expect(sentMessages(run(confirmed.state, message(4, { id: "big", chunk: middle })).actions)).toEqual([])
      const done = run(confirmed.state, message(5, { id: "big", chunk: last }))
      expect(delivered(done.actions)).toEqual([[5, "m2m3m4m5"]])
    })

    it("a chunked message is handed out as its received chunks, in order, again on a redelivery", () => {
      const handed = run(registered(4, 1000), message(1, { id: "big", chunk: first }), message(2, { id: "big", chunk: last }))
      const original = handed.actions.find((action) => action._tag === "Deliver") as Extract<ConsumerAction, { _tag: "Deliver" }>
      const again = run(handed.state, { _tag: "Release", id: Machine.inFlight(handed.state)!.id, now: 1000 })
      const deliveries = again.actions.filter((action) => action._tag === "Deliver")
      expect(deliveries).toHaveLength(1)
      const redelivered = deliveries[0] as Extract<ConsumerAction, { _tag: "Deliver" }>
      expect([original.payload, redelivered.payload].map((payload) => Array.isArray(payload) ? payload.map(text) : "whole"))
        .toEqual([["m1", "m2"], ["m1", "m2"]])
      expect(redelivered.redelivery).toBe(true)
    })

    it("a whole message is handed out as the received bytes themselves", () => {
      const received = message(1)
      const { actions } = run(registered(4), received)
      const payload = received._tag === "Wire" && received.message._tag === "SequencedMessage" ? received.message.payload : undefined
      expect((actions.find((action) => action._tag === "Deliver") as Extract<ConsumerAction, { _tag: "Deliver" }>).payload).toBe(payload)
    })

    it("a new session drops a partial run: the reloaded producer's whole message is delivered", () => {
      let state = run(registered(4), message(1, { id: "big", chunk: first }), message(2, { id: "big", chunk: middle })).state
      state = run(state, resolved(producer2), regAck("c1.2", 1, "s2", producer2)).state
      expect(state.received.length).toBe(0)
      const s2 = { sessionId: "s2", from: producer2 }
      const { actions } = run(
        state,
        message(1, { ...s2, id: "big", chunk: first }),
        message(2, { ...s2, id: "big", chunk: middle }),
        message(3, { ...s2, id: "big", chunk: last })
      )
      expect(delivered(actions)).toEqual([[3, "m1m2m3"]])
    })

    it("fails naming both remedies when a message needs more chunks than the window", () => {
      const { actions, state } = run(
        registered(2),
        message(1, { id: "big", chunk: first }),
        message(2, { id: "big", chunk: middle })
      )
      expect(state.phase).toBe("Stopped")
      const failure = actions.find((action) => action._tag === "Fail") as { cause: Error }
      expect(failure.cause.message).toContain("raise the consumer window or the producer's chunk size")
      expect(failure.cause.message).toContain("window of 2")
      expect(failure).toMatchObject({ stage: "Protocol" })
    })
  })

  describe("concurrency and settles (workers)", () => {
    it("hands out up to `concurrency` messages at once; a later one done waits for the earlier to be confirmed", () => {
      const { actions, state } = run(worker(10, 2), message(1), message(2), message(3))
      expect(delivered(actions)).toEqual([[1, "m1"], [2, "m2"]])
      const second = state.handedOut[1].id
      const early = run(state, { _tag: "Confirm", id: second, now: 0 })
      expect(early.state.confirmedSeq).toBe(0)
      expect(delivered(early.actions)).toEqual([[3, "m3"]])
      const first = run(early.state, { _tag: "Confirm", id: state.handedOut[0].id, now: 0 })
      expect(first.state.confirmedSeq).toBe(2)
      expect(ids(first.state)).toEqual([[3, "Out"]])
    })

    it("a settle frees its handler at once, goes to the producer, repeats on the tick, and is confirmed past once Settled", () => {
      const state = run(worker(10, 1), message(1), message(2)).state
      const outcome = { _tag: "Failed", attempt: 1, error: "boom", retryAfterMs: 100 } as const
      const settling = run(state, { _tag: "Settle", id: state.handedOut[0].id, outcome, now: 0 })
      expect(sentMessages(settling.actions)).toEqual([{ _tag: "Settle", sessionId: "s1", nonce: "c1.1", seq: 1, outcome }])
      expect(delivered(settling.actions)).toEqual([[2, "m2"]])
      expect(settling.state.confirmedSeq).toBe(0)
      expect(sentMessages(run(settling.state, tick(1000)).actions).filter((message) => message._tag === "Settle")).toHaveLength(1)
      const done = run(settling.state, settled(1))
      expect(done.state.confirmedSeq).toBe(1)
      expect(ids(done.state)).toEqual([[2, "Out"]])
      // A Settled of another session, or for a seq not settling, changes nothing.
      expect(run(settling.state, { ...settled(1), message: { _tag: "Settled", sessionId: "old", seq: 1 } } as ConsumerEvent).state.confirmedSeq).toBe(0)
      expect(run(settling.state, settled(2)).state.confirmedSeq).toBe(0)
    })

    it("a worker whose every handler has been busy for the release interval hands back what it has not started", () => {
      const state = run(worker(10, 1, 1000), message(1, { now: 0 }), message(2), message(3)).state
      expect(sentMessages(run(state, tick(999)).actions).filter((message) => message._tag === "Settle")).toEqual([])
      const stuck = run(state, tick(1000))
      expect(sentMessages(stuck.actions).filter((message) => message._tag === "Settle")).toEqual([
        { _tag: "Settle", sessionId: "s1", nonce: "c1.1", seq: 2, outcome: { _tag: "Released" } },
        { _tag: "Settle", sessionId: "s1", nonce: "c1.1", seq: 3, outcome: { _tag: "Released" } }
      ])
      expect(delivered(stuck.actions)).toEqual([])
      // The slow job finishes; the released ones are confirmed past once the producer took them back.
      const finished = run(stuck.state, { _tag: "Confirm", id: state.handedOut[0].id, now: 1500 }, settled(2), settled(3))
      expect(finished.state.confirmedSeq).toBe(3)
      expect(finished.state.handedOut).toEqual([])
    })

    it("a point-to-point consumer never hands back what it has not started", () => {
      const state = run(registered(10), message(1), message(2)).state
      expect(sentMessages(run(state, tick(60_000)).actions).filter((message) => message._tag === "Settle")).toEqual([])
    })

    it("the attempt of a redelivered job comes with its hand-out", () => {
      const retried: ConsumerEvent = {
        _tag: "Wire",
        from: producer,
        message: { _tag: "SequencedMessage", sessionId: "s1", messageId: "job", seq: 1, payload: bytes("x"), attempt: 3 },
        now: 0
      }
      expect(run(worker(10, 1), retried).state.handedOut[0].attempt).toBe(3)
      expect(run(worker(10, 1), message(1)).state.handedOut[0].attempt).toBe(1)
    })
  })
})
