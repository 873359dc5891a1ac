/**
 * The `ReliableSystem` service: its tag and its shape. Defined apart from the constructors in
 * `ReliableSystem.ts` so that modules the constructors import (the cluster member, through the
 * relocatable factories that run with a `ReliableSystem`) can name the service without
 * importing them back.
 */
import { Context } from "effect"
import type { Effect, Queue, Scope, Stream } from "effect"
import type { EndpointNotFound } from "../Protocol/Errors.js"
import type { ReliableDeliveryFailed } from "../Protocol/Failure.js"
import type { ReliableHealthEvent } from "../Protocol/Health.js"
import type { DeliveryDeadLettered } from "../Protocol/DeadLetter.js"
import type { SystemInternals } from "./SystemInternals.js"

export interface ReliableSystemService {
  /** This node's transport address. */
  readonly node: string
  /** Every `ReliableDeliveryFailed` published after the stream is subscribed. */
  readonly failures: Stream.Stream<ReliableDeliveryFailed>
  /** A subscription for the life of the scope: every failure published from now on. */
  readonly subscribeFailures: Effect.Effect<Queue.Dequeue<ReliableDeliveryFailed>, never, Scope.Scope>
  /**
   * `ReliableDegraded` when an endpoint's durable queue stops answering (its calls are retried
   * and the flow heals by itself), `ReliableRecovered` when it answers again: one of each per
   * outage, published after the stream is subscribed.
   */
  readonly health: Stream.Stream<ReliableHealthEvent>
  /** A subscription for the life of the scope: every health event published from now on. */
  readonly subscribeHealth: Effect.Effect<Queue.Dequeue<ReliableHealthEvent>, never, Scope.Scope>
  /** Every `DeliveryDeadLettered` an endpoint of this system published after the stream is subscribed. */
  readonly deadLetters: Stream.Stream<DeliveryDeadLettered>
  /** A subscription for the life of the scope: every dead letter published from now on. */
  readonly subscribeDeadLetters: Effect.Effect<Queue.Dequeue<DeliveryDeadLettered>, never, Scope.Scope>
  /** Replaces an endpoint's controller with a fresh one (new session; new epoch when durable). */
  readonly respawn: (name: string) => Effect.Effect<void, EndpointNotFound>
  /** The names of the endpoints this system hosts. */
  readonly endpointNames: Effect.Effect<ReadonlyArray<string>>
  readonly internal: SystemInternals
}

export class ReliableSystem extends Context.Tag("effect-reliable/ReliableSystem")<ReliableSystem, ReliableSystemService>() {}
