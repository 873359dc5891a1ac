import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import * as Machine from "../../src/Controller/WorkPullingMachine.js"
import type { Settle } from "../../src/Protocol/WireMessage.js"
import type { WorkAction, WorkConfig, WorkEvent, WorkState } from "../../src/Controller/WorkPullingMachine.js"
import type { ControllerAddress } from "../../src/Protocol/Address.js"
import { MaxWindow } from "../../src/Protocol/Config.js"
import { RequestNext, StoredAck } from "../../src/Protocol/Contract.js"
import type { DeliveryConfirmed, Stored } from "../../src/Protocol/Contract.js"
import { checkedRun } from "../support/PureStep.js"

const worker = (name: string, incarnation = `${name}-1`): ControllerAddress => ({ node: "n", endpoint: name, incarnation })
const w1 = worker("w1")
const w2 = worker("w2")
const w3 = worker("w3")
const bytes = (text: string) => new TextEncoder().encode(text)
const text = (payload: Uint8Array) => new TextDecoder().decode(payload)

const config = (overrides: Partial<WorkConfig> = {}): WorkConfig => ({
  endpoint: "p",
  incarnation: "p1",
  sessionId: "s1",
  deliveryConfirmation: false,
  retryIntervalMs: 500,
  auditIntervalMs: 500,
  durable: false,
  ...overrides
})

/** Folds events, returning the final state and every action in order. */
/** Every step is also checked to leave its input state as it was. */
const run = checkedRun<WorkState, WorkEvent, WorkAction>(Machine.step)

const tags = (actions: ReadonlyArray<WorkAction>) => actions.map((action) => action._tag)
const jobsSent = (actions: ReadonlyArray<WorkAction>, tag: "Send" | "Resend" = "Send") =>
  actions.flatMap((action) =>
    action._tag === tag && action.message._tag === "SequencedMessage"
      ? [{ to: action.to.endpoint, seq: action.message.seq, id: action.message.messageId, session: action.message.sessionId }]
      : []
  )
const sentTo = (actions: ReadonlyArray<WorkAction>) => jobsSent(actions).map((job) => `${job.to}:${job.id}`)

const verified = (address: ControllerAddress, nonce = `${address.endpoint}-n1`, now = 0): WorkEvent => ({
  _tag: "Verified",
  address,
  nonce,
  ok: true,
  now
})
const register = (address: ControllerAddress, nonce: string): WorkEvent => ({
  _tag: "Wire",
  from: address,
  message: { _tag: "RegisterConsumer", nonce },
  now: 0
})
const request = (
  from: ControllerAddress,
  confirmedSeq: number,
  upTo: number,
  options: { readonly session?: string; readonly nonce?: string; readonly viaTimeout?: boolean; readonly now?: number } = {}
): WorkEvent => ({
  _tag: "Wire",
  from,
  message: {
    _tag: "Request",
    sessionId: options.session ?? sessionOf(from),
    nonce: options.nonce ?? `${from.endpoint}-n1`,
    confirmedSeq,
    requestUpToSeq: upTo,
    viaTimeout: options.viaTimeout ?? false
  },
  now: options.now ?? 0
})
const ack = (from: ControllerAddress, confirmedSeq: number, session = sessionOf(from)): WorkEvent => ({
  _tag: "Wire",
  from,
  message: { _tag: "Ack", sessionId: session, nonce: `${from.endpoint}-n1`, confirmedSeq },
  now: 0
})

/** Tests bind w1, w2, w3 in that order, so their binding sessions are s1:1, s1:2, s1:3. */
const sessionOf = (address: ControllerAddress) => `s1:${Number(address.endpoint.slice(1))}`

const grantOf = (state: WorkState): RequestNext => {
  const handshake = state.handshake
  if (handshake._tag !== "Granted") throw new Error(`no grant outstanding: ${handshake._tag}`)
  return handshake.grant
}

const storedOf = (actions: ReadonlyArray<WorkAction>): ReadonlyArray<Stored> => {
  for (const action of actions) {
    if (action._tag === "Answer" && Either.isRight(action.result)) return action.result.right
  }
  throw new Error("no Stored answer")
}

/** Produces and acknowledges jobs under the outstanding grant (the everyday path). */
const produce = (state: WorkState, ...ids: ReadonlyArray<string>) => {
  const grant = grantOf(state)
  return run(state, {
    _tag: "ProduceAcked",
    grant,
    items: ids.map((messageId) => ({ messageId, payload: bytes(`payload-${messageId}`) })),
    now: 0
  })
}

/** A running controller with the given workers bound, each asking for `demand` jobs. */
const withWorkers = (demand: number, workers: ReadonlyArray<ControllerAddress> = [w1, w2, w3], overrides: Partial<WorkConfig> = {}) => {
  let state = Machine.initial(config(overrides)).state
  for (const address of workers) state = run(state, verified(address)).state
  for (const address of workers) state = run(state, request(address, 0, demand)).state
  return state
}

describe("WorkPullingMachine", () => {
  describe("registration and fencing", () => {
    it("asks the resolver to verify an unbound sender and answers nothing yet", () => {
      const { actions, state } = run(Machine.initial(config()).state, register(w1, "n1"))
      expect(actions).toEqual([{ _tag: "Verify", address: w1, nonce: "n1" }])
      expect(state.bindings).toEqual([])
    })

    it("a verified worker is bound with a fresh session and sequence space, and no demand", () => {
      const { actions, state } = run(Machine.initial(config()).state, verified(w1, "n1"))
      expect(actions).toEqual([{ _tag: "Send", to: w1, message: { _tag: "RegistrationAck", sessionId: "s1:1", nextSeq: 1, nonce: "n1" } }])
      expect(state.bindings).toHaveLength(1)
      expect(state.bindings[0]).toMatchObject({ address: w1, sessionId: "s1:1", demandUpTo: 0, confirmedSeq: 0 })
      expect(state.handshake._tag).toBe("Idle")
    })

    it("drops an unverified registration silently (no answer, no binding)", () => {
      const { actions, state } = run(Machine.initial(config()).state, { _tag: "Verified", address: w1, nonce: "n1", ok: false, now: 0 })
      expect(actions).toEqual([{ _tag: "Dropped", reason: "UnverifiedSender" }])
      expect(state.bindings).toEqual([])
    })

    it("a bound worker's periodic re-registration keeps its binding, session, progress and demand", () => {
      let state = withWorkers(4, [w1])
      state = produce(state, "a", "b").state
      state = run(state, ack(w1, 1)).state
      const { actions, state: next } = run(state, register(w1, "n2"))
      expect(actions).toEqual([{ _tag: "Send", to: w1, message: { _tag: "RegistrationAck", sessionId: "s1:1", nextSeq: 2, nonce: "n2" } }])
      expect(next.bindings[0]).toMatchObject({ sessionId: "s1:1", nonce: "n2", demandUpTo: 4, confirmedSeq: 1 })
      expect(next.bindings[0].unconfirmed.length).toBe(1)
    })

    it("a new incarnation of a bound worker replaces its binding: jobs requeue at the pool head, the new binding starts over", () => {
      let state = withWorkers(2, [w1])
      state = produce(state, "a", "b").state
      const w1b = worker("w1", "w1-2")
      const { actions, state: next } = run(state, verified(w1b, "z1"))
      expect(actions).toContainEqual({ _tag: "BindingEnded", worker: w1, reason: "Replaced", requeued: 2, cause: undefined })
      expect(actions).toContainEqual({ _tag: "Send", to: w1b, message: { _tag: "RegistrationAck", sessionId: "s1:2", nextSeq: 1, nonce: "z1" } })
      expect(next.bindings.map((binding) => binding.address)).toEqual([w1b])
      expect(next.pool.toArray().map((job) => [job.messageId, job.storeSeq, text(job.payload)])).toEqual([
        ["a", 1, "payload-a"],
        ["b", 2, "payload-b"]
      ])
      // The new incarnation gets them under fresh seqs of its own session once it asks.
      const resumed = run(next, request(w1b, 0, 2, { session: "s1:2", nonce: "z1" }))
      expect(jobsSent(resumed.actions)).toEqual([
        { to: "w1", seq: 1, id: "a", session: "s1:2" },
        { to: "w1", seq: 2, id: "b", session: "s1:2" }
      ])
    })

    it("registrations while loading are verified once loaded (each worker's latest one)", () => {
      const loading = Machine.initial(config({ durable: true })).state
      const waiting = run(loading, register(w1, "n1"), register(w2, "m1"), register(w1, "n2"))
      expect(waiting.actions).toEqual([])
      expect(run(loading, verified(w1)).actions).toEqual([{ _tag: "Dropped", reason: "NotRunning" }])
      const loaded = run(waiting.state, { _tag: "Loaded", state: { currentSeq: 0, pending: [] }, now: 0 })
      expect(loaded.actions).toEqual([
        { _tag: "Verify", address: w2, nonce: "m1" },
        { _tag: "Verify", address: w1, nonce: "n2" }
      ])
      expect(loaded.state.registrationsWhileLoading).toEqual([])
    })
  })

  describe("demand, grants and dispatch", () => {
    it("a grant opens once bound workers ask for more than the pool holds", () => {
      const bound = run(Machine.initial(config()).state, verified(w1)).state
      const { actions, state } = run(bound, request(w1, 0, 3))
      expect(tags(actions)).toEqual(["Offer"])
      expect(Machine.openDemand(state)).toBe(3)
    })

    /** w1 asked for 3 and holds `held` of them; w2 (when bound) asked for 3 and holds none. */
    const busy = (held: number, withW2: boolean) => {
      let state = withWorkers(3, [w1])
      if (held > 0) state = produce(state, ...["a", "b", "c"].slice(0, held)).state
      if (withW2) state = run(state, verified(w2), request(w2, 0, 3)).state
      return state
    }

    it.each([
      ["one idle worker", busy(0, false), 3, 3],
      ["one worker holding 2 of 3", busy(2, false), 1, 3],
      ["a busy worker and an idle one", busy(3, true), 3, 6],
      ["a worker holding 2 and an idle one", busy(2, true), 4, 6]
    ] as const)("%s: a grant opens on free demand and may carry the whole requested windows", (_, state, open, capacity) => {
      expect(Machine.openDemand(state)).toBe(open)
      expect(Machine.grantCapacity(state)).toBe(capacity)
    })

    it("what a busy worker cannot take yet waits in the pool; no grant opens until free demand exceeds it", () => {
      let state = busy(3, true)
      const filled = produce(state, "d", "e", "f", "g", "h", "i")
      expect(sentTo(filled.actions)).toEqual(["w2:d", "w2:e", "w2:f"])
      expect(filled.state.pool.toArray().map((job) => job.messageId)).toEqual(["g", "h", "i"])
      expect(tags(filled.actions)).not.toContain("Offer")
      expect(Machine.grantCapacity(filled.state)).toBe(3)
      // w2 is done and asks again: it takes the pool; w1, still busy, frees nothing.
      state = run(filled.state, request(w2, 3, 6)).state
      expect(state.pool.length).toBe(0)
      expect(state.handshake._tag).toBe("Idle")
      const freed = run(state, request(w1, 3, 6))
      expect(tags(freed.actions)).toContain("Offer")
      expect(Machine.grantCapacity(freed.state)).toBe(6)
    })

    it("offers no second grant while one is outstanding, and none when free demand does not exceed the pool", () => {
      const state = withWorkers(1, [w1])
      expect(tags(run(state, request(w1, 0, 5)).actions)).toEqual([])
      const filled = produce(state, "a")
      expect(tags(filled.actions)).not.toContain("Offer")
      expect(filled.state.handshake._tag).toBe("Idle")
    })

    it("dispatches the pool head to the next binding with free demand in strict round-robin", () => {
      const { actions } = produce(withWorkers(2), "j1", "j2", "j3", "j4", "j5", "j6")
      expect(sentTo(actions)).toEqual(["w1:j1", "w2:j2", "w3:j3", "w1:j4", "w2:j5", "w3:j6"])
      expect(jobsSent(actions).filter((job) => job.to === "w2").map((job) => job.seq)).toEqual([1, 2])
    })

    it("the round-robin cursor carries over between grants", () => {
      let state = withWorkers(3)
      const order: Array<string> = []
      for (const id of ["a", "b", "c", "d", "e"]) {
        const step = produce(state, id)
        order.push(...sentTo(step.actions))
        state = step.state
      }
      expect(order).toEqual(["w1:a", "w2:b", "w3:c", "w1:d", "w2:e"])
    })

    it("skips bindings without free demand", () => {
      let state = withWorkers(1)
      state = produce(state, "a", "b").state
      // w3 is the only one left with demand; w1 asks for more, then two more jobs arrive.
      state = run(state, request(w1, 0, 3)).state
      const { actions } = produce(state, "c", "d", "e")
      expect(sentTo(actions)).toEqual(["w3:c", "w1:d", "w1:e"])
    })

    it("keeps jobs in the pool until demand arrives, then sends them in pool order", () => {
      let state = withWorkers(2, [w1])
      state = produce(state, "a", "b").state
      state = run(state, verified(w2), request(w2, 0, 0)).state
      // w1 leaves: its jobs wait in the pool; w2 has no demand yet.
      state = run(state, { _tag: "Audited", address: w1, live: false, now: 0 }).state
      expect(state.pool.toArray().map((job) => job.messageId)).toEqual(["a", "b"])
      const { actions, state: next } = run(state, request(w2, 0, 1))
      expect(sentTo(actions)).toEqual(["w2:a"])
      expect(next.pool.toArray().map((job) => job.messageId)).toEqual(["b"])
    })

    it("a timeout request resends everything the worker holds unconfirmed", () => {
      let state = withWorkers(3, [w1])
      state = produce(state, "a", "b", "c").state
      const { actions } = run(state, request(w1, 1, 3, { viaTimeout: true }))
      expect(jobsSent(actions, "Resend").map((job) => job.seq)).toEqual([2, 3])
    })

    it("an Ack confirms without granting demand", () => {
      let state = withWorkers(2, [w1])
      state = produce(state, "a", "b").state
      const { actions, state: next } = run(state, ack(w1, 2))
      expect(actions).toEqual([{ _tag: "Confirmed", count: 2 }])
      expect(next.bindings[0].confirmedSeq).toBe(2)
      expect(Machine.openDemand(next)).toBe(0)
    })
  })

  describe("stale worker input", () => {
    it.each([
      ["an unbound sender", request(w2, 0, 5), "UnboundSender"],
      ["another incarnation of a bound worker", request(worker("w1", "w1-0"), 0, 5), "UnboundSender"],
      ["an earlier binding's session", request(w1, 0, 5, { session: "s1:0" }), "StaleSession"],
      ["an earlier controller's session", request(w1, 0, 5, { session: "s0:1" }), "StaleSession"]
    ] as const)("drops a Request from %s", (_, event, reason) => {
      const { actions, state } = run(withWorkers(2, [w1]), event)
      expect(actions).toEqual([{ _tag: "Dropped", reason }])
      expect(state.bindings[0].demandUpTo).toBe(2)
    })

    it("takes a Request of a bound worker under another of its registrations", () => {
      const { state } = run(withWorkers(2, [w1]), request(w1, 0, 5, { nonce: "w1-n0" }))
      expect(state.bindings[0].demandUpTo).toBe(5)
    })
  })

  describe("worker protocol violations end only that binding", () => {
    it.each([
      ["confirming beyond the last seq sent", request(w1, 3, 5), "confirmed seq 3 but the last seq sent is 1"],
      ["an Ack beyond the last seq sent", ack(w1, 2), "confirmed seq 2 but the last seq sent is 1"],
      ["more demand than the maximum window", request(w1, 0, MaxWindow + 1), "more than the maximum window"],
      ["demand below its confirmation", request(w1, 1, 0), "below its confirmed seq 1"]
    ] as const)("%s: the binding ends, its jobs go to the others, the controller keeps running", (_, event, message) => {
      let state = run(Machine.initial(config()).state, verified(w1), verified(w2), request(w1, 0, 1), request(w2, 0, 0)).state
      state = produce(state, "a").state
      const { actions, state: next } = run(state, event)
      expect(next.phase).toBe("Running")
      expect(tags(actions)).not.toContain("Fail")
      const ended = actions.find((action) => action._tag === "BindingEnded")
      expect(ended).toMatchObject({ worker: w1, reason: "Violation", requeued: 1 })
      expect(String((ended as { cause: Error }).cause.message)).toContain(message)
      expect(next.bindings.map((binding) => binding.address)).toEqual([w2])
      expect(next.pool.toArray().map((job) => job.messageId)).toEqual(["a"])
      // w2 takes the job as soon as it asks.
      expect(sentTo(run(next, request(w2, 0, 1)).actions)).toEqual(["w2:a"])
    })
  })

  describe("confirmation", () => {
    it("counts confirmed jobs when nobody asked for notifications", () => {
      let state = withWorkers(3, [w1])
      state = produce(state, "a", "b", "c").state
      expect(run(state, request(w1, 2, 3)).actions).toContainEqual({ _tag: "Confirmed", count: 2 })
    })

    it("with deliveryConfirmation, notifies each confirmed job with the store seq its Stored carried", () => {
      let state = withWorkers(2, [w1, w2], { deliveryConfirmation: true })
      state = produce(state, "a", "b", "c").state
      const { actions } = run(state, request(w2, 1, 3))
      const notify = actions.find((action) => action._tag === "Notify") as { confirmed: ReadonlyArray<DeliveryConfirmed> }
      expect(notify.confirmed.map((c) => [c.messageId, c.seq])).toEqual([["b", 2]])
    })

    it("a requeued job confirmed by another worker reports its original store seq", () => {
      let state = run(Machine.initial(config({ deliveryConfirmation: true })).state, verified(w1), verified(w2), request(w1, 0, 1), request(w2, 0, 0)).state
      state = produce(state, "a").state
      state = run(state, { _tag: "Audited", address: w1, live: false, now: 0 }).state
      const sent = run(state, request(w2, 0, 2))
      expect(jobsSent(sent.actions)).toEqual([{ to: "w2", seq: 1, id: "a", session: "s1:2" }])
      const confirmed = run(sent.state, ack(w2, 1))
      const notify = confirmed.actions.find((action) => action._tag === "Notify") as { confirmed: ReadonlyArray<DeliveryConfirmed> }
      expect(notify.confirmed.map((c) => [c.messageId, c.seq])).toEqual([["a", 1]])
    })

    it("a durable controller persists each confirmed job by id", () => {
      let state = Machine.initial(config({ durable: true })).state
      state = run(state, { _tag: "Loaded", state: { currentSeq: 0, pending: [] }, now: 0 }, verified(w1), request(w1, 0, 2)).state
      const loaded = run(state, { _tag: "Loaded", state: { currentSeq: 0, pending: [] }, now: 0 })
      expect(loaded.actions).toEqual([])
      state = run(Machine.initial(config({ durable: true })).state, {
        _tag: "Loaded",
        state: { currentSeq: 2, pending: [{ seq: 1, messageId: "x", payload: bytes("x") }, { seq: 2, messageId: "y", payload: bytes("y") }] },
        now: 0
      }, verified(w1), request(w1, 0, 2)).state
      expect(run(state, ack(w1, 2)).actions).toContainEqual({ _tag: "ConfirmJobs", messageIds: ["x", "y"] })
    })
  })

  describe("audits: how a gone worker's binding ends", () => {
    it("the timer asks the resolver about every bound worker once per audit interval, not before", () => {
      const state = withWorkers(1, [w1, w2])
      expect(Machine.nextDeadline(state)).toBe(500)
      expect(tags(run(state, { _tag: "Tick", now: 499 }).actions)).not.toContain("Audit")
      const { actions, state: next } = run(state, { _tag: "Tick", now: 500 })
      expect(actions.filter((action) => action._tag === "Audit")).toEqual([{ _tag: "Audit", workers: [w1, w2] }])
      expect(next.nextAuditAt).toBe(1000)
    })

    it("a worker the resolver no longer vouches for loses its binding; its jobs go to the head of the pool", () => {
      let state = run(
        Machine.initial(config()).state,
        verified(w1),
        verified(w2),
        verified(w3),
        request(w1, 0, 2),
        request(w2, 0, 1),
        request(w3, 0, 1)
      ).state
      const produced = produce(state, "a", "b", "c", "d")
      expect(sentTo(produced.actions)).toEqual(["w1:a", "w2:b", "w3:c", "w1:d"])
      state = run(produced.state, { _tag: "Audited", address: w3, live: false, now: 0 }).state
      expect(state.pool.toArray().map((job) => job.messageId)).toEqual(["c"])
      const { actions, state: next } = run(state, { _tag: "Audited", address: w1, live: false, now: 0 })
      expect(actions).toContainEqual({ _tag: "BindingEnded", worker: w1, reason: "Gone", requeued: 2, cause: undefined })
      expect(next.bindings.map((binding) => binding.address)).toEqual([w2])
      expect(next.pool.toArray().map((job) => [job.messageId, job.storeSeq])).toEqual([["a", 1], ["d", 4], ["c", 3]])
    })

    it("ignores a live answer and an answer about an incarnation no longer bound", () => {
      const state = withWorkers(1, [w1])
      expect(run(state, { _tag: "Audited", address: w1, live: true, now: 0 }).actions).toEqual([])
      expect(run(state, { _tag: "Audited", address: worker("w1", "w1-0"), live: false, now: 0 }).state.bindings).toHaveLength(1)
    })

    it("with no workers bound nothing is audited, and an idle controller has no deadline", () => {
      expect(Machine.nextDeadline(Machine.initial(config()).state)).toBeUndefined()
      const state = run(withWorkers(1, [w1]), { _tag: "Audited", address: w1, live: false, now: 0 }).state
      expect(state.nextAuditAt).toBeUndefined()
      // Only the outstanding grant's retry is left.
      expect(Machine.nextDeadline(state)).toBe(500)
      expect(tags(run(state, { _tag: "Tick", now: 5000 }).actions)).toEqual(["Offer"])
    })

    it("the deadline is the earlier of the grant retry and the next audit", () => {
      const late = run(Machine.initial(config({ auditIntervalMs: 2000 })).state, verified(w1, "w1-n1", 0), request(w1, 0, 1, { now: 100 })).state
      expect(late.handshake._tag).toBe("Granted")
      expect(Machine.nextDeadline(late)).toBe(600)
      expect(Machine.nextDeadline(run(late, { _tag: "Tick", now: 600 }).state)).toBe(1100)
      const early = run(Machine.initial(config({ auditIntervalMs: 300 })).state, verified(w1, "w1-n1", 0), request(w1, 0, 1, { now: 100 })).state
      expect(Machine.nextDeadline(early)).toBe(300)
      expect(Machine.nextDeadline(run(early, { _tag: "Tick", now: 300 }).state)).toBe(600)
    })
  })

  describe("the producer contract", () => {
    it("answers Stored with the store seq; emits on StoredAck; repeats are ignored, mismatches rejected", () => {
      const state = withWorkers(2, [w1])
      const grant = grantOf(state)
      const produced = run(state, { _tag: "Produce", grant, items: [{ messageId: "a", payload: bytes("x") }], now: 0 })
      const stored = storedOf(produced.actions)[0]
      expect(stored).toMatchObject({ messageId: "a", seq: 1, alreadyStored: false, token: grant.token })
      expect(jobsSent(produced.actions)).toEqual([])
      const acked = run(produced.state, { _tag: "StoredAck", ack: StoredAck.make(stored), now: 0 })
      expect(sentTo(acked.actions)).toEqual(["w1:a"])
      expect(tags(acked.actions)).toContain("Offer")
      expect(run(acked.state, { _tag: "StoredAck", ack: StoredAck.make(stored), now: 0 }).actions).toEqual([])
      const bogus = StoredAck.make({ ...stored, token: "p1:99" } as Stored)
      expect(run(acked.state, { _tag: "StoredAck", ack: bogus, now: 0 }).actions[0]).toMatchObject({
        _tag: "AckRejected",
        error: { reason: "UnknownStored" }
      })
    })

    it("a retried grant answered with the same Produced gets the same Stored; another answer is refused", () => {
      const state = withWorkers(2, [w1])
      const grant = grantOf(state)
      const first = run(state, { _tag: "Produce", grant, items: [{ messageId: "a", payload: bytes("x") }], now: 0 })
      const again = run(first.state, { _tag: "Produce", grant, items: [{ messageId: "a", payload: bytes("x") }], now: 0 })
      expect(storedOf(again.actions)).toEqual(storedOf(first.actions))
      expect(Machine.answeredBefore(first.state, grant, "b")).toMatchObject({ _tag: "Left", left: { reason: "TokenAlreadyAnswered" } })
      const stale = new RequestNext({ ...grant, controller: "p0" })
      expect(Machine.checkProduced(first.state, stale, "c", "x")?.reason).toBe("StaleGrant")
      expect(Machine.checkProduced(first.state, grant, " ", "x")?.reason).toBe("BlankMessageId")
    })

    it("re-offers an unanswered grant, and the grant of an unacknowledged Stored, after the retry interval", () => {
      const state = withWorkers(2, [w1])
      const grant = grantOf(state)
      expect(tags(run(state, { _tag: "Tick", now: 499 }).actions)).not.toContain("Offer")
      expect(run(state, { _tag: "Tick", now: 500 }).actions).toContainEqual({ _tag: "Offer", grant })
      const stored = run(state, { _tag: "Produce", grant, items: [{ messageId: "a", payload: bytes("x") }], now: 100 }).state
      expect(run(stored, { _tag: "Tick", now: 599 }).actions.filter((action) => action._tag === "Offer")).toEqual([])
      expect(run(stored, { _tag: "Tick", now: 600 }).actions).toContainEqual({ _tag: "Offer", grant })
    })

    it("answers a token that is not outstanding with StaleGrant", () => {
      const state = withWorkers(2, [w1])
      const wrong = new RequestNext({ ...grantOf(state), token: "p1:99" })
      const { actions } = run(state, { _tag: "Produce", grant: wrong, items: [{ messageId: "a", payload: bytes("x") }], now: 0 })
      expect(actions[0]).toMatchObject({ _tag: "Answer", result: { _tag: "Left", left: { reason: "StaleGrant" } } })
    })

    it("a failure stops the controller; it then ignores everything", () => {
      const stopped = run(withWorkers(2, [w1]), { _tag: "Fail", stage: "Protocol", cause: "boom" })
      expect(stopped.actions).toEqual([{ _tag: "Fail", stage: "Protocol", cause: "boom" }])
      expect(run(stopped.state, request(w1, 0, 3)).actions).toEqual([{ _tag: "Dropped", reason: "NotRunning" }])
    })
  })

  describe("durable lifecycle", () => {
    const durable = () => Machine.initial(config({ durable: true }))

    it("starts by loading; accepted, unconfirmed jobs become the pool in store order; the cursor continues", () => {
      expect(durable().actions).toEqual([{ _tag: "Load" }])
      const loaded = run(durable().state, {
        _tag: "Loaded",
        state: {
          currentSeq: 9,
          pending: [
            { seq: 3, messageId: "c", payload: bytes("c") },
            { seq: 7, messageId: "g", payload: bytes("g") }
          ]
        },
        now: 0
      }).state
      expect(loaded.phase).toBe("Running")
      expect(loaded.lastStoreSeq).toBe(9)
      expect(loaded.pool.toArray().map((job) => [job.messageId, job.storeSeq])).toEqual([["c", 3], ["g", 7]])
      // The first worker's demand takes the reloaded jobs before any grant opens.
      const bound = run(loaded, verified(w1), request(w1, 0, 2))
      expect(sentTo(bound.actions)).toEqual(["w1:c", "w1:g"])
      expect(tags(bound.actions)).not.toContain("Offer")
      expect(tags(run(bound.state, request(w1, 0, 3)).actions)).toContain("Offer")
    })

    it("stores before Stored, accepts on StoredAck, dispatches after the accept", () => {
      const state = run(durable().state, { _tag: "Loaded", state: { currentSeq: 4, pending: [] }, now: 0 }, verified(w1), request(w1, 0, 2)).state
      const grant = grantOf(state)
      const storing = run(state, { _tag: "Produce", grant, items: [{ messageId: "a", payload: bytes("x") }], now: 0 })
      expect(storing.actions).toEqual([{ _tag: "Store", token: grant.token, items: [{ messageId: "a", payload: bytes("x") }], accept: false }])
      const stored = run(storing.state, {
        _tag: "StoreCompleted",
        token: grant.token,
        results: [{ entry: { seq: 5, messageId: "a", payload: bytes("x") }, alreadyStored: false, accepted: false, confirmed: false }],
        now: 0
      })
      const answer = storedOf(stored.actions)[0]
      expect(answer.seq).toBe(5)
      const accepting = run(stored.state, { _tag: "StoredAck", ack: StoredAck.make(answer), now: 0 })
      expect(accepting.actions).toEqual([{ _tag: "Accept", token: grant.token, messageIds: ["a"] }])
      const accepted = run(accepting.state, { _tag: "AcceptCompleted", token: grant.token, now: 0 })
      expect(jobsSent(accepted.actions)).toEqual([{ to: "w1", seq: 1, id: "a", session: "s1:1" }])
    })

    it("does not dispatch a resubmission of an accepted or confirmed job; dispatches one stored but never accepted", () => {
      const state = run(durable().state, { _tag: "Loaded", state: { currentSeq: 3, pending: [] }, now: 0 }, verified(w1), request(w1, 0, 5)).state
      const grant = grantOf(state)
      const entry = (seq: number, messageId: string) => ({ seq, messageId, payload: bytes(messageId) })
      const stored = run(state, {
        _tag: "Produce",
        grant,
        items: ["old", "done", "lost"].map((messageId) => ({ messageId, payload: bytes(messageId) })),
        now: 0
      }, {
        _tag: "StoreCompleted",
        token: grant.token,
        results: [
          { entry: entry(1, "old"), alreadyStored: true, accepted: true, confirmed: false },
          { entry: { ...entry(2, "done"), payload: new Uint8Array(0) }, alreadyStored: true, accepted: true, confirmed: true },
          { entry: entry(3, "lost"), alreadyStored: true, accepted: false, confirmed: false }
        ],
        now: 0
      })
      expect(storedOf(stored.actions).map((answer) => [answer.messageId, answer.seq, answer.alreadyStored])).toEqual([
        ["old", 1, true],
        ["done", 2, true],
        ["lost", 3, true]
      ])
      const done = run(stored.state, { _tag: "AckAll", token: grant.token, now: 0 }, { _tag: "AcceptCompleted", token: grant.token, now: 0 })
      expect(sentTo(done.actions)).toEqual(["w1:lost"])
    })

    describe("produce-and-acknowledge (the everyday path): one store-and-accept step", () => {
      /** Loaded with `pending` jobs (store seqs 1..), w1 bound with demand for 10. */
      const ready = (pending: ReadonlyArray<string> = []) =>
        run(durable().state, {
          _tag: "Loaded",
          state: { currentSeq: 10, pending: pending.map((messageId, index) => ({ seq: 1 + index, messageId, payload: bytes(messageId) })) },
          now: 0
        }, verified(w1), request(w1, 0, 10)).state

      it("stores with accept, then answers and dispatches in the completion's fold", () => {
        const state = ready()
        const token = grantOf(state).token
        const storing = produce(state, "a")
        expect(storing.actions).toEqual([{ _tag: "Store", token, items: [{ messageId: "a", payload: bytes("payload-a") }], accept: true }])
        const done = run(storing.state, {
          _tag: "StoreCompleted",
          token,
          results: [{ entry: { seq: 11, messageId: "a", payload: bytes("payload-a") }, alreadyStored: false, accepted: false, confirmed: false }],
          now: 0
        })
        expect(tags(done.actions)).toEqual(["Answer", "Completed", "Send", "Offer"])
        expect(storedOf(done.actions).map((answer) => [answer.messageId, answer.seq])).toEqual([["a", 11]])
        expect(sentTo(done.actions)).toEqual(["w1:a"])
      })

      const cases: ReadonlyArray<{
        readonly name: string
        readonly alreadyStored: boolean
        readonly accepted: boolean
        readonly confirmed?: boolean
        readonly held?: boolean
        readonly retried?: boolean
        readonly dispatched: boolean
      }> = [
        { name: "a new job", alreadyStored: false, accepted: false, dispatched: true },
        { name: "stored by an earlier producer that crashed before accepting", alreadyStored: true, accepted: false, dispatched: true },
        { name: "confirmed before", alreadyStored: true, accepted: true, confirmed: true, dispatched: false },
        { name: "confirmed before, on a retried store", alreadyStored: true, accepted: true, confirmed: true, retried: true, dispatched: false },
        { name: "accepted before and reloaded (held)", alreadyStored: true, accepted: true, held: true, dispatched: false },
        { name: "held, on a retried store", alreadyStored: true, accepted: true, held: true, retried: true, dispatched: false },
        // the first attempt committed and its answer was lost: `accepted` is this store's own
        { name: "accepted by a retried store's own first attempt", alreadyStored: true, accepted: true, retried: true, dispatched: true }
      ]
      for (const row of cases) {
        it(`${row.dispatched ? "dispatches" : "does not dispatch"} a job ${row.name}`, () => {
          const state = ready(row.held === true ? ["j"] : [])
          const grant = grantOf(state)
          const done = run(state, { _tag: "ProduceAcked", grant, items: [{ messageId: "j", payload: bytes("fresh") }], now: 0 }, {
            _tag: "StoreCompleted",
            token: grant.token,
            results: [{
              entry: { seq: 1, messageId: "j", payload: bytes("j") },
              alreadyStored: row.alreadyStored,
              accepted: row.accepted,
              confirmed: row.confirmed ?? false
            }],
            ...(row.retried === true ? { retried: true } : {}),
            now: 0
          })
          expect(storedOf(done.actions).map((answer) => [answer.messageId, answer.seq])).toEqual([["j", 1]])
          expect(sentTo(done.actions)).toEqual(row.dispatched ? ["w1:j"] : [])
          expect(tags(done.actions)).toContain("Completed")
        })
      }
    })

    it("ignores a late store or accept completion of another token", () => {
      const state = run(durable().state, { _tag: "Loaded", state: { currentSeq: 0, pending: [] }, now: 0 }, verified(w1), request(w1, 0, 5)).state
      expect(run(state, { _tag: "StoreCompleted", token: "p1:0", results: [], now: 0 }).actions).toEqual([])
      expect(run(state, { _tag: "AcceptCompleted", token: "p1:0", now: 0 }).actions).toEqual([])
    })
  })

  it("never mutates its input state", () => {
    const snapshot = (state: WorkState) => ({
      ...state,
      pool: state.pool.toArray().map((job) => job.messageId),
      bindings: state.bindings.map((binding) => ({ ...binding, unconfirmed: binding.unconfirmed.toArray().map((entry) => entry.message.seq) }))
    })
    const state = withWorkers(2)
    const before = snapshot(state)
    let next = produce(state, "a", "b", "c").state
    const middle = snapshot(next)
    next = run(next, request(w1, 1, 4), { _tag: "Audited", address: w2, live: false, now: 0 }, verified(worker("w3", "w3-2"))).state
    expect(next.bindings).not.toBe(state.bindings)
    expect(snapshot(state)).toEqual(before)
    expect(snapshot(produce(state, "a", "b", "c").state)).toEqual(middle)
  })

  describe("settles: failed, handed-back and dead-lettered jobs", () => {
    const settle = (from: ControllerAddress, seq: number, outcome: Settle["outcome"], now = 0): WorkEvent => ({
      _tag: "Wire",
      from,
      message: { _tag: "Settle", sessionId: sessionOf(from), nonce: `${from.endpoint}-n1`, seq, outcome },
      now
    })
    const settledTo = (actions: ReadonlyArray<WorkAction>) =>
      actions.flatMap((action) => action._tag === "Send" && action.message._tag === "Settled" ? [`${action.to.endpoint}:${action.message.seq}`] : [])
    /** w1 and w2 bound with demand 1 each; job a went to w1, b to w2, c waits in the pool. */
    const dispatched = (overrides: Partial<WorkConfig> = {}) => produce(withWorkers(1, [w1, w2], overrides), "a", "b", "c").state

    it("a failed job waits for its retry time, then goes to any worker as its next attempt; its worker moves on", () => {
      const failed = run(dispatched(), settle(w1, 1, { _tag: "Failed", attempt: 1, error: "boom", retryAfterMs: 100 }, 0))
      expect(settledTo(failed.actions)).toEqual(["w1:1"])
      expect(failed.state.delayed.map((delayed) => [delayed.job.messageId, delayed.job.attempt, delayed.dueAt])).toEqual([["a", 2, 100]])
      expect(Machine.nextDeadline(failed.state)).toBe(100)
      // w1 confirms past it (no confirmation reported for it) and takes c; the retry waits.
      const moved = run(failed.state, request(w1, 1, 2))
      expect(moved.actions.filter((action) => action._tag === "Confirmed")).toEqual([])
      expect(sentTo(moved.actions)).toEqual(["w1:c"])
      const due = run(moved.state, { _tag: "Tick", now: 100 }, request(w2, 1, 2))
      const retried = due.actions.flatMap((action) => action._tag === "Send" && action.message._tag === "SequencedMessage" ? [action.message] : [])
      expect(retried.map((message) => [message.messageId, message.attempt])).toEqual([["a", 2]])
    })

    it("asks to be woken when the first recorded retry falls due, and releases it then", () => {
      const wakes = (actions: ReadonlyArray<WorkAction>) => actions.flatMap((action) => action._tag === "WakeAt" ? [action.at] : [])
      const failed = run(dispatched(), settle(w1, 1, { _tag: "Failed", attempt: 1, error: "boom", retryAfterMs: 100 }, 0))
      expect(wakes(failed.actions)).toEqual([100])
      const second = run(failed.state, settle(w2, 1, { _tag: "Failed", attempt: 1, error: "boom", retryAfterMs: 100 }, 30))
      expect(wakes(second.actions)).toEqual([100])
      const early = run(second.state, { _tag: "RetryDue", now: 99 })
      expect(early.state.delayed).toHaveLength(2)
      const due = run(early.state, request(w1, 1, 2), { _tag: "RetryDue", now: 100 })
      expect(due.state.delayed.map((delayed) => delayed.job.messageId)).toEqual(["b"])
      expect(wakes(due.actions)).toEqual([130])
      expect(due.state.pool.toArray().map((job) => job.messageId)).toContain("a")
      // Durable: asked only once the attempt is written.
      const durable = run(Machine.initial(config({ durable: true })).state, {
        _tag: "Loaded",
        state: { currentSeq: 1, pending: [{ seq: 1, messageId: "x", payload: bytes("x"), attempts: 1, notBefore: 500 }] },
        now: 0
      })
      expect(wakes(durable.actions)).toEqual([500])
    })

    it("durable: a failure is recorded with its attempt and retry time; a dead letter before Settled", () => {
      let state = run(Machine.initial(config({ durable: true })).state, { _tag: "Loaded", state: { currentSeq: 0, pending: [] }, now: 0 }).state
      for (const address of [w1, w2]) state = run(state, verified(address), request(address, 0, 1)).state
      const grant = grantOf(state)
      state = run(state, { _tag: "ProduceAcked", grant, items: [{ messageId: "a", payload: bytes("a") }, { messageId: "b", payload: bytes("b") }], now: 0 }).state
      state = run(state, {
        _tag: "StoreCompleted",
        token: grant.token,
        results: ["a", "b"].map((id, index) => ({
          entry: { seq: index + 1, messageId: id, payload: bytes(id) },
          alreadyStored: false,
          accepted: false,
          confirmed: false
        })),
        now: 0
      }).state
      const failed = run(state, settle(w1, 1, { _tag: "Failed", attempt: 2, error: "x", retryAfterMs: 50 }, 10))
      expect(failed.actions.filter((action) => action._tag === "RecordFailure")).toEqual([
        { _tag: "RecordFailure", messageId: "a", attempts: 2, lastError: "x", notBefore: 60 }
      ])
      // The retry is due at 60 but waits for its attempt to be written: a restart must not forget it.
      expect(Machine.nextDeadline(failed.state)).toBe(failed.state.nextAuditAt)
      const due = run(failed.state, request(w1, 1, 2), { _tag: "Tick", now: 100 })
      expect(due.state.delayed.map((delayed) => delayed.job.messageId)).toEqual(["a"])
      expect(sentTo(due.actions)).toEqual([])
      // A report of another attempt releases nothing; the report of this one sends it at once.
      const stale = run(due.state, { _tag: "FailuresRecorded", failures: [{ messageId: "a", attempts: 1 }], now: 101 })
      expect(stale.state.delayed.map((delayed) => delayed.recorded)).toEqual([false])
      const written = run(stale.state, { _tag: "FailuresRecorded", failures: [{ messageId: "a", attempts: 2 }], now: 102 })
      expect(written.state.delayed).toEqual([])
      const retried = written.actions.flatMap((action) => action._tag === "Send" && action.message._tag === "SequencedMessage" ? [action.message] : [])
      expect(sentTo(written.actions)).toEqual(["w1:a"])
      expect(retried.map((message) => [message.messageId, message.attempt])).toEqual([["a", 3]])
      // Recorded before its time, it waits for its time as usual.
      const early = run(failed.state, { _tag: "FailuresRecorded", failures: [{ messageId: "a", attempts: 2 }], now: 20 })
      expect(early.state.delayed.map((delayed) => [delayed.dueAt, delayed.recorded])).toEqual([[60, true]])
      expect(early.actions).toContainEqual({ _tag: "WakeAt", at: 60 })
      expect(failed.actions.map((action) => action._tag)).not.toContain("WakeAt")
      expect(Machine.nextDeadline(early.state)).toBe(60)
      const dead = run(state, settle(w2, 1, { _tag: "DeadLettered", attempts: 5, error: "poison" }, 20))
      expect(dead.actions.filter((action) => action._tag === "DeadLetter")).toMatchObject([{ messageId: "b", attempts: 5, lastError: "poison", at: 20 }])
      expect(settledTo(dead.actions)).toEqual([])
      const recorded = run(dead.state, { _tag: "DeadLetterRecorded", worker: w2, sessionId: sessionOf(w2), seq: 1, now: 21 })
      expect(settledTo(recorded.actions)).toEqual(["w2:1"])
    })

    it("a handed-back job goes to the head of the pool at once, for another worker", () => {
      const released = run(dispatched(), settle(w1, 1, { _tag: "Released" }))
      expect(settledTo(released.actions)).toEqual(["w1:1"])
      expect(Machine.freeDemand(released.state.bindings[0])).toBe(0)
      const taken = run(released.state, request(w2, 1, 2))
      expect(sentTo(taken.actions)).toEqual(["w2:a"])
    })

    it("a dead-lettered job leaves the flow; durable: recorded before Settled", () => {
      const volatile = run(dispatched(), settle(w1, 1, { _tag: "DeadLettered", attempts: 3, error: "poison" }))
      expect(settledTo(volatile.actions)).toEqual(["w1:1"])
      expect(volatile.state.pool.length).toBe(1)
      expect(volatile.state.delayed).toEqual([])
    })

    it("a job its worker settled is not requeued when the binding ends", () => {
      const released = run(dispatched(), settle(w1, 1, { _tag: "DeadLettered", attempts: 3, error: "poison" }))
      const gone = run(released.state, { _tag: "Audited", address: w1, live: false, now: 0 })
      expect(gone.actions.filter((action) => action._tag === "BindingEnded")).toMatchObject([{ requeued: 0 }])
    })

    it("a repeated settle is answered again; a settle of a seq never sent ends the binding", () => {
      const once = run(dispatched(), settle(w1, 1, { _tag: "Released" }))
      expect(settledTo(run(once.state, settle(w1, 1, { _tag: "Released" })).actions)).toEqual(["w1:1"])
      expect(tags(run(dispatched(), settle(w1, 5, { _tag: "Released" })).actions)).toContain("BindingEnded")
    })
  })
})

