/**
 * A small deterministic PRNG (mulberry32) for fault injection and randomized tests: the same
 * seed gives the same sequence on every machine, so a failing run can be replayed from its seed.
 */
export interface SeededRandom {
  /** A float in [0, 1). */
  readonly next: () => number
  /** An integer in [min, max] inclusive. */
  readonly int: (min: number, max: number) => number
  /** True with probability `p`. */
  readonly chance: (p: number) => boolean
}

export const make = (seed: number): SeededRandom => {
  let state = seed >>> 0
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return {
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    chance: (p) => p > 0 && next() < p
  }
}
