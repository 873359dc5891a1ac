/**
 * Serves a web handler (`HttpApp.toWebHandler`) on a `node:http` server: each Node request becomes
 * a web `Request` (its body read whole, capped), the `Response` is written back. This small adapter
 * keeps the operations page off `@effect/platform-node`, whose peers (`@effect/cluster`,
 * `@effect/rpc`...) an app would otherwise have to install.
 */
import { Data, Effect } from "effect"
import type { Scope } from "effect"
import * as Http from "node:http"

/** The operations page's server could not start. */
export class OpsServerError extends Data.TaggedError("OpsServerError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

/** Request bodies above this are refused (the API's requests carry none). */
const MaxBodyBytes = 64 * 1024

const readBody = (request: Http.IncomingMessage): Promise<Buffer | undefined> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    let size = 0
    request.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size > MaxBodyBytes) {
        request.destroy()
        reject(new Error("request body too large"))
      } else chunks.push(chunk)
    })
    request.on("end", () => resolve(chunks.length === 0 ? undefined : Buffer.concat(chunks)))
    request.on("error", reject)
  })

const toWebRequest = async (request: Http.IncomingMessage, origin: string): Promise<Request> => {
  const headers = new Headers()
  for (const [name, value] of Object.entries(request.headers)) {
    if (Array.isArray(value)) for (const item of value) headers.append(name, item)
    else if (value !== undefined) headers.set(name, value)
  }
  const method = request.method ?? "GET"
  const body = method === "GET" || method === "HEAD" ? undefined : await readBody(request)
  return new Request(new URL(request.url ?? "/", origin), { method, headers, ...(body === undefined ? {} : { body }) })
}

const writeResponse = async (response: Response, out: Http.ServerResponse): Promise<void> => {
  const body = Buffer.from(await response.arrayBuffer())
  out.writeHead(response.status, Object.fromEntries(response.headers))
  out.end(body)
}

/** Binds `host:port` (0: a free port) and serves `handler` until the scope closes. */
export const serve = (
  handler: (request: Request) => Promise<Response>,
  host: string,
  port: number
): Effect.Effect<{ readonly port: number }, OpsServerError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<Http.Server, OpsServerError>((resume) => {
      const origin = `http://${host.includes(":") ? `[${host}]` : host}`
      const server = Http.createServer((request, response) => {
        toWebRequest(request, origin).then(handler).then((answer) => writeResponse(answer, response)).catch((error: unknown) => {
          if (!response.headersSent) response.writeHead(500, { "content-type": "text/plain" })
          response.end(String(error))
        })
      })
      server.once("error", (cause) => resume(Effect.fail(new OpsServerError({ message: `cannot listen on ${host}:${port}: ${String(cause)}`, cause }))))
      server.listen(port, host, () => resume(Effect.succeed(server)))
    }),
    (server) =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
        server.closeAllConnections()
      })
  ).pipe(Effect.map((server) => {
    const address = server.address()
    return { port: typeof address === "object" && address !== null ? address.port : port }
  }))
