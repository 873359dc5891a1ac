/**
 * Randomized work-pulling runs, each decided by one seed: a lossy, duplicating, reordering
 * transport, workers joining and leaving at random, and producer restarts over a durable work
 * queue (sometimes a flaky one). Every job must be done at least once, no worker may hold more
 * than its window, and runs without faults must do every job exactly once. A failing run prints
 * its seed; `RELIABLE_WP_SEED=<seed> npx vitest run test/WorkPullingFaultRuns.test.ts -t replay`
 * replays it (`RELIABLE_WP_FAULTS=false` for a clean run).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { onMicrotasks } from "./support/Harness.js"
import { planFor, runPlan, violation } from "./support/WorkPullingRun.js"
import type { WorkPlan } from "./support/WorkPullingRun.js"

const check = (plan: WorkPlan) =>
  Effect.gen(function*() {
    const exit = yield* Effect.exit(onMicrotasks(runPlan(plan)))
    const problem = Exit.isSuccess(exit) ? violation(plan, exit.value) : `run failed: ${String(Exit.isFailure(exit) ? exit.cause : "")}`
    if (problem !== undefined) {
      console.error(`work-pulling run failed: seed=${plan.seed} plan=${JSON.stringify(plan)}: ${problem}`)
    }
    expect(problem, `seed ${plan.seed}`).toBeUndefined()
  })

describe.concurrent("randomized work-pulling runs (memory transport with faults)", () => {
  const base = Number(process.env.RELIABLE_WP_BASE ?? 7000)
  const seeds = Array.from({ length: 40 }, (_, index) => base + index)

  it.effect.each(seeds.filter((_, index) => index % 4 === 0))("seed %i: clean run, workers joining, exactly once", (seed) =>
    check(planFor(seed, false)))
  it.effect.each(seeds.filter((_, index) => index % 4 !== 0))(
    "seed %i: loss, duplicates, reordering, workers leaving, producer restarts",
    (seed) => check(planFor(seed, true))
  )

  it.effect("replay one seed (RELIABLE_WP_SEED)", () =>
    check(planFor(Number(process.env.RELIABLE_WP_SEED ?? 4242), process.env.RELIABLE_WP_FAULTS !== "false")))
})
