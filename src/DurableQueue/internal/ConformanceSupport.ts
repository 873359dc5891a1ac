/**
 * Helpers shared by the conformance suites: plain-data views that compare structurally,
 * outcomes as data, seeds, payloads shaped as an endpoint hands them, and the tests both suites
 * run alike.
 */
import { expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import type { Scope } from "effect"
import type * as SeededRandom from "../../internal/SeededRandom.js"
import type { ChunkMark } from "../../Protocol/WireMessage.js"
import type { StoredEntry } from "../DurableProducerQueue.js"

export interface ConformanceOptions {
  /** Seeds of the randomized tests (default 1, 2, 3). */
  readonly seeds?: ReadonlyArray<number> | undefined
  /** Operations per randomized run (default 60). */
  readonly steps?: number | undefined
}

export interface EntryView {
  readonly seq: number
  readonly messageId: string
  readonly payload: string
  readonly chunk: ChunkMark | null
  /** Present only when the entry has them, so plain entries compare as before. */
  readonly at?: number
  readonly trace?: string
  readonly attempts?: number
  readonly notBefore?: number
}

export const hex = (bytes: Uint8Array): string =>
  Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("")

/**
 * `content` as an endpoint hands it to a queue: a view into a larger buffer, with other bytes on
 * both sides (the endpoint writes payloads one after another into a shared slab).
 */
const inSharedBuffer = (content: Uint8Array): Uint8Array => {
  const shared = new Uint8Array(content.length + 2 * GuardBytes).fill(0xee)
  shared.set(content, GuardBytes)
  return shared.subarray(GuardBytes, GuardBytes + content.length)
}

const GuardBytes = 5

export const bytes = (text: string): Uint8Array => inSharedBuffer(new TextEncoder().encode(text))

/** What the view test needs of a queue: both queue contracts have it. */
interface ViewQueue<S> {
  readonly load: Effect.Effect<{ readonly epoch: number; readonly state: S }, unknown>
  readonly store: (epoch: number, request: { readonly messageId: string; readonly payload: Uint8Array }) => Effect.Effect<unknown, unknown>
  readonly accept: (epoch: number, messageId: string) => Effect.Effect<unknown, unknown>
}

/**
 * A payload given as a view into a shared buffer is stored as its own bytes: the caller writes
 * over the whole buffer after the store (as its next payloads would), and the loaded payload is
 * still the view's. `loaded` picks the loaded entries out of a queue's state.
 */
export const viewPayloadTest = <S>(fresh: Effect.Effect<ViewQueue<S>, unknown, Scope.Scope>, loaded: (state: S) => ReadonlyArray<StoredEntry>) =>
  it.scoped("a payload given as a view into a shared buffer is stored as its own bytes, unchanged by later writes there", () =>
    Effect.gen(function*() {
      const queue = yield* fresh
      const { epoch } = yield* queue.load
      const payload = bytes("view")
      yield* queue.store(epoch, { messageId: "v", payload })
      yield* queue.accept(epoch, "v")
      new Uint8Array(payload.buffer).fill(0x21)
      const { state } = yield* queue.load
      expect(loaded(state).map((entry) => hex(entry.payload))).toEqual([hex(new TextEncoder().encode("view"))])
    }))

export const viewEntry = (entry: StoredEntry): EntryView => ({
  seq: entry.seq,
  messageId: entry.messageId,
  payload: hex(entry.payload),
  chunk: entry.chunk === undefined ? null : { first: entry.chunk.first, last: entry.chunk.last },
  ...(entry.at === undefined ? {} : { at: entry.at }),
  ...(entry.trace === undefined ? {} : { trace: entry.trace }),
  ...(entry.attempts === undefined || entry.attempts === 0 ? {} : { attempts: entry.attempts }),
  ...(entry.notBefore === undefined ? {} : { notBefore: entry.notBefore })
})

/** What an operation did: its value (as a view) or its error's tag. */
export type Outcome<A> = { readonly ok: A } | { readonly error: string }

/** Runs `effect`, turning a failure into its tag so outcomes compare with a model's. */
export const outcome = <A, B>(effect: Effect.Effect<A, { readonly _tag: string }>, view: (a: A) => B) =>
  Effect.match(effect, {
    onFailure: (error): Outcome<B> => ({ error: error._tag }),
    onSuccess: (value): Outcome<B> => ({ ok: view(value) })
  })

/** The error tag of `effect`, or "success". */
export const failureTag = <A>(effect: Effect.Effect<A, { readonly _tag: string }>) =>
  Effect.match(effect, { onFailure: (error) => error._tag, onSuccess: () => "success" })

/** Prints the seed when the test fails, so the run can be replayed. */
export const withSeed = (suite: string, label: string, seed: number) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.tapErrorCause(effect, () =>
    Effect.sync(() =>
      console.error(`[${suite} conformance] ${label} failed with seed ${seed} (replay: RELIABLE_CONFORMANCE_SEED=${seed})`)
    ))

/** The seeds to run: `RELIABLE_CONFORMANCE_SEED` replays one. */
export const seedsFrom = (options: ConformanceOptions | undefined): ReadonlyArray<number> => {
  const replay = process.env.RELIABLE_CONFORMANCE_SEED
  if (replay !== undefined && replay !== "" && Number.isInteger(Number(replay))) return [Number(replay)]
  return options?.seeds ?? [1, 2, 3]
}

export const randomPayload = (random: SeededRandom.SeededRandom): Uint8Array =>
  inSharedBuffer(Uint8Array.from({ length: random.int(1, 4) }, () => random.int(0, 255)))

export const idPool: ReadonlyArray<string> = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]

/** Concurrent loads, to open a pool's connections before a race (so setup does not decide it). */
export const warmUp = <L, EL>(load: Effect.Effect<L, EL>): Effect.Effect<void, EL> =>
  Effect.all(Array.from({ length: 8 }, () => load), { concurrency: "unbounded", discard: true })

/**
 * Runs `writes` concurrently with one `load` started among them, so that a real race decides
 * which writes land before the load and which are fenced after it.
 */
export const raceWithLoad = <W, E, L, EL>(
  load: Effect.Effect<L, EL>,
  writes: ReadonlyArray<Effect.Effect<W, E>>
): Effect.Effect<readonly [ReadonlyArray<Either.Either<W, E>>, L], EL> =>
  Effect.gen(function*() {
    const half = Math.floor(writes.length / 2)
    const run = (group: ReadonlyArray<Effect.Effect<W, E>>) =>
      Effect.all(group.map((write) => Effect.either(write)), { concurrency: "unbounded" })
    // the load yields twice first: on a synchronous store it then runs between the two halves
    const [first, loaded, second] = yield* Effect.all(
      [run(writes.slice(0, half)), Effect.zipRight(Effect.repeatN(Effect.yieldNow(), 1), load), run(writes.slice(half))],
      { concurrency: "unbounded" }
    )
    return [[...first, ...second], loaded] as const
  })
