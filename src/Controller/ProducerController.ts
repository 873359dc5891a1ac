/**
 * The fiber shell around `ProducerMachine`: it owns the controller's inbox, its retry timer and
 * (when durable) its durable lane, folds events through the pure machine and performs the
 * actions. Endpoint calls (`produce`, `storedAck`) fold in the caller's fiber: a fold is
 * synchronous, so the JS thread already serializes them with the inbox fiber's folds.
 */
import { Deferred, Duration, Effect, Either, FiberId, FiberSet, Queue, Schedule } from "effect"
import type { Scope } from "effect"
import type { EndpointRecord } from "../internal/EndpointRegistry.js"
import { sameAddress } from "../Protocol/Address.js"
import type { ControllerAddress } from "../Protocol/Address.js"
import type { DeliveryConfirmed, RequestNext, Stored, StoredAck } from "../Protocol/Contract.js"
import { PayloadEncodeError, ProducerContractError } from "../Protocol/Errors.js"
import type { FrameTooLarge } from "../Protocol/Errors.js"
import { Signal } from "../internal/Signal.js"
import type { StopOutcome } from "../internal/StopOutcome.js"
import type { PayloadCodec } from "../Protocol/PayloadCodec.js"
import type { Envelope } from "../Protocol/WireMessage.js"
import type { SystemInternals } from "../ReliableSystem.js"
import type { DurableProducerQueueService } from "../DurableQueue/DurableProducerQueue.js"
import * as DurableLane from "./DurableLane.js"
import * as FrameFit from "./internal/FrameFit.js"
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
export type ProduceError = ProducerContractError | PayloadEncodeError | FrameTooLarge

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
  readonly handshake: () => Machine.Handshake
  /** Wire seqs the consumer granted beyond what is already emitted. */
  readonly freeDemand: () => number
  readonly stats: () => ProducerStats
}

const isConsumerMessage = (message: Envelope["message"]) =>
  message._tag === "RegisterConsumer" || message._tag === "Request" || message._tag === "Ack"

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
    const inbox = yield* system.transport.open(address)
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
    const replies = new Map<string, Deferred.Deferred<ReadonlyArray<Stored>, ProducerContractError>>()
    const counters = { sent: 0, resent: 0, confirmed: 0, dropped: 0 }
    const now = () => clock.unsafeCurrentTimeMillis()
    let state: Machine.ProducerState
    let stoppedWith: StopOutcome | undefined
    let timerIdle = false
    const timerWake = new Signal()

    const stop = (outcome: StopOutcome) => {
      if (stoppedWith !== undefined) return
      stoppedWith = outcome
      for (const [token, reply] of replies) {
        Deferred.unsafeDone(reply, Effect.fail(new ProducerContractError({
          reason: "StaleGrant",
          message: `the controller of "${settings.endpoint}" stopped before grant ${token} was stored; take a new grant`
        })))
      }
      replies.clear()
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
      }
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
            ;(envelopes ??= []).push({ from: address, to: action.to, message: action.message })
            break
          }
          case "Offer":
            hooks.offerGrant(action.grant)
            if (timerIdle) timerWake.fire()
            break
          case "Answer": {
            const reply = replies.get(action.token)
            if (reply !== undefined) {
              replies.delete(action.token)
              Deferred.unsafeDone(reply, Either.isRight(action.result) ? Effect.succeed(action.result.right) : Effect.fail(action.result.left))
            }
            break
          }
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

    const dispatch = (event: Machine.ProducerEvent): ReadonlyArray<Machine.ProducerAction> => {
      if (stoppedWith !== undefined) return []
      const next = Machine.step(state, event)
      state = next.state
      perform(next.actions)
      return next.actions
    }

    const started = Machine.initial(config, now())
    state = started.state
    perform(started.actions)

    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.takeBetween(inbox, 1, 4096), (batch) =>
      Effect.sync(() => {
        for (const envelope of batch) {
          if (isConsumerMessage(envelope.message)) {
            dispatch({ _tag: "Wire", from: envelope.from, message: envelope.message as never, now: now() })
          } else counters.dropped++
        }
      }))))
    // The retry timer sleeps until the handshake's deadline, so a re-offer happens exactly one
    // interval after the offer; with nothing outstanding it waits for the next offer instead.
    const tickThenDelay: Effect.Effect<number> = Effect.suspend(() => {
      dispatch({ _tag: "Tick", now: now() })
      const deadline = Machine.nextDeadline(state)
      if (deadline !== undefined) return Effect.succeed(Math.max(1, deadline - now()))
      timerIdle = true
      return Effect.map(timerWake.next(), () => {
        timerIdle = false
        const next = Machine.nextDeadline(state)
        return next === undefined ? 0 : Math.max(1, next - now())
      })
    })
    yield* Effect.forkScoped(Effect.repeat(
      tickThenDelay,
      Schedule.identity<number>().pipe(Schedule.addDelay((delayMs) => Duration.millis(delayMs)))
    ))

    const findAnswer = (actions: ReadonlyArray<Machine.ProducerAction>, token: string) => {
      for (const action of actions) {
        if (action._tag === "Answer" && action.token === token) return action.result
      }
      return undefined
    }

    const stoppedError = (grant: RequestNext) =>
      new ProducerContractError({
        reason: "StaleGrant",
        message: `the controller of "${settings.endpoint}" has stopped; grant ${grant.token} is void, take a new one`
      })

    type Answer = Either.Either<ReadonlyArray<Stored>, ProduceError>

    /**
     * Validates and encodes every item and folds one Produce. Volatile controllers answer in the
     * same fold; durable ones answer when the store completes (the returned Deferred).
     */
    const produceNow = (
      grant: RequestNext,
      items: ReadonlyArray<{ readonly messageId: string; readonly payload: A }>,
      acknowledged = false
    ): Answer | Deferred.Deferred<ReadonlyArray<Stored>, ProducerContractError> => {
      if (stoppedWith !== undefined) return Either.left(stoppedError(grant))
      const encoded: Array<Machine.ProduceItem> = []
      for (const item of items) {
        const invalid = Machine.checkProduced(state, grant, item.messageId, item.payload)
        if (invalid !== undefined) return Either.left(invalid)
        if (items.length === 1) {
          const before = Machine.answeredBefore(state, grant, item.messageId)
          if (before !== undefined) return Either.map(before, (stored) => [stored])
        }
        const bytes = codec.encode(item.payload)
        if (Either.isLeft(bytes)) {
          const error = new PayloadEncodeError({ endpointName: settings.endpoint, messageId: item.messageId, cause: bytes.left })
          dispatch({ _tag: "Fail", stage: "Protocol", cause: error })
          return Either.left(error)
        }
        const refused = frameFit?.produced(item.messageId, bytes.right.length)
        if (refused !== undefined) return Either.left(refused)
        encoded.push({ messageId: item.messageId, payload: bytes.right })
      }
      const event: Machine.ProducerEvent = acknowledged
        ? { _tag: "ProduceAcked", grant, items: encoded, now: now() }
        : { _tag: "Produce", grant, items: encoded, now: now() }
      const answered = findAnswer(dispatch(event), grant.token)
      if (answered !== undefined) return answered
      if (stoppedWith !== undefined) return Either.left(stoppedError(grant))
      let reply = replies.get(grant.token)
      if (reply === undefined) {
        reply = Deferred.unsafeMake<ReadonlyArray<Stored>, ProducerContractError>(FiberId.none)
        replies.set(grant.token, reply)
      }
      return reply
    }

    const produceAll = (grant: RequestNext, items: ReadonlyArray<{ readonly messageId: string; readonly payload: A }>) =>
      Effect.suspend((): Effect.Effect<ReadonlyArray<Stored>, ProduceError> => {
        const answered = produceNow(grant, items)
        return Either.isEither(answered) ? answered : Deferred.await(answered)
      })

    const ackAll = (token: string) => void dispatch({ _tag: "AckAll", token, now: now() })

    /** The everyday path: produce and acknowledge in one go; synchronous unless durable. */
    const sendNow = (
      grant: RequestNext,
      items: ReadonlyArray<{ readonly messageId: string; readonly payload: A }>
    ): Answer | Effect.Effect<ReadonlyArray<Stored>, ProduceError> => {
      // A volatile controller stores in the fold, so produce and acknowledge fold as one event.
      const answered = produceNow(grant, items, !config.durable)
      if (!Either.isEither(answered)) return Effect.tap(Deferred.await(answered), () => ackAll(grant.token))
      if (config.durable && Either.isRight(answered)) ackAll(grant.token)
      return answered
    }

    const produce = (grant: RequestNext, messageId: string, payload: A) =>
      Effect.map(produceAll(grant, [{ messageId, payload }]), (stored) => stored[0])

    const storedAck = (ack: StoredAck) =>
      Effect.suspend((): Effect.Effect<void, ProducerContractError> => {
        for (const action of dispatch({ _tag: "StoredAck", ack, now: now() })) {
          if (action._tag === "AckRejected") return Effect.fail(action.error)
        }
        return Effect.void
      })

    return {
      address,
      running: () => stoppedWith === undefined,
      produce,
      produceAll,
      storedAck,
      ackAll,
      sendNow,
      handshake: () => state.handshake,
      freeDemand: () => state.demandUpTo - Machine.lastSeq(state),
      stats: () => ({ ...counters })
    }
  })
