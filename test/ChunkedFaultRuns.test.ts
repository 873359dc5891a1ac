/**
 * The randomized fault runs of test/FaultRuns.test.ts and test/DurableFaultRuns.test.ts repeated
 * with chunking at the minimum chunk size: every message is 2..5 chunks, so losses, duplicates
 * and reordering hit individual chunks, and restarts land mid-message. Every message must arrive
 * whole, in order (exactly once on the fault-free path), also as binary payloads to a consumer
 * that lends them. A failing run prints its seed;
 * `RELIABLE_FAULT_SEED=<seed> npx vitest run test/ChunkedFaultRuns.test.ts -t replay` replays it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import type { Scope } from "effect"
import { MinChunkSize } from "../src/Protocol/Config.js"
import { durablePlanFor, planFor, runPlan, socketPlanFor, socketWorld, violation, withChunks } from "./support/FaultRun.js"
import type { FaultPlan, FaultWorld } from "./support/FaultRun.js"
import { onMicrotasks } from "./support/Harness.js"

const check = (plan: FaultPlan, world?: (plan: FaultPlan) => Effect.Effect<FaultWorld, Error, Scope.Scope>) =>
  Effect.gen(function*() {
    const exit = yield* Effect.exit(world === undefined ? onMicrotasks(runPlan(plan)) : runPlan(plan, world))
    const problem = Exit.isSuccess(exit) ? violation(plan, exit.value) : `run failed: ${String(Exit.isFailure(exit) ? exit.cause : "")}`
    if (problem !== undefined) console.error(`chunked fault run failed: seed=${plan.seed} plan=${JSON.stringify(plan)}: ${problem}`)
    expect(problem, `seed ${plan.seed}`).toBeUndefined()
  })

describe.concurrent("randomized fault runs with chunking at the minimum chunk size (memory transport with faults)", () => {
  const base = Number(process.env.RELIABLE_FAULT_BASE ?? 3000)
  const seeds = Array.from({ length: 24 }, (_, index) => base + index)

  it.effect.each(seeds.filter((_, index) => index % 2 === 0))("seed %i: loss, duplicates, reordering", (seed) =>
    check(withChunks(planFor(seed, false), MinChunkSize)))
  it.effect.each(seeds.filter((_, index) => index % 2 === 1))("seed %i: loss, duplicates, reordering, consumer restarts", (seed) =>
    check(withChunks(planFor(seed, true), MinChunkSize)))

  const durableSeeds = Array.from({ length: 10 }, (_, index) => base + 500 + index)
  it.effect.each(durableSeeds)("seed %i: durable, flaky queue, producer crashes", (seed) =>
    check(withChunks(durablePlanFor(seed, seed % 2 === 1), MinChunkSize)))

  // Binary orders to a consumer that lends them: chunks joined as one view or into its reused buffer.
  const lentSeeds = Array.from({ length: 6 }, (_, index) => base + 700 + index)
  it.effect.each(lentSeeds)("seed %i: lent binary payloads, loss, duplicates, reordering (odd seeds: durable, producer crashes)", (seed) =>
    check({ ...withChunks(seed % 2 === 1 ? durablePlanFor(seed, true) : planFor(seed, true), MinChunkSize), lent: true }))

  it.effect("replay one seed (RELIABLE_FAULT_SEED)", () => {
    const seed = Number(process.env.RELIABLE_FAULT_SEED ?? 4242)
    const restarts = process.env.RELIABLE_FAULT_RESTARTS === "true"
    return check(withChunks(process.env.RELIABLE_FAULT_DURABLE === "true" ? durablePlanFor(seed, restarts) : planFor(seed, restarts), MinChunkSize))
  })
})

describe.concurrent("randomized fault runs with chunking at the minimum chunk size (two nodes on TCP sockets with faults, live clock)", () => {
  const base = Number(process.env.RELIABLE_SOCKET_FAULT_BASE ?? 3800)
  const seeds = Array.from({ length: 4 }, (_, index) => base + index)

  it.live.each(seeds)("seed %i: loss, duplicates, reordering over TCP (odd seeds restart the consumer)", (seed) =>
    check(withChunks(socketPlanFor(seed, seed % 2 === 1), MinChunkSize), socketWorld))
  it.live.each(seeds.slice(0, 2))("seed %i: lent binary payloads over TCP (odd seeds restart the consumer)", (seed) =>
    check({ ...withChunks(socketPlanFor(seed, seed % 2 === 1), MinChunkSize), lent: true }, socketWorld))
})
