/**
 * Every Effect metric of the process (`Metric.snapshot`: this library's `effect_reliable_*` and the
 * application's own) in the Prometheus text exposition format, for `GET /metrics`. Counters and
 * gauges are one sample per tag set; histograms their cumulative buckets, sum and count;
 * summaries their quantiles, sum and count; frequencies one sample per value.
 */
import { Effect, Metric, MetricState, Option } from "effect"
import type { MetricPair } from "effect"

const sanitize = (name: string): string => name.replace(/[^a-zA-Z0-9_:]/g, "_")

const escape = (value: string): string => value.replace(/\\/g, "\\\\").replace(/"/g, "\\\"").replace(/\n/g, "\\n")

const labels = (tags: ReadonlyArray<readonly [string, string]>): string =>
  tags.length === 0 ? "" : `{${tags.map(([key, value]) => `${sanitize(key)}="${escape(value)}"`).join(",")}}`

const number = (value: number | bigint): string =>
  typeof value === "bigint" ? value.toString() : Number.isFinite(value) ? String(value) : value > 0 ? "+Inf" : value < 0 ? "-Inf" : "NaN"

/** The sample lines of one metric with its tags. */
const samples = (name: string, tags: ReadonlyArray<readonly [string, string]>, state: unknown): { readonly type: string; readonly lines: Array<string> } => {
  if (MetricState.isCounterState(state)) return { type: "counter", lines: [`${name}${labels(tags)} ${number(state.count)}`] }
  if (MetricState.isGaugeState(state)) return { type: "gauge", lines: [`${name}${labels(tags)} ${number(state.value)}`] }
  if (MetricState.isHistogramState(state)) {
    return {
      type: "histogram",
      lines: [
        ...state.buckets.map(([bound, count]) => `${name}_bucket${labels([...tags, ["le", number(bound)]])} ${count}`),
        `${name}_bucket${labels([...tags, ["le", "+Inf"]])} ${state.count}`,
        `${name}_sum${labels(tags)} ${number(state.sum)}`,
        `${name}_count${labels(tags)} ${state.count}`
      ]
    }
  }
  if (MetricState.isSummaryState(state)) {
    return {
      type: "summary",
      lines: [
        ...state.quantiles.flatMap(([quantile, value]) =>
          Option.isSome(value) ? [`${name}${labels([...tags, ["quantile", String(quantile)]])} ${number(value.value)}`] : []
        ),
        `${name}_sum${labels(tags)} ${number(state.sum)}`,
        `${name}_count${labels(tags)} ${state.count}`
      ]
    }
  }
  if (MetricState.isFrequencyState(state)) {
    return { type: "counter", lines: [...state.occurrences].map(([value, count]) => `${name}${labels([...tags, ["value", value]])} ${count}`) }
  }
  return { type: "untyped", lines: [] }
}

/** Renders metric pairs as Prometheus text, one `# TYPE` line per metric name. */
export const render = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>): string => {
  const byName = new Map<string, { type: string; lines: Array<string> }>()
  for (const pair of pairs) {
    const name = sanitize(pair.metricKey.name)
    const tags = pair.metricKey.tags.map((tag) => [tag.key, tag.value] as const)
    const rendered = samples(name, tags, pair.metricState)
    const known = byName.get(name)
    if (known === undefined) byName.set(name, { type: rendered.type, lines: [...rendered.lines] })
    else known.lines.push(...rendered.lines)
  }
  const out: Array<string> = []
  for (const [name, { lines, type }] of [...byName].sort(([a], [b]) => a.localeCompare(b))) {
    out.push(`# TYPE ${name} ${type}`, ...lines)
  }
  return out.length === 0 ? "" : `${out.join("\n")}\n`
}

/** The process's metrics now, as Prometheus text. */
export const prometheusText: Effect.Effect<string> = Effect.map(Metric.snapshot, render)
