/**
 * The work-pulling lane's deferred writes under TestClock: a failed attempt whose retry is due
 * (the retry waits for its write) goes before the confirmations waiting beside it; one not due
 * yet is batched behind them.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, FiberSet, TestClock } from "effect"
import * as WorkLane from "../../src/Controller/WorkLane.js"
import type { DurableWorkQueueService } from "../../src/DurableQueue/DurableWorkQueue.js"

/** A queue whose confirmations and failure writes each take 10 ms of test time, logged when they end. */
const slowQueue = (log: Array<string>) => {
  const call = (name: string) => Effect.as(Effect.tap(Effect.sleep(Duration.millis(10)), () => log.push(name)), undefined)
  return {
    confirmMessage: (_epoch: number, messageId: string) => call(`confirm ${messageId}`),
    confirmBatch: (_epoch: number, messageIds: ReadonlyArray<string>) => call(`confirm ${messageIds.join(",")}`),
    recordFailure: (_epoch: number, request: { readonly messageId: string }) => call(`failure ${request.messageId}`),
    recordFailureBatch: (_epoch: number, requests: ReadonlyArray<{ readonly messageId: string }>) =>
      call(`failure ${requests.map((request) => request.messageId).join(",")}`)
  } as unknown as DurableWorkQueueService
}

describe("WorkLane", () => {
  it.scoped.each([
    ["due at once (a 0 ms retry)", 0, ["confirm a", "failure x", "confirm b,c"]],
    ["due in 100 ms: batched behind the confirmations waiting", 100, ["confirm a", "confirm b,c", "failure x"]]
  ] as const)("a failed attempt %s", ([_, retryMs, expected]) =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const recorded: Array<string> = []
      const clock = yield* Effect.clock
      const lane = WorkLane.make({
        queue: slowQueue(log),
        retry: { attempts: 3, interval: Duration.millis(100) },
        runFork: yield* FiberSet.makeRuntime<never>(),
        completed: (event) => {
          const folded = event(0)
          if (folded._tag === "FailuresRecorded") for (const failure of folded.failures) recorded.push(failure.messageId)
        },
        failed: () => {},
        now: () => clock.unsafeCurrentTimeMillis()
      })
      lane.submit({ _tag: "ConfirmJobs", messageIds: ["a"] })
      yield* Effect.yieldNow()
      // While "a" is being confirmed, more confirmations and then a failure come.
      lane.submit({ _tag: "ConfirmJobs", messageIds: ["b", "c"] })
      lane.submit({ _tag: "RecordFailure", messageId: "x", attempts: 1, lastError: "boom", notBefore: retryMs })
      for (let ms = 0; ms < 40; ms += 5) yield* Effect.zipRight(TestClock.adjust(Duration.millis(5)), Effect.yieldNow())
      expect(log).toEqual(expected)
      expect(recorded).toEqual(["x"])
    }))
})
