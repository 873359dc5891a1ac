/**
 * PostgreSQL notifications of one channel, shared by every subscriber on one client. The client's
 * `listen` stream issues `UNLISTEN` when it ends, which silences every other stream on the same
 * channel of that client (its listener connection is shared): the queues of one table prefix all
 * use one channel, and a controller restarting on a queue ends one stream while the next begins.
 * So each channel is listened to once per client, by a fiber that lives while the channel has
 * subscribers, and its notifications are handed to each subscriber.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect, Exit, PubSub, Schedule, Scope, Stream } from "effect"

export type Listen = (channel: string) => Stream.Stream<string, SqlError>

interface Listening {
  subscribers: number
  readonly notifications: PubSub.PubSub<string>
  /** Closed when the last subscriber leaves, which ends the listening fiber (and its LISTEN). */
  readonly scope: Scope.CloseableScope
}

/** Notifications a subscriber has not taken yet; older ones are dropped (they are hints). */
const bufferSize = 256

/** A listener that failed is set up again: notifications meanwhile are lost, readers poll too. */
const relisten = Schedule.exponential(Duration.millis(100)).pipe(Schedule.either(Schedule.spaced(Duration.seconds(5))))

/** The channels each client listens to. Keyed by the client's `listen`, so it goes with the client. */
const clients = new WeakMap<Listen, Map<string, Listening>>()

/** Subscribing and leaving run one at a time, so a LISTEN and an UNLISTEN never cross. */
const lock = Effect.unsafeMakeSemaphore(1)

const join = (listen: Listen, channel: string): Effect.Effect<Listening> =>
  lock.withPermits(1)(Effect.gen(function*() {
    const channels = clients.get(listen) ?? new Map<string, Listening>()
    clients.set(listen, channels)
    const found = channels.get(channel)
    if (found !== undefined) {
      found.subscribers += 1
      return found
    }
    const notifications = yield* PubSub.sliding<string>(bufferSize)
    const scope = yield* Scope.make()
    // joining runs uninterruptibly (it acquires a subscription), and a fork inherits that
    yield* Effect.forkIn(
      Effect.interruptible(
        listen(channel).pipe(Stream.retry(relisten), Stream.runForEach((payload) => PubSub.publish(notifications, payload)))
      ),
      scope
    )
    const listening: Listening = { subscribers: 1, notifications, scope }
    channels.set(channel, listening)
    return listening
  }))

const leave = (listen: Listen, channel: string, listening: Listening): Effect.Effect<void> =>
  lock.withPermits(1)(Effect.suspend(() => {
    listening.subscribers -= 1
    if (listening.subscribers > 0) return Effect.void
    clients.get(listen)?.delete(channel)
    return Effect.zipRight(Scope.close(listening.scope, Exit.void), PubSub.shutdown(listening.notifications))
  }))

/** The payloads notified on `channel`, from the client's one listener of it; the stream never fails. */
export const notifications = (listen: Listen, channel: string): Stream.Stream<string> =>
  Stream.unwrapScoped(
    Effect.map(
      Effect.acquireRelease(join(listen, channel), (listening) => leave(listen, channel, listening)),
      (listening) => Stream.fromPubSub(listening.notifications)
    )
  )
