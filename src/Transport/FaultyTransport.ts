/**
 * A fault-injecting wrapper around another transport: drops, duplicates, delays and reorders
 * envelopes and cuts links between nodes, all decided by a seeded PRNG and timed by the Effect
 * `Clock`, so a run is replayable from its seed and drivable by `TestClock`.
 */
import { Context, Duration, Effect, Layer, Option, Queue } from "effect"
import type { Scope } from "effect"
import * as SeededRandom from "../internal/SeededRandom.js"
import * as Config from "../Protocol/Config.js"
import type { ReliableConfigError } from "../Protocol/Errors.js"
import type { Envelope } from "../Protocol/WireMessage.js"
import { layerMemory } from "./MemoryTransport.js"
import { Transport } from "./Transport.js"
import type { TransportService } from "./Transport.js"

export interface FaultOptions {
  /** PRNG seed; the same seed and the same traffic give the same faults. */
  readonly seed: number
  /** Probability of dropping an envelope: one number for both directions, or per direction. */
  readonly drop?: number | { readonly toProducer?: number; readonly toConsumer?: number }
  /** Probability of delivering an envelope twice. */
  readonly duplicate?: number
  /** Probability of holding an envelope back (up to `reorderWindow`) so later ones overtake it. */
  readonly reorder?: number
  /** How long a reordered envelope may be held; default 20ms. */
  readonly reorderWindow?: Duration.DurationInput
  /** Every envelope is delayed by a random latency in [0, delay]; default none. */
  readonly delay?: Duration.DurationInput
}

export interface FaultStats {
  readonly posted: number
  readonly dropped: number
  readonly duplicated: number
  readonly held: number
  readonly cut: number
}

/** Control over an injected fault layer: counters and link cuts. */
export interface FaultInjectorService {
  readonly stats: () => FaultStats
  /** Drops everything between the two nodes (both directions) until `heal`. */
  readonly cut: (nodeA: string, nodeB: string) => Effect.Effect<void>
  readonly heal: (nodeA: string, nodeB: string) => Effect.Effect<void>
}

export class FaultInjector extends Context.Tag("effect-reliable/FaultInjector")<FaultInjector, FaultInjectorService>() {}

interface Held {
  readonly due: number
  readonly envelope: Envelope
}

const towardConsumer = (envelope: Envelope): boolean =>
  envelope.message._tag === "SequencedMessage" || envelope.message._tag === "RegistrationAck"

const faultKeys = Config.optionKeys<FaultOptions>({
  seed: true,
  drop: true,
  duplicate: true,
  reorder: true,
  reorderWindow: true,
  delay: true
})

const dropKeys = Config.optionKeys<Exclude<FaultOptions["drop"], number | undefined>>({ toProducer: true, toConsumer: true })

/** Drop probabilities per direction: one number for both, or an object per direction. */
const checkDrop = (drop: FaultOptions["drop"]) =>
  typeof drop === "object"
    ? Effect.zipRight(
      Config.checkKeys("the drop option of Transport.layerFaulty", drop, dropKeys),
      Effect.all({
        toProducer: Config.checkProbability("drop.toProducer", drop.toProducer),
        toConsumer: Config.checkProbability("drop.toConsumer", drop.toConsumer)
      })
    )
    : Effect.map(Config.checkProbability("drop", drop), (p) => ({ toProducer: p, toConsumer: p }))

/** Checks fault options: no unknown option, probabilities in [0, 1], finite durations. */
const checkOptions = (options: FaultOptions) =>
  Effect.zipRight(
    Config.checkKeys("Transport.layerFaulty", options, faultKeys),
    Effect.all({
      seed: Config.checkSeed("seed", options.seed),
      drop: checkDrop(options.drop),
      duplicate: Config.checkProbability("duplicate", options.duplicate),
      reorder: Config.checkProbability("reorder", options.reorder),
      reorderWindow: Config.checkDelay("reorderWindow", options.reorderWindow, Duration.millis(20)),
      delay: Config.checkDelay("delay", options.delay, Duration.zero)
    })
  )

const linkKey = (a: string, b: string) => (a < b ? `${a}\u0000${b}` : `${b}\u0000${a}`)

/**
 * Wraps `underlying`; the returned transport's hold timer lives in the given scope. Fails with
 * `ReliableConfigError` on an unknown option, a probability outside [0, 1] or a bad duration.
 */
export const make = (
  underlying: TransportService,
  options: FaultOptions
): Effect.Effect<{ readonly transport: TransportService; readonly injector: FaultInjectorService }, ReliableConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const checked = yield* checkOptions(options)
    const random = SeededRandom.make(checked.seed)
    const dropToProducer = checked.drop.toProducer
    const dropToConsumer = checked.drop.toConsumer
    const { duplicate, reorder } = checked
    const reorderWindowMs = Math.max(1, Duration.toMillis(checked.reorderWindow))
    const delayMs = Math.max(0, Duration.toMillis(checked.delay))
    const cuts = new Set<string>()
    const counters = { posted: 0, dropped: 0, duplicated: 0, held: 0, cut: 0 }

    // Held envelopes, sorted by due time; one fiber releases them as the clock reaches them.
    const held: Array<Held> = []
    const wake = yield* Queue.sliding<void>(1)
    const clock = yield* Effect.clock

    const hold = (envelope: Envelope, afterMs: number) => {
      const due = clock.unsafeCurrentTimeMillis() + afterMs
      let index = held.length
      while (index > 0 && held[index - 1].due > due) index--
      held.splice(index, 0, { due, envelope })
      counters.held++
      wake.unsafeOffer(undefined)
    }

    const releaseDue = Effect.sync(() => {
      const now = clock.unsafeCurrentTimeMillis()
      let count = 0
      while (count < held.length && held[count].due <= now) count++
      if (count > 0) underlying.post(held.splice(0, count).map((entry) => entry.envelope))
      return held.length === 0 ? Option.none() : Option.some(Math.max(0, held[0].due - now))
    })

    yield* Effect.forkScoped(Effect.forever(
      Effect.flatMap(releaseDue, (next) =>
        Option.match(next, {
          onNone: () => Queue.take(wake),
          onSome: (waitMs) => Effect.asVoid(Effect.timeout(Queue.take(wake), Duration.millis(waitMs)).pipe(Effect.ignore))
        }))
    ))

    const route = (envelope: Envelope, out: Array<Envelope>) => {
      const extra = delayMs > 0 ? random.int(0, delayMs) : 0
      const reordered = reorder > 0 && random.chance(reorder) ? random.int(1, reorderWindowMs) : 0
      if (extra + reordered > 0) hold(envelope, extra + reordered)
      else out.push(envelope)
    }

    const transport: TransportService = {
      node: underlying.node,
      remoting: underlying.remoting,
      maxFrameSize: underlying.maxFrameSize,
      post: (envelopes) => {
        const out: Array<Envelope> = []
        for (const envelope of envelopes) {
          counters.posted++
          if (cuts.size > 0 && cuts.has(linkKey(envelope.from.node, envelope.to.node))) {
            counters.cut++
            continue
          }
          if (random.chance(towardConsumer(envelope) ? dropToConsumer : dropToProducer)) {
            counters.dropped++
            continue
          }
          route(envelope, out)
          if (duplicate > 0 && random.chance(duplicate)) {
            counters.duplicated++
            route(envelope, out)
          }
        }
        if (out.length > 0) underlying.post(out)
      },
      attach: underlying.attach,
      open: underlying.open,
      stats: underlying.stats
    }
    const injector: FaultInjectorService = {
      stats: () => ({ ...counters }),
      cut: (a, b) => Effect.sync(() => void cuts.add(linkKey(a, b))),
      heal: (a, b) => Effect.sync(() => void cuts.delete(linkKey(a, b)))
    }
    return { transport, injector }
  })

/** Wraps whatever `Transport` is provided below it. */
export const layerWithFaults = (options: FaultOptions): Layer.Layer<Transport | FaultInjector, ReliableConfigError, Transport> =>
  Layer.scopedContext(Effect.gen(function*() {
    const underlying = yield* Transport
    const { injector, transport } = yield* make(underlying, options)
    return Context.make(Transport, transport).pipe(Context.add(FaultInjector, injector))
  }))

/** The in-process memory transport with faults injected. */
export const layerFaulty = (options: FaultOptions): Layer.Layer<Transport | FaultInjector, ReliableConfigError> =>
  layerWithFaults(options).pipe(Layer.provide(layerMemory))
