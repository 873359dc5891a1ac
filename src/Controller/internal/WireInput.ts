/**
 * A controller's wire input. There is no inbox fiber: each envelope folds through the machine
 * where the transport delivers it (a microtask, a batch at a time), all of a batch at one clock
 * reading. Envelopes of a kind this controller never receives are counted as dropped.
 */
import type { Effect, Scope } from "effect"
import type { ControllerAddress } from "../../Protocol/Address.js"
import type { ConsumerToProducer, Envelope, ProducerToConsumer } from "../../Protocol/WireMessage.js"
import type { TransportService } from "../../Transport/Transport.js"

/** A machine's wire event: the same shape for every controller. */
export interface WireEvent<M> {
  readonly _tag: "Wire"
  readonly from: ControllerAddress
  readonly message: M
  readonly now: number
}

export const attach = <M extends Envelope["message"]>(
  transport: TransportService,
  address: ControllerAddress,
  /** The messages this controller receives. */
  accepts: (message: Envelope["message"]) => message is M,
  dispatch: (event: WireEvent<M>) => unknown,
  counters: { dropped: number },
  now: () => number
): Effect.Effect<void, never, Scope.Scope> =>
  transport.attach(address, (batch) => {
    const time = now()
    for (const envelope of batch) {
      if (accepts(envelope.message)) dispatch({ _tag: "Wire", from: envelope.from, message: envelope.message, now: time })
      else counters.dropped++
    }
  })

/** What a producer-side controller (point-to-point or work-pulling) receives. */
export const fromConsumer = (message: Envelope["message"]): message is ConsumerToProducer =>
  message._tag === "RegisterConsumer" || message._tag === "Request" || message._tag === "Ack" || message._tag === "Settle"

/** What a consumer controller receives. */
export const fromProducer = (message: Envelope["message"]): message is ProducerToConsumer =>
  message._tag === "SequencedMessage" || message._tag === "RegistrationAck" || message._tag === "Settled"
