/**
 * How a controller ended: terminal (publish one failure event and wait for `respawn`) or a
 * request to be replaced at once (retriable durable trouble; the new controller reloads).
 */
import type { ReliableDeliveryStage } from "../Protocol/Failure.js"

export type StopOutcome =
  | { readonly _tag: "Terminal"; readonly stage: ReliableDeliveryStage; readonly cause: unknown }
  | { readonly _tag: "Restart"; readonly cause: unknown }
