/**
 * The fiber shell around `ProducerMachine`: it owns the controller's inbox, its retry timer and
 * (when durable) its durable lane, folds events through the pure machine and performs the
 * actions. Endpoint calls (`produce`, `storedAck`) fold in the caller's fiber
 * (`internal/ProducerCalls`, shared with work-pulling): a fold is synchronous, so the JS thread
 * already serializes them with the inbox fiber's folds.
 */
import { Duration, Effect, FiberSet } from "effect"
import type { Either, Scope } from "effect"
import type { EndpointRecord } from "../internal/EndpointRegistry.js"
import { sameAddress } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import type { DeliveryConfirmed, RequestNext, Stored, StoredAck } from "../Protocol/Contract.js"
import type { ProducerContractError } from "../Protocol/Errors.js"
import type { StopOutcome } from "../internal/StopOutcome.js"
import type { PayloadCodec } from "../Protocol/PayloadCodec.js"
import type { Envelope } from "../Protocol/WireMessage.js"
import type { SystemInternals } from "../internal/SystemInternals.js"
import * as RecyclingTransports from "../Transport/internal/RecyclingTransports.js"
import type { DurableProducerQueueService } from "../DurableQueue/DurableProducerQueue.js"
import * as DurableLane from "./DurableLane.js"
import * as DeadlineTimer from "./internal/DeadlineTimer.js"
import * as FrameFit from "./internal/FrameFit.js"
import * as ProducerCalls from "./internal/ProducerCalls.js"
import type { Handshake } from "./internal/ProducerHandshake.js"
import type { SeqLog } from "./internal/SeqLog.js"
import * as SnapshotPool from "./internal/SnapshotPool.js"
import * as WireInput from "./internal/WireInput.js"
import * as Machine from "./ProducerMachine.js"

export interface ProducerSettings {
  readonly endpoint: string
  readonly consumer: string
  readonly deliveryConfirmation: boolean
  readonly retryInterval: Duration.Duration
  readonly chunkSize: number | undefined
  readonly durableQueue: DurableProducerQueueService | undefined
  readonly queueRetry: DurableLane.QueueRetryPolicy
  /** The node hosting the consumer (a remoting-only flow); absent when it is local. */
  readonly consumerNode?: string | undefined
}

/** Why a produce call can fail. */
export type ProduceError = ProducerCalls.ProduceError

/** What the controller tells its endpoint. */
export interface ProducerHooks {
  readonly offerGrant: (grant: RequestNext) => void
  readonly notify: (confirmed: ReadonlyArray<DeliveryConfirmed>) => void
  /** The controller stopped: terminal (publish and wait for respawn) or to be restarted. */
  readonly stopped: (outcome: StopOutcome) => void
}


export interface ProducerStats {
  /** Wire messages sent the first time. */
  readonly sent: number
  /** Wire messages sent again after a timeout request. */
  readonly resent: number
  /** Business messages confirmed by the consumer. */
  readonly confirmed: number
  /** Inputs ignored as stale, unbound or unverified. */
  readonly dropped: number
}

export interface ProducerController<A> {
  readonly address: ControllerAddress
  readonly running: () => boolean
  readonly produce: (
    grant: RequestNext,
    messageId: string,
    payload: A
  ) => Effect.Effect<Stored, ProduceError>
  /** The everyday path: one grant answered by a batch (one message on the contract path). */
  readonly produceAll: (
    grant: RequestNext,
    items: ReadonlyArray<{ readonly messageId: string; readonly payload: A }>
  ) => Effect.Effect<ReadonlyArray<Stored>, ProduceError>
  readonly storedAck: (ack: StoredAck) => Effect.Effect<void, ProducerContractError>
  /** Acknowledges everything stored under the grant (the everyday path owns its messages). */
  readonly ackAll: (token: string) => void
  /**
   * Produces and acknowledges a batch under one grant. A volatile controller settles in the same
   * call (an `Either`); a durable one returns an effect that waits for the store.
   */
  readonly sendNow: (
    grant: RequestNext,
    items: ReadonlyArray<{ readonly messageId: string; readonly payload: A }>
  ) =>
    | Either.Either<ReadonlyArray<Stored>, ProduceError>
    | Effect.Effect<ReadonlyArray<Stored>, ProduceError>
  /** The handshake as it stands (the everyday `send` path recovers abandoned handshakes with it). */
  readonly handshake: () => Handshake
  /** Messages the consumer's free demand is worth (with chunking, an estimate). */
  readonly freeDemand: () => number
  readonly stats: () => ProducerStats
}

/** Accepts a registering controller only if it is the live consumer controller configured for us. */
export const verifyConsumer = (record: EndpointRecord | undefined, producer: string, sender: ControllerAddress): boolean =>
  record !== undefined && record.kind === "Consumer" && record.peer === producer && sameAddress(record.address, sender)

/** A stored message too large for its frame (stored by an earlier controller without chunking). */
const unsendable = (fit: FrameFit.FrameFit, message: Envelope["message"]) =>
  message._tag === "SequencedMessage" ? fit.sequenced(message.messageId, message.payload.length) : undefined

export const make = <A>(
  settings: ProducerSettings,
  codec: PayloadCodec<A>,
  system: SystemInternals,
  hooks: ProducerHooks
): Effect.Effect<ProducerController<A>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const incarnation = system.newId()
    const address: ControllerAddress = { node: system.transport.node, endpoint: settings.endpoint, incarnation }
    const clock = yield* Effect.clock
    const runFork = yield* FiberSet.makeRuntime<never>()
    const config: Machine.ProducerConfig = {
      endpoint: settings.endpoint,
      consumer: settings.consumer,
      incarnation,
      sessionId: system.newId(),
      deliveryConfirmation: settings.deliveryConfirmation,
      retryIntervalMs: Duration.toMillis(settings.retryInterval),
      durable: settings.durableQueue !== undefined,
      chunkSize: settings.chunkSize
    }
    // Only frames to another node have a size limit (local envelopes never become frames).
    const remoteLimit = settings.consumerNode !== undefined && settings.consumerNode !== system.transport.node
      ? system.transport.maxFrameSize
      : undefined
    const frameFit = remoteLimit === undefined ? undefined : FrameFit.make({
      maxFrameSize: remoteLimit,
      from: address,
      consumer: settings.consumer,
      sessionId: config.sessionId,
      chunkSize: settings.chunkSize
    })
    // Snapshots of large payloads are recycled once confirmed, where the transport lets nothing
    // outlive that; never with a durable queue, which is handed the snapshots to store. Two idle
    // buffers cover the next message or two of a steady stream.
    const pool = config.durable || settings.chunkSize === undefined || !RecyclingTransports.recyclable(system.transport)
      ? undefined
      : SnapshotPool.make({ chunkSize: settings.chunkSize, idle: 2 })
    // The highest wire seq sent so far: a chunk sent again (a resend, or the first sends to a new
    // binding) leaves an earlier envelope that may still be in flight when its message is confirmed.
    let highestSent = 0
    const counters = { sent: 0, resent: 0, confirmed: 0, dropped: 0 }
    const now = () => clock.unsafeCurrentTimeMillis()
    let state: Machine.ProducerState
    let stoppedWith: StopOutcome | undefined
    // Set when the controller's scope closes (a respawn, or the endpoint's end): from then on it
    // takes no call and folds no event, like a stopped one, though nobody is told it stopped.
    let closed = false
    const finished = () => closed || stoppedWith !== undefined
    const timer = DeadlineTimer.make()

    const stop = (outcome: StopOutcome) => {
      if (finished()) return
      stoppedWith = outcome
      calls.abandon()
      hooks.stopped(outcome)
    }

    const lane = settings.durableQueue === undefined ? undefined : DurableLane.make({
      queue: settings.durableQueue,
      retry: settings.queueRetry,
      runFork,
      completed: (event) => dispatch(event(now())),
      failed: (stage, cause, terminal) => {
        if (terminal) dispatch({ _tag: "Fail", stage, cause })
        else stop({ _tag: "Restart", cause })
      },
      now
    })

    const perform = (actions: ReadonlyArray<Machine.ProducerAction>) => {
      let envelopes: Array<Envelope> | undefined
      for (const action of actions) {
        switch (action._tag) {
          case "Send":
          case "Resend": {
            const refused = frameFit === undefined ? undefined : unsendable(frameFit, action.message)
            if (refused !== undefined) {
              stop({ _tag: "Terminal", stage: "Protocol", cause: refused })
              return
            }
            if (action._tag === "Send") counters.sent++
            else counters.resent++
            if (pool !== undefined && action.message._tag === "SequencedMessage") {
              if (action.message.seq <= highestSent) pool.keep(action.message.payload)
              else highestSent = action.message.seq
            }
            ;(envelopes ??= []).push({ from: address, to: action.to, message: action.message })
            break
          }
          case "Offer":
            hooks.offerGrant(action.grant)
            timer.wake()
            break
          case "Answer":
            calls.settle(action)
            break
          case "Completed":
          case "AckRejected":
            break
          case "Verify":
            // Asked of the configured consumer node: a flow follows one resolution authority.
            runFork(Effect.flatMap(system.lookup(action.address.endpoint, settings.consumerNode), (record) =>
              Effect.sync(() =>
                dispatch({
                  _tag: "Verified",
                  address: action.address,
                  nonce: action.nonce,
                  ok: verifyConsumer(record, settings.endpoint, action.address),
                  now: now()
                })
              )))
            break
          case "Notify":
            counters.confirmed += action.confirmed.length
            hooks.notify(action.confirmed)
            break
          case "Confirmed":
            counters.confirmed += action.count
            break
          case "Load":
          case "Store":
          case "Accept":
          case "PersistConfirm":
            lane?.submit(action)
            break
          case "Fail":
            stop({ _tag: "Terminal", stage: action.stage, cause: action.cause })
            break
          case "Dropped":
            counters.dropped++
            break
        }
      }
      if (envelopes !== undefined) system.transport.post(envelopes)
    }

    /**
     * The first `count` entries were just confirmed: their messages' snapshots go back to the pool.
     * Each of their chunks went out once, to the consumer, which had to take it in to confirm it
     * and forgets it when it confirms, before it tells us: nothing outside this controller holds
     * them any longer. (A chunk that went out again was kept out of the pool when it did.)
     */
    const recycle = (pool: SnapshotPool.SnapshotPool, confirmed: SeqLog<Machine.OutboundEntry>, count: number) => {
      if (!RecyclingTransports.recyclable(system.transport)) return
      for (let index = 0; index < count; index++) {
        const message = confirmed.at(index)!.message
        if (message.chunk?.last === true) pool.release(message.payload)
      }
    }

    const dispatch = (event: Machine.ProducerEvent): ReadonlyArray<Machine.ProducerAction> => {
      if (finished()) return []
      const before = state
      const next = Machine.step(state, event)
      state = next.state
      if (pool !== undefined && state.confirmedSeq > before.confirmedSeq) {
        recycle(pool, before.unconfirmed, state.confirmedSeq - before.confirmedSeq)
      }
      perform(next.actions)
      return next.actions
    }

    const calls: ProducerCalls.Calls<A> = ProducerCalls.make({
      endpoint: settings.endpoint,
      codec,
      durable: config.durable,
      now,
      stopped: finished,
      check: (grant, messageId, payload) => Machine.checkProduced(state, grant, messageId, payload),
      answeredBefore: (grant, messageId) => Machine.answeredBefore(state, grant, messageId),
      refuse: frameFit === undefined ? undefined : frameFit.produced,
      snapshot: pool?.copy,
      dispatch
    })
    // Closing the scope ends the controller and releases every waiting caller. A call made after
    // that (a fiber that took this controller's grant just before the respawn) must be refused at
    // once: folded, it would start a store no fiber runs any more and wait for it forever.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
        calls.abandon()
      })
    )

    const started = Machine.initial(config, now())
    state = started.state
    perform(started.actions)

    yield* WireInput.attach(system.transport, address, WireInput.fromConsumer, dispatch, counters, now)
    // The retry timer sleeps until the handshake's deadline, so a re-offer happens exactly one
    // interval after the offer; with nothing outstanding it waits for the next offer instead.
    yield* timer.run({ tick: () => void dispatch({ _tag: "Tick", now: now() }), deadline: () => Machine.nextDeadline(state), now, recheckMs: config.retryIntervalMs })

    return {
      address,
      running: () => !finished(),
      produce: calls.produce,
      produceAll: calls.produceAll,
      storedAck: calls.storedAck,
      ackAll: calls.ackAll,
      sendNow: calls.sendNow,
      handshake: () => state.handshake,
      freeDemand: () => Machine.freeMessages(state),
      stats: () => ({ ...counters })
    }
  })
