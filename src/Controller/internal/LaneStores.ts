/**
 * The stores both durable lanes run, and how their answers go back to the machine: a store
 * alone (the machine accepts later), a store and then an accept (each under its own retries, for
 * a queue without `storeAccepted`), and a store and accept in one transaction (`storeAccepted`).
 *
 * A store the queue refuses for its content is answered (`StoreRejected`) instead of retried. A
 * one-transaction store that failed or timed out once and was retried may find its first attempt
 * committed (the answer lost): `retried` tells the machine that an `accepted` answer may be its
 * own doing.
 */
import { Effect } from "effect"
import type { DurableQueueError } from "../../DurableQueue/QueueErrors.js"
import * as LaneRunner from "./LaneRunner.js"

export interface StoreAction<Item> {
  readonly token: string
  readonly items: ReadonlyArray<Item>
}

/** The machine's answer to a store: the same two events in both machines. */
export type StoreEvent<Result> =
  | {
    readonly _tag: "StoreCompleted"
    readonly token: string
    readonly results: ReadonlyArray<Result>
    readonly retried: boolean
    readonly now: number
  }
  | {
    readonly _tag: "StoreRejected"
    readonly token: string
    readonly messageId: string | undefined
    readonly cause: LaneRunner.Refusal["cause"]
    readonly now: number
  }

export interface LaneStoresOptions<Item, Result> {
  /** Stores the items, in order; no retries in here (the lane's guard retries the whole store). */
  readonly storeAll: (items: ReadonlyArray<Item>) => Effect.Effect<ReadonlyArray<Result>, DurableQueueError>
  readonly acceptAll: (messageIds: ReadonlyArray<string>) => Effect.Effect<void, DurableQueueError>
  readonly completed: (event: (now: number) => StoreEvent<Result>) => void
}

export interface LaneStores<Item, Result> {
  readonly store: (action: StoreAction<Item>, guard: LaneRunner.Guard) => Effect.Effect<void>
  readonly storeThenAccept: (action: StoreAction<Item>, guard: LaneRunner.Guard) => Effect.Effect<void>
  /**
   * One transaction: `attempt` is the queue's `storeAccepted`. When it answers `undefined` (the
   * batch cannot go in one transaction after all), the store then the accept run instead.
   */
  readonly storeAccepted: (
    action: StoreAction<Item>,
    attempt: Effect.Effect<ReadonlyArray<Result> | undefined, DurableQueueError>,
    guard: LaneRunner.Guard
  ) => Effect.Effect<void>
}

export const make = <Item extends { readonly messageId: string; readonly trace?: string | undefined }, Result>(
  options: LaneStoresOptions<Item, Result>
): LaneStores<Item, Result> => {
  const answer = (action: StoreAction<Item>, retried: boolean) => (results: ReadonlyArray<Result> | LaneRunner.Refusal) =>
    options.completed((now) =>
      results instanceof LaneRunner.Refusal
        ? {
          _tag: "StoreRejected",
          token: action.token,
          messageId: action.items.length === 1 ? action.items[0].messageId : undefined,
          cause: results.cause,
          now
        }
        : { _tag: "StoreCompleted", token: action.token, results, retried, now }
    )

  const store = (action: StoreAction<Item>, guard: LaneRunner.Guard) =>
    guard("Store", LaneRunner.refusable(options.storeAll(action.items)), answer(action, false), action.items)

  const storeThenAccept = (action: StoreAction<Item>, guard: LaneRunner.Guard): Effect.Effect<void> => {
    let stored: ReadonlyArray<Result> | undefined
    const reply = answer(action, false)
    return Effect.zipRight(
      guard("Store", LaneRunner.refusable(options.storeAll(action.items)), (results) => {
        if (results instanceof LaneRunner.Refusal) reply(results)
        else stored = results
      }, action.items),
      Effect.suspend(() => {
        const results = stored
        if (results === undefined) return Effect.void // failed or refused: already answered
        return guard("Accept", options.acceptAll(action.items.map((item) => item.messageId)), () => reply(results), action.items)
      })
    )
  }

  const storeAccepted = (
    action: StoreAction<Item>,
    attempt: Effect.Effect<ReadonlyArray<Result> | undefined, DurableQueueError>,
    guard: LaneRunner.Guard
  ): Effect.Effect<void> => {
    let retried = false
    let fallBack = false
    // An attempt cut short by the lane's timeout (interrupted, no error of its own) may have
    // committed as surely as one that failed: both make the next attempt a retry.
    const tracked = attempt.pipe(
      Effect.onError(() =>
        Effect.sync(() => {
          retried = true
        })
      ),
      LaneRunner.refusable
    )
    return Effect.zipRight(
      guard("Store", tracked, (results) => {
        if (results === undefined) fallBack = true
        else answer(action, retried)(results)
      }, action.items),
      Effect.suspend(() => fallBack ? storeThenAccept(action, guard) : Effect.void)
    )
  }

  return { store, storeThenAccept, storeAccepted }
}
