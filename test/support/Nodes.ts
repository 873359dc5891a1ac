/**
 * Test support for flows between nodes: a reliable system on its own TCP transport, built into a
 * scope the test controls (closing it is a node going down), and live-clock waiting.
 */
import { Context, Duration, Effect, Exit, Layer, Schedule, Scope } from "effect"
import type { ReliableConfigError } from "../../src/Protocol/Errors.js"
import * as ReliableSystem from "../../src/ReliableSystem.js"
import * as SocketTransport from "../../src/Transport/SocketTransport.js"
import { Transport } from "../../src/Transport/Transport.js"

export const host = "127.0.0.1"

export interface Node {
  readonly port: number
  readonly node: string
  readonly context: Context.Context<ReliableSystem.ReliableSystem | Transport>
  readonly system: ReliableSystem.ReliableSystemService
  readonly transport: SocketTransport.SocketTransportService
  /** Closes the node: its endpoints, its system and its transport. */
  readonly stop: Effect.Effect<void>
  /** Runs an effect against this node's system, in the node's scope. */
  readonly run: <A, E>(effect: Effect.Effect<A, E, ReliableSystem.ReliableSystem | Transport | Scope.Scope>) => Effect.Effect<A, E>
}

/** A node on `port` (0: ephemeral), with fast reconnects; `wrap` may add layers over the socket. */
export const startNode = (
  options: {
    readonly port?: number
    readonly maxFrameSize?: number
    readonly lookupTimeout?: Duration.DurationInput
    /** More transport options (limits, TLS...). */
    readonly transport?: Partial<SocketTransport.SocketTransportOptions>
    readonly wrap?: (socket: Layer.Layer<Transport>) => Layer.Layer<Transport, ReliableConfigError>
  } = {}
): Effect.Effect<Node, SocketTransport.SocketTransportError | ReliableConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const scope = yield* Effect.acquireRelease(Scope.make(), (scope) => Scope.close(scope, Exit.void))
    const socket = yield* Effect.provideService(
      SocketTransport.makeSocket({
        host,
        port: options.port ?? 0,
        reconnect: Schedule.spaced(Duration.millis(20)),
        ...(options.maxFrameSize === undefined ? {} : { maxFrameSize: options.maxFrameSize }),
        ...options.transport
      }),
      Scope.Scope,
      scope
    )
    const base: Layer.Layer<Transport> = Layer.succeed(Transport, socket)
    const transportLayer: Layer.Layer<Transport, ReliableConfigError> = options.wrap === undefined ? base : options.wrap(base)
    const context = yield* Layer.buildWithScope(
      ReliableSystem.layer(options.lookupTimeout === undefined ? {} : { lookupTimeout: options.lookupTimeout }).pipe(
        Layer.provideMerge(transportLayer)
      ),
      scope
    )
    return {
      port: socket.port,
      node: socket.node,
      context,
      system: Context.get(context, ReliableSystem.ReliableSystem),
      transport: socket,
      stop: Scope.close(scope, Exit.void),
      run: (effect) => effect.pipe(Effect.provide(context), Effect.provideService(Scope.Scope, scope))
    }
  })

/** Polls `condition` every few milliseconds until it holds; fails after `timeout`. */
export const waitUntil = (what: string, condition: () => boolean, timeout: Duration.DurationInput = Duration.seconds(20)) =>
  Effect.sync(condition).pipe(
    Effect.repeat({ until: (holds) => holds, schedule: Schedule.spaced(Duration.millis(5)) }),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`timed out waiting for ${what}`) }),
    Effect.asVoid
  )
