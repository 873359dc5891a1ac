/**
 * Randomized fault runs: loss in both directions, duplicates, reordering and consumer restarts,
 * all decided by one seed. Every message must arrive, in order and contiguous per consumer
 * incarnation, and exactly once when the consumer never restarts. A failing run prints its seed;
 * `RELIABLE_FAULT_SEED=<seed> npx vitest run test/FaultRuns.test.ts -t replay` replays it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import type { Scope } from "effect"
import { memoryWorld, planFor, runPlan, socketPlanFor, socketWorld, violation } from "./support/FaultRun.js"
import { onMicrotasks } from "./support/Harness.js"
import type { FaultPlan, FaultWorld } from "./support/FaultRun.js"

const checkIn = (plan: FaultPlan, world: (plan: FaultPlan) => Effect.Effect<FaultWorld, Error, Scope.Scope>) =>
  Effect.gen(function*() {
    const started = Date.now()
    const exit = yield* Effect.exit(world === memoryWorld ? onMicrotasks(runPlan(plan, world)) : runPlan(plan, world))
    const problem = Exit.isSuccess(exit) ? violation(plan, exit.value) : `run failed: ${String(Exit.isFailure(exit) ? exit.cause : "")}`
    if (problem !== undefined) {
      console.error(`fault run failed: seed=${plan.seed} plan=${JSON.stringify(plan)}: ${problem}`)
    }
    if (world !== memoryWorld) console.log(`socket fault run seed=${plan.seed}: ${plan.messages} messages, window ${plan.window}, ${Date.now() - started}ms`)
    expect(problem, `seed ${plan.seed}`).toBeUndefined()
  })

const check = (plan: FaultPlan) => checkIn(plan, memoryWorld)

describe.concurrent("randomized fault runs (point-to-point, memory transport with faults)", () => {
  const base = Number(process.env.RELIABLE_FAULT_BASE ?? 1000)
  const seeds = Array.from({ length: 50 }, (_, index) => base + index)

  it.effect.each(seeds.filter((_, index) => index % 2 === 0))("seed %i: loss, duplicates, reordering", (seed) => check(planFor(seed, false)))
  it.effect.each(seeds.filter((_, index) => index % 2 === 1))("seed %i: loss, duplicates, reordering, consumer restarts", (seed) =>
    check(planFor(seed, true)))

  it.effect("replay one seed (RELIABLE_FAULT_SEED)", () => {
    const seed = Number(process.env.RELIABLE_FAULT_SEED ?? 4242)
    return check(planFor(seed, process.env.RELIABLE_FAULT_RESTARTS === "true"))
  })
})

describe.concurrent("randomized fault runs (point-to-point, two nodes on TCP sockets with faults, live clock)", () => {
  const base = Number(process.env.RELIABLE_SOCKET_FAULT_BASE ?? 2000)
  const seeds = Array.from({ length: 8 }, (_, index) => base + index)

  it.live.each(seeds)("seed %i: loss, duplicates, reordering over TCP (odd seeds restart the consumer)", (seed) =>
    checkIn(socketPlanFor(seed, seed % 2 === 1), socketWorld))
})
