/**
 * The operations page's JSON API over `@effect/platform`'s HTTP router:
 *
 * - `GET /api/snapshot`: `ReliableSystem.snapshot` (every endpoint's kind, peer, liveness, stats,
 *   a work-pulling producer's pool) and whether operator actions are enabled;
 * - `GET /api/queues/:endpoint`: the endpoint's durable queue: counts by state, the oldest
 *   waiting message's age, a page of entries and of dead letters, payloads shown as their JSON;
 * - `POST /api/queues/:endpoint/dead-letters/:messageId/requeue` (and `/discard`): the operator
 *   actions, refused with 403 unless enabled;
 * - `GET /metrics`: the Effect metrics in Prometheus text (`OpsMetrics.ts`);
 * - `GET /`: the page itself (`OpsPage.ts`).
 *
 * It reads through `DurableQueue`'s operator functions, which take no epoch: looking never
 * disturbs the live writer.
 */
import { HttpRouter, HttpServerResponse } from "@effect/platform"
import type { HttpApp } from "@effect/platform"
import { Clock, Effect } from "effect"
import type { Scope } from "effect"
import type { DeadLetter, QueueOperatorService } from "../DurableQueue/DurableProducerQueue.js"
import * as Operators from "../DurableQueue/Operators.js"
import type { LocalEndpoint } from "../internal/EndpointRegistry.js"
import { ReliableSystem } from "../internal/ReliableSystemTag.js"
import type { ReliableSystemService } from "../internal/ReliableSystemTag.js"
import { snapshot } from "../ReliableSystem.js"
import { prometheusText } from "./OpsMetrics.js"
import { page } from "./OpsPage.js"

export interface OpsApiSettings {
  /** Serve the requeue and discard actions (otherwise they answer 403). */
  readonly actions: boolean
  /** Entries and dead letters listed per queue. */
  readonly pageSize: number
}

const textDecoder = new TextDecoder("utf-8", { fatal: true })

/** A payload as the page shows it: its JSON (the encoded side), or its size when it is binary. */
const showPayload = (payload: Uint8Array): unknown => {
  if (payload.length === 0) return null
  try {
    return JSON.parse(textDecoder.decode(payload))
  } catch {
    return { bytes: payload.length }
  }
}

const showDeadLetter = (dead: DeadLetter) => ({
  messageId: dead.messageId,
  seq: dead.seq,
  attempts: dead.attempts,
  lastError: dead.lastError,
  deadAt: dead.deadAt,
  at: dead.at ?? null,
  payload: showPayload(dead.payload)
})

const queueView = (name: string, queue: QueueOperatorService, pageSize: number) =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const inspection = yield* Operators.inspect(queue, { limit: pageSize, states: ["Backlog", "Stored", "Accepted"] })
    const deadLetters = yield* Operators.deadLetters(queue, { limit: pageSize })
    return {
      endpoint: name,
      at: now,
      counts: {
        backlog: inspection.backlog,
        stored: inspection.stored,
        unconfirmed: inspection.unconfirmed,
        deadLettered: inspection.deadLettered
      },
      oldestAgeMillis: inspection.oldestAt === undefined ? null : Math.max(0, now - inspection.oldestAt),
      entries: inspection.entries.map((entry) => ({
        messageId: entry.messageId,
        seq: entry.seq ?? null,
        state: entry.state,
        attempts: entry.attempts,
        at: entry.at ?? null,
        payload: showPayload(entry.payload)
      })),
      deadLetters: deadLetters.map(showDeadLetter)
    }
  })

const problem = (status: number, error: string) => HttpServerResponse.unsafeJson({ error }, { status })

/** The endpoint named in the route, when it has a durable queue. */
const queueOf = (system: ReliableSystemService, name: string | undefined): { readonly entry: LocalEndpoint; readonly queue: QueueOperatorService } | undefined => {
  const entry = name === undefined ? undefined : system.internal.registry.get(name)
  const queue = entry?.view?.queue
  return entry === undefined || queue === undefined ? undefined : { entry, queue }
}

/** Runs an effect against the queue, answering its failure as a 500 with the error's message. */
const answer = <A>(effect: Effect.Effect<A, { readonly message: string }>) =>
  Effect.match(effect, {
    onFailure: (error) => problem(500, error.message),
    onSuccess: (body) => HttpServerResponse.unsafeJson(body)
  })

const deadLetterAction = (system: ReliableSystemService, settings: OpsApiSettings, action: "requeue" | "discard") =>
  Effect.gen(function*() {
    if (!settings.actions) return problem(403, "operator actions are not enabled on this page (Ops.layer({ actions: true }))")
    const params = yield* HttpRouter.params
    const found = queueOf(system, params.endpoint)
    if (found === undefined || params.messageId === undefined) return problem(404, `no durable queue for endpoint ${params.endpoint}`)
    const run = action === "requeue" ? Operators.requeueDeadLetter : Operators.discardDeadLetter
    return yield* answer(Effect.map(run(found.queue, params.messageId), (done) => ({ action, messageId: params.messageId, done })))
  })

/** The routes as an app (its only requirement the request's scope). */
export const makeApp = (system: ReliableSystemService, settings: OpsApiSettings): Effect.Effect<HttpApp.Default<never, Scope.Scope>> =>
  HttpRouter.empty.pipe(
    HttpRouter.get("/", Effect.succeed(HttpServerResponse.html(page))),
    HttpRouter.get(
      "/api/snapshot",
      Effect.map(Effect.provideService(snapshot, ReliableSystem, system), (state) => HttpServerResponse.unsafeJson({ ...state, actions: settings.actions }))
    ),
    HttpRouter.get(
      "/api/queues/:endpoint",
      Effect.flatMap(HttpRouter.params, (params) => {
        const found = queueOf(system, params.endpoint)
        return found === undefined
          ? Effect.succeed(problem(404, `no durable queue for endpoint ${params.endpoint}`))
          : answer(queueView(found.entry.record.name, found.queue, settings.pageSize))
      })
    ),
    HttpRouter.post("/api/queues/:endpoint/dead-letters/:messageId/requeue", deadLetterAction(system, settings, "requeue")),
    HttpRouter.post("/api/queues/:endpoint/dead-letters/:messageId/discard", deadLetterAction(system, settings, "discard")),
    HttpRouter.get("/metrics", Effect.map(prometheusText, (text) => HttpServerResponse.text(text, { contentType: "text/plain; version=0.0.4" }))),
    HttpRouter.toHttpApp,
    Effect.map((app) => Effect.catchAll(app, (error) => Effect.succeed(problem(error._tag === "RouteNotFound" ? 404 : 400, String(error)))))
  )

