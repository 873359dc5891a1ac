/**
 * The parts of `@effect/platform-node` the socket transport uses. That package is an optional
 * peer dependency: it is imported when the first socket transport is made, not when this package
 * is loaded, so an app on the in-process transport neither loads nor installs it. Without it,
 * making a socket transport fails with a `SocketServerError` that says what to install.
 */
import type * as NodeSocket from "@effect/platform-node/NodeSocket"
import type * as NodeSocketServer from "@effect/platform-node/NodeSocketServer"
import type * as Socket from "@effect/platform/Socket"
import { SocketServerError } from "@effect/platform/SocketServer"
import { Effect } from "effect"
import type { Duration, Option, Scope } from "effect"
import type { Duplex } from "node:stream"
import type * as Net from "node:net"

interface NodePlatform {
  readonly NodeSocket: typeof NodeSocket
  readonly NodeSocketServer: typeof NodeSocketServer
}

let loading: Promise<NodePlatform> | undefined

const load: Effect.Effect<NodePlatform, SocketServerError> = Effect.tryPromise({
  try: () =>
    loading ??= Promise.all([
      import("@effect/platform-node/NodeSocket"),
      import("@effect/platform-node/NodeSocketServer")
    ]).then(([NodeSocket, NodeSocketServer]) => ({ NodeSocket, NodeSocketServer })),
  catch: (cause) =>
    new SocketServerError({
      reason: "Open",
      cause: new Error(
        `the socket transport needs the optional peer dependency @effect/platform-node; install it (npm install @effect/platform-node): ${String(cause)}`
      )
    })
})

/** Past `makeServer`, the platform is loaded: a later load cannot fail. */
const loaded = Effect.orDie(load)

/** A TCP server (`NodeSocketServer.make`); the first one loads the platform. */
export const makeServer = (options: Net.ServerOpts & Net.ListenOptions) =>
  Effect.flatMap(load, (platform) => platform.NodeSocketServer.make(options))

/** A `Socket` over a dialled Node duplex stream (`NodeSocket.fromDuplex`). */
export const fromDuplex = <R>(
  open: Effect.Effect<Duplex, Socket.SocketError, R>,
  options?: { readonly openTimeout?: Duration.DurationInput | undefined }
): Effect.Effect<Socket.Socket, never, Exclude<R, Scope.Scope>> =>
  Effect.flatMap(loaded, (platform) => platform.NodeSocket.fromDuplex(open, options))

/** The Node socket under an accepted connection, when the server provides it (`NodeSocket.NetSocket`). */
export const netSocket: Effect.Effect<Option.Option<Net.Socket>> = Effect.flatMap(
  loaded,
  (platform) => Effect.serviceOption(platform.NodeSocket.NetSocket)
)
