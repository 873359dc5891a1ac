/**
 * What a work-pulling producer reports about its pool (`WorkPulling.stats`). A module of its own,
 * with no imports, so the endpoint registry can name it without reaching into the controller.
 */

/** One bound worker as the controller sees it. */
export interface WorkerStats {
  /** The worker endpoint's name. */
  readonly worker: string
  /** Jobs sent to the worker and not confirmed yet. */
  readonly inFlight: number
  /** Jobs the worker asked for beyond those it holds. */
  readonly freeDemand: number
  /** Jobs sent to this binding since it was made. */
  readonly dispatched: number
}

export interface WorkPullingStats {
  /** Workers bound now. */
  readonly workers: number
  /** Accepted jobs no worker holds. */
  readonly pending: number
  /**
   * The pending lag: how long ago the oldest job no worker holds was sent or enqueued
   * (milliseconds; 0 when none waits).
   */
  readonly oldestPendingAgeMillis: number
  /** How long ago the oldest job a worker holds unconfirmed was sent or enqueued (milliseconds; 0 for none). */
  readonly oldestUnconfirmedAgeMillis: number
  /** Each bound worker, in round-robin order. */
  readonly perWorker: ReadonlyArray<WorkerStats>
  /** Jobs sent to workers (a requeued job counts again). */
  readonly dispatched: number
  /** Jobs confirmed by workers (a job confirmed again after a reload counts again). */
  readonly confirmed: number
  /** Jobs put back into the pool because their binding ended. */
  readonly requeued: number
  /** Registrations the resolver did not vouch for, dropped without an answer. */
  readonly fenced: number
  /** Bindings ended because their worker's endpoint was gone. */
  readonly workersGone: number
  /** Bindings ended because a new incarnation of the worker registered. */
  readonly workersReplaced: number
  /** Bindings ended because their worker broke the protocol. */
  readonly violations: number
  /** Other inputs ignored as stale or unbound. */
  readonly dropped: number
  /** True while the durable work queue does not answer and its calls are being retried. */
  readonly degraded: boolean
}
