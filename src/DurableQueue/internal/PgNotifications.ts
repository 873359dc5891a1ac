/**
 * PostgreSQL notifications of one channel, shared by every subscriber on one client. The client's
 * `listen` stream issues `UNLISTEN` when it ends, which silences every other stream on the same
 * channel of that client (its listener connection is shared): the queues of one table prefix all
 * use one channel, and a controller restarting on a queue ends one stream while the next begins.
 * So each channel is listened to once per client, by a fiber that lives while the channel has
 * subscribers, and its notifications are handed to each subscriber.
 *
 * The client's listener connection can die (the server restarted, the network cut it) without
 * its stream ending or failing: it just goes silent, for good. So the fiber also listens to a
 * heartbeat channel of its own on the same connection and notifies it now and then; a heartbeat
 * sent but not heard means the connection is gone, and the fiber listens again (a fresh
 * connection once nobody holds the dead one).
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Data, Duration, Effect, Exit, Option, PubSub, Schedule, Scope, Stream } from "effect"
import { randomUUID } from "node:crypto"
import { waitAtMost } from "../../internal/DrainBound.js"
import { Signal } from "../../internal/Signal.js"

export type Listen = (channel: string) => Stream.Stream<string, SqlError>

/** What the notifications need of a PostgreSQL client. */
export interface PgListener {
  readonly listen: Listen
  /** Sends `payload` on `channel` (through an ordinary connection, not the listener's). */
  readonly notify: (channel: string, payload: string) => Effect.Effect<void, unknown>
}

interface Listening {
  subscribers: number
  readonly notifications: PubSub.PubSub<Notification>
  /** Closed when the last subscriber leaves, which ends the listening fiber (and its LISTEN). */
  readonly scope: Scope.CloseableScope
}

/** Notifications a subscriber has not taken yet; older ones are dropped (they are hints). */
const bufferSize = 256

/** A listener that failed is set up again: notifications meanwhile are lost, readers poll too. */
const relisten = Schedule.exponential(Duration.millis(100)).pipe(Schedule.either(Schedule.spaced(Duration.seconds(5))))

/** How often the listener checks its connection with a heartbeat, and how long one may take to arrive. */
export const HeartbeatInterval = Duration.seconds(1)

/**
 * What subscribers receive: a payload, or `Missed` once a listen is in place (notifications sent
 * before it, at the start or while the connection was being replaced, were not heard).
 */
export const Missed = Symbol.for("effect-reliable/PgNotifications/Missed")
export type Notification = string | typeof Missed

class ListenerLost extends Data.TaggedError("ListenerLost")<{ readonly channel: string }> {}

/**
 * A new listen's `LISTEN`s are not in place at once: it sends heartbeats this often, this many
 * times (5 s in all), before one that never arrives counts as a dead connection.
 */
const FirstHeartbeatEvery = Duration.millis(250)
const FirstHeartbeatTries = 20

/**
 * Listens to `channel` until the connection is found dead; fails then (or when `listen` fails).
 * A heartbeat that could not be sent (the server is down) proves nothing and is tried again.
 * The first heartbeat heard (the connection's LISTENs are in place) publishes `Missed`: whatever
 * was notified while nobody listened yet is looked for once.
 */
const listenOnce = (listener: PgListener, channel: string, publish: (notification: Notification) => Effect.Effect<unknown>) =>
  Effect.gen(function*() {
    const heartbeat = `reliable_heartbeat_${randomUUID().replaceAll("-", "").slice(0, 16)}`
    const heard = new Signal()
    const listening = Stream.merge(
      Stream.mapEffect(listener.listen(channel), publish),
      Stream.map(listener.listen(heartbeat), () => heard.fire())
    ).pipe(Stream.runDrain)
    const lost = new ListenerLost({ channel })
    /**
     * Notifies the heartbeat channel; true when it arrived within `within`, false when it did not,
     * undefined when it could not be sent (after waiting as long, so tries stay apart).
     */
    const beat = (within: Duration.Duration) =>
      Effect.gen(function*() {
        const arrival = heard.next()
        const sent = yield* listener.notify(heartbeat, "beat").pipe(Effect.timeout(HeartbeatInterval), Effect.either)
        if (sent._tag === "Left") return yield* Effect.as(Effect.sleep(within), undefined)
        return Option.isSome(yield* Effect.option(Effect.timeout(arrival, within)))
      })
    const first = beat(FirstHeartbeatEvery).pipe(
      Effect.repeat({ until: (arrived) => arrived === true, times: FirstHeartbeatTries - 1 }),
      Effect.filterOrFail((arrived) => arrived === true, () => lost),
      Effect.zipRight(publish(Missed))
    )
    const steady = Effect.zipRight(Effect.sleep(HeartbeatInterval), beat(HeartbeatInterval)).pipe(
      Effect.repeat({ while: (arrived) => arrived !== false }),
      Effect.zipRight(Effect.fail(lost))
    )
    // A dead connection may also fail the `UNLISTEN` of the stream's end as a defect: any end is
    // a reason to listen again.
    return yield* Effect.raceFirst(Effect.zipRight(listening, Effect.fail(lost)), Effect.zipRight(first, steady)).pipe(
      Effect.sandbox,
      Effect.mapError(() => lost)
    )
  })

/** The channels each client listens to. Keyed by the client's `listen`, so it goes with the client. */
const clients = new WeakMap<Listen, Map<string, Listening>>()

/** Subscribing and leaving run one at a time, so a LISTEN and an UNLISTEN never cross. */
const lock = Effect.unsafeMakeSemaphore(1)

const join = (listener: PgListener, channel: string): Effect.Effect<Listening> =>
  lock.withPermits(1)(Effect.gen(function*() {
    const channels = clients.get(listener.listen) ?? new Map<string, Listening>()
    clients.set(listener.listen, channels)
    const found = channels.get(channel)
    if (found !== undefined) {
      found.subscribers += 1
      return found
    }
    const notifications = yield* PubSub.sliding<Notification>(bufferSize)
    const scope = yield* Scope.make()
    // joining runs uninterruptibly (it acquires a subscription), and a fork inherits that
    yield* Effect.forkIn(
      Effect.interruptible(
        Effect.retry(listenOnce(listener, channel, (notification) => PubSub.publish(notifications, notification)), relisten)
      ),
      scope
    )
    const listening: Listening = { subscribers: 1, notifications, scope }
    channels.set(channel, listening)
    return listening
  }))

/**
 * How long the last subscriber's leave waits for the channel's `UNLISTEN`. The client's `listen`
 * sends it when its stream ends and waits for the answer without a timeout: on a connection that
 * stopped answering (a network gone silent) that is until the connection answers again or dies,
 * and the endpoint closing meanwhile must not wait as long.
 */
const UnlistenGrace = Duration.seconds(1)

/**
 * The last subscriber ends the listening fiber. Its `UNLISTEN` goes out at once; the leave waits
 * for the answer up to `UnlistenGrace`, holding the lock so that a `LISTEN` of the same channel
 * goes out after it (the client answers its queries in order). Past the grace the fiber finishes
 * in the background, when the connection answers or dies.
 */
const leave = (listener: PgListener, channel: string, listening: Listening): Effect.Effect<void> =>
  lock.withPermits(1)(Effect.suspend(() => {
    listening.subscribers -= 1
    if (listening.subscribers > 0) return Effect.void
    clients.get(listener.listen)?.delete(channel)
    return waitAtMost(UnlistenGrace, Effect.zipRight(Scope.close(listening.scope, Exit.void), PubSub.shutdown(listening.notifications)))
  }))

/**
 * The payloads notified on `channel`, from the client's one listener of it, and `Missed` when
 * some may have been lost (before the listen was in place); the stream never fails.
 */
export const notifications = (listener: PgListener, channel: string): Stream.Stream<Notification> =>
  Stream.unwrapScoped(
    Effect.map(
      Effect.acquireRelease(join(listener, channel), (listening) => leave(listener, channel, listening)),
      (listening) => Stream.fromPubSub(listening.notifications)
    )
  )
