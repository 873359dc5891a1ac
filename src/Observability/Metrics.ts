/**
 * The Effect metrics of every endpoint, defined in one place. Any Effect metrics exporter (the
 * OpenTelemetry one, Prometheus) sees them: they live in Effect's global metric registry.
 *
 * Every metric is tagged with the endpoint's `endpoint` name and `role` (plus the metric labels
 * of the fiber that created the endpoint, `Effect.tagMetrics`). The tags are applied once, when
 * the endpoint is created, to the metric's key, and the registry's hook for that key is kept: an
 * update is then one call on the hook, with nothing allocated and nothing looked up. That matters
 * because the shells update them inside their synchronous folds, where no effect runs.
 *
 * Counters are counted in plain numbers by the shells (the same numbers `stats` reports) and
 * added to the metrics every `SampleInterval` and when the controller closes (`counterSync`,
 * `syncEvery`): updating them in every fold cost the send loop about 5%, several updates per
 * message. Gauges are sampled by the endpoint every `SampleInterval`, since a lag grows while
 * nothing happens.
 */
import { Duration, Effect, FiberRef, Metric, MetricBoundaries, MetricKey, MetricLabel, Schedule } from "effect"
import type { Scope } from "effect"

/** What an endpoint is, as its metrics' `role` tag says. */
export type Role = "producer" | "consumer" | "work_producer" | "worker"

/** How often an endpoint's gauges are sampled. */
export const SampleInterval = Duration.seconds(1)

const counterKey = (name: string, description: string) => MetricKey.counter(name, { description, incremental: true })

/** Milliseconds, from a quarter of a millisecond to about 70 seconds. */
const latencyBoundaries = MetricBoundaries.exponential({ start: 0.25, factor: 2, count: 19 })

/** Every metric key, by the name a shell uses for it. */
export const keys = {
  sent: counterKey("effect_reliable_messages_sent_total", "Wire messages a producer sent the first time"),
  resent: counterKey("effect_reliable_messages_resent_total", "Wire messages a producer sent again after a timeout request"),
  delivered: counterKey("effect_reliable_messages_delivered_total", "Messages a consumer handed to its handler the first time"),
  redelivered: counterKey("effect_reliable_messages_redelivered_total", "Messages a consumer handed out again (after a release or a restart)"),
  confirmed: counterKey("effect_reliable_messages_confirmed_total", "Messages the consumer side confirmed, counted by the producer"),
  deadLettered: counterKey("effect_reliable_messages_dead_lettered_total", "Messages a consumer dead-lettered"),
  dropped: counterKey("effect_reliable_envelopes_dropped_total", "Inputs ignored as stale, unbound, unverified or beyond demand"),
  queueOperations: counterKey("effect_reliable_queue_operations_total", "Durable queue calls (each attempt)"),
  queueFailures: counterKey("effect_reliable_queue_failures_total", "Durable queue calls that failed (each attempt)"),
  inFlight: MetricKey.gauge("effect_reliable_in_flight", { description: "Messages sent and not yet confirmed" }),
  freeDemand: MetricKey.gauge("effect_reliable_free_demand", { description: "Messages the consumer side asked for beyond those in flight" }),
  pending: MetricKey.gauge("effect_reliable_pending", { description: "Messages waiting for demand: callers waiting, stored and unsent, or jobs no worker holds" }),
  workers: MetricKey.gauge("effect_reliable_workers_bound", { description: "Workers bound to a work-pulling producer" }),
  oldestUnconfirmedAge: MetricKey.gauge("effect_reliable_oldest_unconfirmed_age_ms", {
    description: "The lag: age of the oldest message sent and not yet confirmed (ms)"
  }),
  oldestPendingAge: MetricKey.gauge("effect_reliable_oldest_pending_age_ms", {
    description: "Age of the oldest job no worker holds (ms)"
  }),
  sendLatency: MetricKey.histogram("effect_reliable_send_latency_ms", latencyBoundaries, "From a send call to its Stored answer (ms)"),
  endToEndLatency: MetricKey.histogram("effect_reliable_end_to_end_latency_ms", latencyBoundaries, "From a message's send to its confirmation (ms)")
}

export interface Counter {
  readonly add: (count: number) => void
}
export interface Gauge {
  readonly set: (value: number) => void
}
export interface Histogram {
  readonly observe: (value: number) => void
}

/** A durable lane's calls, by operation (`load`, `store`, ...). */
export interface QueueMetrics {
  readonly attempt: (operation: string) => void
  readonly failure: (operation: string) => void
}

export interface EndpointMetrics {
  readonly sent: Counter
  readonly resent: Counter
  readonly delivered: Counter
  readonly redelivered: Counter
  readonly confirmed: Counter
  readonly deadLettered: Counter
  readonly dropped: Counter
  readonly inFlight: Gauge
  readonly freeDemand: Gauge
  readonly pending: Gauge
  readonly workers: Gauge
  readonly oldestUnconfirmedAge: Gauge
  readonly oldestPendingAge: Gauge
  readonly sendLatency: Histogram
  readonly endToEndLatency: Histogram
  readonly queue: QueueMetrics
}

type AnyKey = MetricKey.MetricKey<any>

/** The registry's hook for the key with the endpoint's tags: what `Metric.fromMetricKey` would update. */
const hookOf = <K extends AnyKey>(key: K, labels: ReadonlyArray<MetricLabel.MetricLabel>) =>
  Metric.globalMetricRegistry.get(MetricKey.taggedWithLabels(key, labels))

const counter = (key: MetricKey.MetricKey.Counter<number>, labels: ReadonlyArray<MetricLabel.MetricLabel>): Counter => ({
  add: hookOf(key, labels).update
})

const gauge = (key: MetricKey.MetricKey.Gauge<number>, labels: ReadonlyArray<MetricLabel.MetricLabel>): Gauge => ({
  set: hookOf(key, labels).update
})

const histogram = (key: MetricKey.MetricKey.Histogram, labels: ReadonlyArray<MetricLabel.MetricLabel>): Histogram => ({
  observe: hookOf(key, labels).update
})

/** Queue counters tagged by operation as well; an operation's pair is made on its first call. */
const queueMetrics = (labels: ReadonlyArray<MetricLabel.MetricLabel>): QueueMetrics => {
  const byOperation = new Map<string, { readonly attempts: Counter; readonly failures: Counter }>()
  const of = (operation: string) => {
    let pair = byOperation.get(operation)
    if (pair === undefined) {
      const tagged = [...labels, MetricLabel.make("operation", operation)]
      pair = { attempts: counter(keys.queueOperations, tagged), failures: counter(keys.queueFailures, tagged) }
      byOperation.set(operation, pair)
    }
    return pair
  }
  return {
    attempt: (operation) => of(operation).attempts.add(1),
    failure: (operation) => of(operation).failures.add(1)
  }
}

/**
 * Whether endpoints made in this fiber record metrics (default: yes). An internal switch: the
 * bench turns it off to measure what the metrics cost.
 */
export const recording: FiberRef.FiberRef<boolean> = FiberRef.unsafeMake(true)

/** The metrics of one endpoint, tagged with its name and role (`off` where `recording` is off). */
export const make = (endpoint: string, role: Role): Effect.Effect<EndpointMetrics> =>
  Effect.zipWith(FiberRef.get(recording), FiberRef.get(FiberRef.currentMetricLabels), (on, inherited) => {
    if (!on) return off
    const labels = [...inherited, MetricLabel.make("endpoint", endpoint), MetricLabel.make("role", role)]
    return {
      sent: counter(keys.sent, labels),
      resent: counter(keys.resent, labels),
      delivered: counter(keys.delivered, labels),
      redelivered: counter(keys.redelivered, labels),
      confirmed: counter(keys.confirmed, labels),
      deadLettered: counter(keys.deadLettered, labels),
      dropped: counter(keys.dropped, labels),
      inFlight: gauge(keys.inFlight, labels),
      freeDemand: gauge(keys.freeDemand, labels),
      pending: gauge(keys.pending, labels),
      workers: gauge(keys.workers, labels),
      oldestUnconfirmedAge: gauge(keys.oldestUnconfirmedAge, labels),
      oldestPendingAge: gauge(keys.oldestPendingAge, labels),
      sendLatency: histogram(keys.sendLatency, labels),
      endToEndLatency: histogram(keys.endToEndLatency, labels),
      queue: queueMetrics(labels)
    }
  })

/**
 * Adds to each counter what its plain-number source counted since the last call: a shell counts
 * in numbers (its `stats`) and this runs every `SampleInterval` (`syncEvery`), so an interval that
 * sent a thousand messages makes one update, and one that changed nothing makes none.
 */
export const counterSync = (pairs: ReadonlyArray<readonly [read: () => number, counter: Counter]>): () => void => {
  const last = new Array<number>(pairs.length).fill(0)
  return () => {
    for (let index = 0; index < pairs.length; index++) {
      const value = pairs[index][0]()
      if (value > last[index]) {
        pairs[index][1].add(value - last[index])
        last[index] = value
      }
    }
  }
}

/**
 * Runs a controller's `counterSync` every `SampleInterval` for the life of the scope, and once more
 * when it closes, so the counters are at most one interval behind the controller's `stats`.
 */
export const syncEvery = (metrics: EndpointMetrics, sync: () => void): Effect.Effect<void, never, Scope.Scope> =>
  metrics === off ? Effect.void : Effect.zipRight(
    Effect.addFinalizer(() => Effect.sync(sync)),
    Effect.asVoid(Effect.forkScoped(Effect.repeat(Effect.sync(sync), Schedule.spaced(SampleInterval))))
  )

/** What an endpoint's gauges show, sampled from its live controller. */
export interface FlowGauges {
  readonly inFlight: number
  readonly freeDemand: number
  readonly pending: number
  readonly workers: number
  readonly oldestUnconfirmedAgeMillis: number
  readonly oldestPendingAgeMillis: number
}

export const noGauges: FlowGauges = { inFlight: 0, freeDemand: 0, pending: 0, workers: 0, oldestUnconfirmedAgeMillis: 0, oldestPendingAgeMillis: 0 }

/** Sets the gauges. */
export const setGauges = (metrics: EndpointMetrics, gauges: FlowGauges): void => {
  metrics.inFlight.set(gauges.inFlight)
  metrics.freeDemand.set(gauges.freeDemand)
  metrics.pending.set(gauges.pending)
  metrics.workers.set(gauges.workers)
  metrics.oldestUnconfirmedAge.set(gauges.oldestUnconfirmedAgeMillis)
  metrics.oldestPendingAge.set(gauges.oldestPendingAgeMillis)
}

/**
 * Samples the gauges every `SampleInterval` for the life of the scope, and zeroes them when it
 * closes (the endpoint is gone: nothing is in flight or lagging there any more).
 */
export const sampleGauges = (metrics: EndpointMetrics, sample: () => FlowGauges) =>
  metrics === off ? Effect.void : Effect.zipRight(
    Effect.addFinalizer(() => Effect.sync(() => setGauges(metrics, noGauges))),
    Effect.forkScoped(Effect.repeat(Effect.sync(() => setGauges(metrics, sample())), Schedule.spaced(SampleInterval)))
  )

const ignored = () => {}

/** Metrics that record nothing: for controllers built outside an endpoint (tests, benches). */
export const off: EndpointMetrics = {
  sent: { add: ignored },
  resent: { add: ignored },
  delivered: { add: ignored },
  redelivered: { add: ignored },
  confirmed: { add: ignored },
  deadLettered: { add: ignored },
  dropped: { add: ignored },
  inFlight: { set: ignored },
  freeDemand: { set: ignored },
  pending: { set: ignored },
  workers: { set: ignored },
  oldestUnconfirmedAge: { set: ignored },
  oldestPendingAge: { set: ignored },
  sendLatency: { observe: ignored },
  endToEndLatency: { observe: ignored },
  queue: { attempt: ignored, failure: ignored }
}
