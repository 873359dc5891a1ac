/**
 * The operations page (`effect-reliable/ops`): a small web page and JSON API about the
 * `ReliableSystem` in context, served on a port the application chooses (127.0.0.1 by default):
 * its flows with windows, rates, lag and degraded state, work-pulling pools with each worker's
 * in-flight jobs, durable queues with their waiting entries and dead letters, and the process's
 * Effect metrics in Prometheus text at `/metrics`. Read-only unless `actions: true`, which enables
 * requeueing and discarding dead letters from the page. Built on `@effect/platform`'s HTTP router;
 * served by `node:http` through a small adapter (no `@effect/platform-node` needed), or mounted in
 * an application's own server with `webHandler`.
 */
import { HttpApp as WebApp } from "@effect/platform"
import { Context, Effect, Layer } from "effect"
import type { Scope } from "effect"
import { ReliableSystem } from "./internal/ReliableSystemTag.js"
import * as OptionChecks from "./Protocol/Config.js"
import { ReliableConfigError } from "./Protocol/Errors.js"
import { makeApp } from "./Ops/OpsApi.js"
import { serve } from "./Ops/NodeHttpServer.js"
import type { OpsServerError } from "./Ops/NodeHttpServer.js"

export { OpsServerError } from "./Ops/NodeHttpServer.js"
export { prometheusText } from "./Ops/OpsMetrics.js"

export interface OpsOptions {
  /** The port to serve on; 0 picks a free one (`OpsPage.port` names it). */
  readonly port: number
  /** The interface to listen on; default 127.0.0.1 (the page has no authentication of its own). */
  readonly host?: string
  /** Serve the requeue and discard actions; default false (they answer 403). */
  readonly actions?: boolean
  /** Entries and dead letters listed per durable queue; default 50. */
  readonly pageSize?: number
}

/** The running page: where to look. */
export interface OpsPageService {
  readonly port: number
  /** `http://host:port/`. */
  readonly url: string
}

export class OpsPage extends Context.Tag("effect-reliable/OpsPage")<OpsPage, OpsPageService>() {}

const opsKeys = OptionChecks.optionKeys<OpsOptions>({ port: true, host: true, actions: true, pageSize: true })

const refuse = (option: string, message: string) => Effect.fail(new ReliableConfigError({ option, message }))

const checked = (options: OpsOptions) =>
  Effect.gen(function*() {
    yield* OptionChecks.checkKeys("Ops.layer", options, opsKeys)
    if (!Number.isInteger(options.port) || options.port < 0 || options.port > 65535) {
      return yield* refuse("port", `port must be an integer in [0, 65535], got ${JSON.stringify(options.port)}`)
    }
    const pageSize = options.pageSize ?? 50
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 10_000) {
      return yield* refuse("pageSize", `pageSize must be an integer in [1, 10000], got ${JSON.stringify(options.pageSize)}`)
    }
    const host = options.host ?? "127.0.0.1"
    if (typeof host !== "string" || host.length === 0) return yield* refuse("host", "host must be a non-empty string")
    return { port: options.port, host, pageSize, actions: yield* OptionChecks.checkFlag("actions", options.actions) }
  })

/**
 * The page and its API as a web handler (`Request` to `Response`), to mount in a server of the
 * application's own (in an `@effect/platform` one: `HttpApp.fromWebHandler(handler)`); options
 * other than `actions` and `pageSize` do not apply then. Typed with the web standard's
 * `Request`/`Response` so an app's declarations never need `@effect/platform`'s DOM-typed ones.
 */
export const webHandler = (
  options: Omit<OpsOptions, "port" | "host"> = {}
): Effect.Effect<(request: Request) => Promise<Response>, ReliableConfigError, ReliableSystem> =>
  Effect.gen(function*() {
    const settings = yield* checked({ ...options, port: 0 })
    const handler = WebApp.toWebHandler(yield* makeApp(yield* ReliableSystem, settings))
    return (request: Request) => handler(request)
  })

/** Serves the page for the life of the scope. */
export const make = (options: OpsOptions): Effect.Effect<OpsPageService, ReliableConfigError | OpsServerError, ReliableSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const settings = yield* checked(options)
    const handler = yield* webHandler({ actions: settings.actions, pageSize: settings.pageSize })
    const { port } = yield* serve(handler, settings.host, settings.port)
    const host = settings.host.includes(":") ? `[${settings.host}]` : settings.host
    return { port, url: `http://${host}:${port}/` }
  })

/** The page as a layer over the `ReliableSystem` in context. */
export const layer = (options: OpsOptions): Layer.Layer<OpsPage, ReliableConfigError | OpsServerError, ReliableSystem> =>
  Layer.scoped(OpsPage, make(options))
