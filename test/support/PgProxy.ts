/**
 * A TCP proxy on 127.0.0.1 in front of a real PostgreSQL, for outage tests: `cut` closes every
 * connection and refuses new ones (a server that went away), `blackhole` accepts connections and
 * forwards nothing either way (a server or network that stopped answering, so calls hang), `heal`
 * goes back to forwarding. The proxy lives as long as the scope it was made in.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as Net from "node:net"

export type PgProxyMode = "forward" | "cut" | "blackhole"

export interface PgProxy {
  readonly port: number
  /** The target URL rewritten to go through the proxy. */
  readonly url: string
  readonly mode: () => PgProxyMode
  readonly cut: Effect.Effect<void>
  readonly blackhole: Effect.Effect<void>
  readonly heal: Effect.Effect<void>
  /** Connections accepted so far (a healed pool reconnecting shows here). */
  readonly accepted: () => number
}

interface Pair {
  readonly client: Net.Socket
  readonly server: Net.Socket | undefined
}

/** `targetUrl`: a postgres:// URL on 127.0.0.1 or localhost. */
export const make = (targetUrl: string): Effect.Effect<PgProxy, Error, Scope.Scope> =>
  Effect.gen(function*() {
    const target = new URL(targetUrl)
    const targetPort = Number(target.port || 5432)
    const targetHost = target.hostname
    let mode: PgProxyMode = "forward"
    let accepted = 0
    const pairs = new Set<Pair>()

    const close = (pair: Pair) => {
      pair.client.destroy()
      pair.server?.destroy()
      pairs.delete(pair)
    }

    const forward = (client: Net.Socket) => {
      const server = Net.connect(targetPort, targetHost)
      const pair: Pair = { client, server }
      pairs.add(pair)
      const end = () => close(pair)
      client.on("error", end).on("close", end)
      server.on("error", end).on("close", end)
      // Bytes pass only while forwarding; in a blackhole they are read and dropped, so neither
      // side sees an error or an end: a call on such a connection waits until its own timeout.
      client.on("data", (bytes) => void (mode === "forward" && server.write(bytes)))
      server.on("data", (bytes) => void (mode === "forward" && client.write(bytes)))
    }

    const swallow = (client: Net.Socket) => {
      const pair: Pair = { client, server: undefined }
      pairs.add(pair)
      client.on("error", () => close(pair)).on("close", () => close(pair))
      client.on("data", () => {})
    }

    const listener = Net.createServer((client) => {
      accepted++
      if (mode === "cut") return void client.destroy()
      if (mode === "blackhole") return swallow(client)
      forward(client)
    })

    const port = yield* Effect.acquireRelease(
      Effect.async<number, Error>((resume) => {
        listener.once("error", (error) => resume(Effect.fail(error)))
        listener.listen(0, "127.0.0.1", () => resume(Effect.succeed((listener.address() as Net.AddressInfo).port)))
      }),
      () =>
        Effect.async<void>((resume) => {
          for (const pair of pairs) close(pair)
          listener.close(() => resume(Effect.void))
        })
    )

    const url = new URL(targetUrl)
    url.hostname = "127.0.0.1"
    url.port = String(port)

    return {
      port,
      url: url.toString(),
      mode: () => mode,
      accepted: () => accepted,
      cut: Effect.sync(() => {
        mode = "cut"
        for (const pair of pairs) close(pair)
      }),
      blackhole: Effect.sync(() => {
        mode = "blackhole"
      }),
      heal: Effect.sync(() => {
        // Connections that sat in the blackhole have lost bytes both ways: no protocol can go on
        // on them, so they are closed and the client's pool opens fresh ones.
        if (mode === "blackhole") for (const pair of pairs) close(pair)
        mode = "forward"
      })
    }
  })
