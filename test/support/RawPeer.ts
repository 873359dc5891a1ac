/**
 * Test support for the socket transport: raw TCP clients that speak as much of the protocol as a
 * test needs (none, the handshake, hand-made frames), destroyed with the test's scope.
 */
import { Duration, Effect, Schedule } from "effect"
import * as Net from "node:net"
import { encodeMessage, Preamble } from "../../src/Transport/internal/HandshakeProtocol.js"

export const host = "127.0.0.1"

export interface RawClient {
  readonly socket: Net.Socket
  /** Whether the server hung up. */
  readonly closed: () => boolean
  /** Every byte the server sent so far. */
  readonly received: () => Buffer
}

/** A raw TCP client on `port` (from `localAddress`, another loopback address, when given), destroyed with the scope. */
export const rawClient = (port: number, localAddress?: string) =>
  Effect.acquireRelease(
    Effect.async<RawClient, Error>((resume) => {
      let closed = false
      let received = Buffer.alloc(0)
      const socket = Net.createConnection({ host, port, ...(localAddress === undefined ? {} : { localAddress }) })
      socket.on("error", () => {})
      socket.on("close", () => void (closed = true))
      socket.on("data", (chunk: Buffer) => void (received = Buffer.concat([received, chunk])))
      socket.once("connect", () => resume(Effect.succeed({ socket, closed: () => closed, received: () => received })))
    }),
    ({ socket }) => Effect.sync(() => socket.destroy())
  )

/** The JSON of the server's first handshake message, once it has arrived whole. */
const firstMessage = (bytes: Buffer): { readonly _tag: string } | undefined => {
  if (bytes.length < Preamble.length + 4) return undefined
  const length = bytes.readUInt32BE(Preamble.length)
  const start = Preamble.length + 4
  return bytes.length < start + length ? undefined : JSON.parse(bytes.toString("utf8", start, start + length))
}

/** Polls until the server welcomed the client; fails if it refused or hung up. */
const awaitWelcome = (client: RawClient) =>
  Effect.gen(function*() {
    yield* Effect.sync(() => firstMessage(client.received()) !== undefined || client.closed()).pipe(
      Effect.repeat({ until: (answered) => answered, schedule: Schedule.spaced(Duration.millis(5)) }),
      Effect.timeoutFail({ duration: Duration.seconds(10), onTimeout: () => new Error("no Welcome within 10s") })
    )
    const message = firstMessage(client.received())
    if (message?._tag !== "Welcome") return yield* Effect.fail(new Error(`not welcomed: ${JSON.stringify(message)}`))
  })

/** A raw client past the plain handshake, as node `node` (whose host must be `localAddress`, 127.0.0.1 by default). */
export const rawPeer = (port: number, node = `${host}:9`, localAddress?: string) =>
  Effect.gen(function*() {
    const client = yield* rawClient(port, localAddress)
    client.socket.write(encodeMessage({ _tag: "Hello", node, auth: "none" }, true))
    yield* awaitWelcome(client)
    return client
  })

export const lengthPrefix = (length: number): Buffer => {
  const prefix = Buffer.alloc(4)
  prefix.writeUInt32BE(length)
  return prefix
}
