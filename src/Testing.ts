/**
 * The test kit (`effect-reliable/testing`): what this library's own tests use to drive flows
 * deterministically, for tests of applications built on it. `advanceUntil` / `advanceBy` move
 * the `TestClock` (a failed wait names its label and dumps the system's stats), `faultRun` drives
 * a seeded run of loss, duplicates, reordering and restarts through the caller's own producer and
 * consumer and checks the delivery guarantees, and `recorder` collects the failures, health
 * events, dead letters and confirmations a system publishes.
 */
export { advanceBy, advanceUntil, AdvanceTimeout, microtaskScheduler, onMicrotasks, settle } from "./Testing/Advance.js"
export type { AdvanceUntilOptions } from "./Testing/Advance.js"
export {
  checkDeliveries,
  faultOptions,
  faultPlan,
  faultRun,
  FaultRunFailed,
  memoryWorld,
  runFaults
} from "./Testing/FaultRun.js"
export type {
  FaultGuarantee,
  FaultPlan,
  FaultRunFlow,
  FaultRunOptions,
  FaultRunReceived,
  FaultRunResult,
  FaultWorld
} from "./Testing/FaultRun.js"
export { recorder } from "./Testing/FlowRecorder.js"
export type { FlowRecorder, FlowRecorderOptions } from "./Testing/FlowRecorder.js"
