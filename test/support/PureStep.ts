/**
 * Runs a pure machine's `step` over events and checks, at every step, that it left its input
 * state as it was: every table test of a machine is then also a test of its purity.
 */
import { expect } from "@effect/vitest"

/**
 * A plain copy of everything a state can hold, for comparison: arrays, maps, sets, bytes, class
 * instances by their fields, persistent sequences by their contents (`toArray`: their backing
 * arrays are shared between versions on purpose). Functions compare by identity.
 */
export const snapshotOf = (value: unknown): unknown => {
  if (value === null || typeof value !== "object") return value
  if (value instanceof Uint8Array) return { bytes: Array.from(value) }
  if (Array.isArray(value)) return value.map(snapshotOf)
  if (value instanceof Map) return { map: Array.from(value, ([key, entry]) => [snapshotOf(key), snapshotOf(entry)]) }
  if (value instanceof Set) return { set: Array.from(value, snapshotOf) }
  const toArray = (value as { readonly toArray?: unknown }).toArray
  if (typeof toArray === "function") return { sequence: (toArray.call(value) as Array<unknown>).map(snapshotOf) }
  return Object.fromEntries(Object.entries(value).map(([key, field]) => [key, snapshotOf(field)]))
}

/** A `run(state, ...events)` for `step` that fails the test if a step changes its input state. */
export const checkedRun = <S, E, A>(step: (state: S, event: E) => { readonly state: S; readonly actions: ReadonlyArray<A> }) =>
  (state: S, ...events: ReadonlyArray<E>): { readonly state: S; readonly actions: Array<A> } => {
    const actions: Array<A> = []
    for (const event of events) {
      const before = snapshotOf(state)
      const next = step(state, event)
      expect(snapshotOf(state), `step(${(event as { readonly _tag?: string })._tag}) changed its input state`).toEqual(before)
      state = next.state
      actions.push(...next.actions)
    }
    return { state, actions }
  }
