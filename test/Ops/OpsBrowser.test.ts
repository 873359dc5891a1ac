/**
 * The operations page in a real browser: headless Chromium (Debian's `chromium`, driven by
 * `playwright-core`) loads the page during a running durable flow, reads the numbers from the
 * page and checks them against the endpoints' stats, clicks requeue on a dead letter and sees the
 * message delivered; and shows a work-pulling pool's per-worker in-flight jobs as the pool's stats
 * say. Saves a screenshot at test-output/ops-page.png. Without a browser it skips with one line,
 * except under CI=true, where it must run (.ci/run installs `chromium`).
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import { WorkPulling } from "effect-reliable"
import * as Ops from "effect-reliable/ops"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { chromium } from "playwright-core"
import type { Page } from "playwright-core"
import { waitUntil } from "../support/Nodes.js"
import { queueWhen, startFlow, startHeldPool, systemLayer } from "./OpsFlow.js"

const executablePath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"
const browserPresent = Fs.existsSync(executablePath)
const required = process.env.CI === "true"
if (!browserPresent && !required) console.log(`OpsBrowser: skipped, no browser at ${executablePath} (apt-get install -y chromium)`)

const screenshotPath = Path.resolve("test-output", "ops-page.png")

const launch = Effect.acquireRelease(
  Effect.promise(() => chromium.launch({ executablePath })),
  (browser) => Effect.promise(() => browser.close())
)

/** Every tagged number the page shows for `endpoint` (`data-endpoint` / `data-field` cells). */
const pageNumbers = (page: Page, endpoint: string) =>
  Effect.promise(() =>
    page.$$eval(`td[data-endpoint="${endpoint}"][data-field]`, (cells) =>
      Object.fromEntries(cells.map((cell) => [cell.getAttribute("data-field"), Number(cell.textContent)])))
  )

const refreshes = (page: Page) => Effect.promise(() => page.$eval("#updated", (element) => Number(element.getAttribute("data-refreshes"))))

/** Waits until the page has redrawn `count` more times (each redraw reads the API afresh). */
const redrawn = (page: Page, count: number) =>
  Effect.gen(function*() {
    const from = yield* refreshes(page)
    yield* Effect.promise(() =>
      page.waitForFunction(`Number(document.getElementById("updated").dataset.refreshes) >= ${from + count}`, undefined, { timeout: 20_000 })
    )
  })

describe.runIf(browserPresent || required)("operations page in headless Chromium", () => {
  it.scopedLive("shows the flow's stats, and its requeue button sends a dead letter back into the flow", () =>
    Effect.gen(function*() {
      const flow = yield* startFlow(new Set([4]))
      const ops = yield* Ops.make({ port: 0, actions: true })
      yield* queueWhen(ops, "order 4 dead-lettered", (queue) => queue.counts.deadLettered === 1)
      const browser = yield* launch
      const page = yield* Effect.promise(() => browser.newPage({ viewport: { width: 1280, height: 900 } }))
      yield* Effect.promise(() => page.goto(ops.url))
      yield* redrawn(page, 1)

      // During the flow: each counter the page shows lies between the stats read before the
      // redraw it comes from and the stats read after the page was read.
      const before = { producer: yield* flow.producer.stats, consumer: yield* flow.consumer.stats }
      yield* redrawn(page, 2)
      const shown = { producer: yield* pageNumbers(page, "orders-out"), consumer: yield* pageNumbers(page, "orders-in") }
      const after = { producer: yield* flow.producer.stats, consumer: yield* flow.consumer.stats }
      for (const field of ["sent", "confirmed"] as const) {
        expect(shown.producer[field]).toBeGreaterThanOrEqual(before.producer[field])
        expect(shown.producer[field]).toBeLessThanOrEqual(after.producer[field])
      }
      expect(shown.consumer.delivered).toBeGreaterThanOrEqual(before.consumer.delivered)
      expect(shown.consumer.delivered).toBeLessThanOrEqual(after.consumer.delivered)
      expect(shown.consumer.window).toBe(8)
      expect(shown.consumer.deadLettered).toBe(1)
      expect(shown.producer.sent).toBeGreaterThan(0)

      // Once the flow stops, the page shows exactly the stats.
      yield* flow.stop
      yield* waitUntil("every order but the dead letter accepted", () => flow.accepted.length === flow.sent() - 1)
      yield* redrawn(page, 2)
      const producerStats = yield* flow.producer.stats
      const settled = yield* pageNumbers(page, "orders-out")
      expect(settled.sent).toBe(producerStats.sent)
      expect(settled.confirmed).toBe(producerStats.confirmed)
      expect((yield* pageNumbers(page, "orders-in")).delivered).toBe((yield* flow.consumer.stats).delivered)
      const deadCell = yield* Effect.promise(() => page.textContent(`td[data-queue="orders-out"][data-field="deadLettered"]`))
      expect(deadCell).toBe("1")
      Fs.mkdirSync(Path.dirname(screenshotPath), { recursive: true })
      yield* Effect.promise(() => page.screenshot({ path: screenshotPath, fullPage: true }))
      console.log(`OpsBrowser: screenshot of the operations page at ${screenshotPath}`)

      // The operator requeues the dead letter from the page: it is delivered again, accepted.
      expect(flow.accepted).not.toContain(4)
      yield* Effect.promise(() => page.click(`button[data-action="requeue"][data-message-id="order-4"]`))
      yield* waitUntil("order 4 accepted after the requeue", () => flow.accepted.includes(4))
      yield* Effect.promise(() => page.waitForSelector(`tr[data-dead-letter="order-4"]`, { state: "detached", timeout: 20_000 }))
      expect(yield* Effect.promise(() => page.textContent("#last-action"))).toBe("requeue order-4: true")
    }).pipe(Effect.provide(systemLayer)), 120_000)

  it.scopedLive("shows each worker's in-flight jobs as WorkPulling.stats does", () =>
    Effect.gen(function*() {
      const release = yield* startHeldPool
      const ops = yield* Ops.make({ port: 0 })
      const browser = yield* launch
      const page = yield* Effect.promise(() => browser.newPage())
      yield* Effect.promise(() => page.goto(ops.url))
      // Both workers come to hold a full window; the page shows what the pool's stats say.
      const inFlight = (worker: string) => `td[data-pool="jobs"][data-worker="${worker}"][data-field="inFlight"]`
      yield* Effect.promise(() => page.waitForFunction(
        `document.querySelector('${inFlight("worker-a")}')?.textContent === "2" && document.querySelector('${inFlight("worker-b")}')?.textContent === "3"`,
        undefined,
        { timeout: 20_000 }
      ))
      const stats = yield* WorkPulling.stats("jobs")
      for (const worker of stats.perWorker) {
        expect(Number(yield* Effect.promise(() => page.textContent(inFlight(worker.worker))))).toBe(worker.inFlight)
      }
      expect(stats.perWorker.map((worker) => worker.inFlight).sort()).toEqual([2, 3])
      expect(Number(yield* Effect.promise(() => page.textContent(`td[data-pool="jobs"][data-field="workers"]`)))).toBe(2)
      yield* Deferred.succeed(release, undefined)
    }).pipe(Effect.provide(systemLayer)), 120_000)
})
