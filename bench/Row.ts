/**
 * One line of the benchmark table, and the timing helper every case uses.
 */
import { Effect } from "effect"

export interface Row {
  readonly name: string
  readonly messages: number
  readonly seconds: number
  /** Messages (or jobs, or MiB for byte benches) per second. */
  readonly rate: number
  readonly unit: string
  /** Peak resident set size of the process that ran the case. */
  readonly peakRssMiB: number
  /** Heap still in use after a full GC at the end of the case: what the flow retains. */
  readonly heapAfterGcMiB?: number
  readonly note?: string
}

export const peakRssMiB = (): number => process.resourceUsage().maxRSS / 1024

/** Heap in use after a full collection (the bench runs node with --expose-gc). */
export const heapAfterGcMiB = (): number | undefined => {
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc === undefined) return undefined
  gc()
  return process.memoryUsage().heapUsed / 1048576
}

/** Times `effect`, which must process `messages` units, and builds the row. */
export const measure = <E, R>(
  name: string,
  messages: number,
  effect: Effect.Effect<unknown, E, R>,
  unit = "msgs/s"
): Effect.Effect<Row, E, R> =>
  Effect.gen(function*() {
    const started = performance.now()
    yield* effect
    const seconds = (performance.now() - started) / 1000
    const heap = heapAfterGcMiB()
    return {
      name,
      messages,
      seconds,
      rate: messages / seconds,
      unit,
      peakRssMiB: peakRssMiB(),
      ...(heap === undefined ? {} : { heapAfterGcMiB: heap })
    }
  })
