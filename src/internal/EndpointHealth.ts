/**
 * An endpoint's health across its controllers: a controller restarted to heal backend trouble
 * keeps the endpoint degraded until some durable call succeeds again. Exactly one event is
 * published when the endpoint becomes degraded and one when it recovers, however many calls
 * failed or were retried in between.
 */
import type { ReliableControllerRole, ReliableDeliveryStage } from "../Protocol/Failure.js"
import { ReliableDegraded, ReliableRecovered } from "../Protocol/Health.js"
import type { ReliableHealthEvent } from "../Protocol/Health.js"

/** What a durable lane reports. */
export interface HealthReporter {
  /** A durable call could not complete within its retries; the lane goes on retrying. */
  readonly degraded: (stage: ReliableDeliveryStage, cause: unknown) => void
  /** A durable call completed. */
  readonly healthy: () => void
}

export interface EndpointHealth extends HealthReporter {
  /** Since when the endpoint is degraded (clock millis), or undefined when it is healthy. */
  readonly degradedSince: () => number | undefined
}

export const make = (options: {
  readonly endpointName: string
  readonly role: ReliableControllerRole
  readonly publish: (event: ReliableHealthEvent) => void
  readonly now: () => number
}): EndpointHealth => {
  let since: number | undefined
  return {
    degraded: (stage, cause) => {
      if (since !== undefined) return
      since = options.now()
      options.publish(new ReliableDegraded({ endpointName: options.endpointName, role: options.role, stage, cause }))
    },
    healthy: () => {
      if (since === undefined) return
      const degradedForMs = options.now() - since
      since = undefined
      options.publish(new ReliableRecovered({ endpointName: options.endpointName, role: options.role, degradedForMs }))
    },
    degradedSince: () => since
  }
}

/** A reporter that tells nobody (lanes made outside an endpoint, in tests). */
export const silent: HealthReporter = { degraded: () => {}, healthy: () => {} }
