/**
 * Option defaults and bounds, and the checks every endpoint constructor runs.
 */
import { Duration, Effect, Schedule, Schema } from "effect"
import { formatNode } from "./Address.js"
import { ReliableConfigError, ReliablePeerClusterConflict, ReliablePeerRemotingRequired } from "./Errors.js"
import type { ReliableEndpointConfigError } from "./Errors.js"

/** Consumer demand per request and consumer buffer capacity. */
export const DefaultWindow = 50
export const MinWindow = 1
export const MaxWindow = 10_000

/** Consumer controller tick: re-registration, re-delivery and gap re-request cadence. */
export const DefaultResendInterval: Duration.Duration = Duration.seconds(2)
/** Producer controller cadence for re-offering an unanswered `RequestNext` or unacknowledged `Stored`. */
export const DefaultRetryInterval: Duration.Duration = Duration.millis(500)

/** How often a durable producer reads its backlog when nothing says it has news (writers in other processes, SQLite). */
export const DefaultBacklogPollInterval = Duration.seconds(1)
/** Durable queue operations: attempts before the controller restarts, and the pause between them. */
export const DefaultQueueRetryAttempts = 3
export const DefaultQueueRetryInterval: Duration.Duration = Duration.millis(100)
/** A durable queue call not answered within this long counts as backend trouble. */
export const DefaultQueueTimeout: Duration.Duration = Duration.seconds(5)
/**
 * A reload that fails after its attempts is retried for as long as it takes: from 100ms,
 * doubling, never more than 1s apart, so a flow resumes within about a second of its database.
 */
export const DefaultQueueBackoff: { readonly initial: Duration.Duration; readonly max: Duration.Duration } = {
  initial: Duration.millis(100),
  max: Duration.seconds(1)
}
/** How long graceful shutdown waits for work in flight (a handler, a durable call) to finish. */
export const DefaultDrainTimeout: Duration.Duration = Duration.seconds(5)
/** How long a peer lookup may take before it counts as unanswered. */
export const DefaultLookupTimeout: Duration.Duration = Duration.millis(500)
/** How long a cluster member stays a member without renewing its lease. */
export const DefaultLease: Duration.Duration = Duration.seconds(3)

/** Chunk size bounds: 1 KiB up to 16 MiB minus 64 KiB of envelope headroom. */
export const MinChunkSize = 1024
export const MaxChunkSize = 16 * 1024 * 1024 - 64 * 1024

/** Queue retry policy as given by the user. */
export interface QueueRetry {
  readonly attempts: number
  readonly interval: Duration.DurationInput
}

/** The backoff of a reload that keeps failing, as given by the user. */
export interface QueueBackoff {
  readonly initial?: Duration.DurationInput
  readonly max?: Duration.DurationInput
}

const fail = (option: string, message: string) => Effect.fail(new ReliableConfigError({ option, message }))

/** The option names of an options type, for `checkKeys`: the compiler keeps the list complete and exact. */
export const optionKeys = <T>(keys: { readonly [K in keyof T]-?: true }): ReadonlySet<string> => new Set(Object.keys(keys))

/**
 * Refuses every option `allowed` does not name, so a misspelt option is an error rather than
 * silently ignored; `refused` says why an option of a sibling constructor does not apply here.
 * An option given as `undefined` counts as not given.
 */
export const checkKeys = (
  constructor: string,
  options: unknown,
  allowed: ReadonlySet<string>,
  refused: Readonly<Record<string, string>> = {}
): Effect.Effect<void, ReliableConfigError> => {
  if (typeof options !== "object" || options === null) {
    return fail("options", `${constructor} takes an options object, got ${options === null ? "null" : typeof options}`)
  }
  for (const [key, value] of Object.entries(options)) {
    if (allowed.has(key) || value === undefined) continue
    return fail(key, refused[key] ?? `${constructor} takes no option "${key}" (its options: ${[...allowed].join(", ")})`)
  }
  return Effect.void
}

/** A payload option must be a Schema: every payload is encoded and decoded with it. */
export const checkSchema = (option: string, value: unknown): Effect.Effect<void, ReliableConfigError> =>
  Schema.isSchema(value) ? Effect.void : fail(option, `${option} must be a Schema (e.g. Schema.Struct({...})), got ${typeof value}`)

/** A boolean option; absent means `false`. */
export const checkFlag = (option: string, value: boolean | undefined): Effect.Effect<boolean, ReliableConfigError> =>
  value === undefined || typeof value === "boolean"
    ? Effect.succeed(value === true)
    : fail(option, `${option} must be a boolean, got ${JSON.stringify(value)}`)

/** A probability option in [0, 1]; absent means 0. */
export const checkProbability = (option: string, value: number | undefined): Effect.Effect<number, ReliableConfigError> =>
  value === undefined || (typeof value === "number" && value >= 0 && value <= 1)
    ? Effect.succeed(value ?? 0)
    : fail(option, `${option} must be a probability in [0, 1], got ${value}`)

/** A seed for a seeded PRNG: any finite number (its low 32 bits are used). */
export const checkSeed = (option: string, value: number): Effect.Effect<number, ReliableConfigError> =>
  typeof value === "number" && Number.isFinite(value)
    ? Effect.succeed(value)
    : fail(option, `${option} must be a finite number, got ${JSON.stringify(value)}`)

/** A duration option; absent means `fallback`, and `allowed` (described by `what`) bounds it. */
const checkDuration = (
  option: string,
  value: Duration.DurationInput | undefined,
  fallback: Duration.Duration,
  what: string,
  allowed: (duration: Duration.Duration) => boolean
): Effect.Effect<Duration.Duration, ReliableConfigError> => {
  if (value === undefined) return Effect.succeed(fallback)
  const decoded = Duration.decodeUnknown(value)
  if (decoded._tag === "None") return fail(option, `${option} is not a duration: ${String(value)}`)
  return allowed(decoded.value)
    ? Effect.succeed(decoded.value)
    : fail(option, `${option} must be ${what}, got ${Duration.format(decoded.value)}`)
}

/** A duration that may be zero (a delay); absent means `fallback`. */
export const checkDelay = (
  option: string,
  value: Duration.DurationInput | undefined,
  fallback: Duration.Duration
): Effect.Effect<Duration.Duration, ReliableConfigError> => checkDuration(option, value, fallback, "a finite duration", Duration.isFinite)

const tablePrefixPattern = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/

/** A prefix of SQL table names: a plain identifier of at most 40 characters; absent means the default. */
export const checkTablePrefix = (value: string | undefined): Effect.Effect<void, ReliableConfigError> =>
  value === undefined || (typeof value === "string" && tablePrefixPattern.test(value))
    ? Effect.void
    : fail("tablePrefix", `tablePrefix must start with a letter or _ and hold only letters, digits and _ (at most 40), got ${JSON.stringify(value)}`)

/**
 * Endpoint names starting with this belong to the library: every node answers lookups at its
 * `@system` address, which shares the transport's address space with the endpoints.
 */
export const ReservedNamePrefix = "@"

/** An endpoint name (an endpoint's own, or the peer it names): non-blank, outside the reserved namespace. */
export const checkName = (option: string, value: unknown): Effect.Effect<string, ReliableConfigError> => {
  if (typeof value !== "string" || value.trim().length === 0) {
    return fail(option, `${option} must be a non-blank string, got ${JSON.stringify(value)}`)
  }
  return value.startsWith(ReservedNamePrefix)
    ? fail(option, `${option} ${JSON.stringify(value)} is reserved: names starting with "${ReservedNamePrefix}" belong to the library (e.g. "@system", where every node answers lookups)`)
    : Effect.succeed(value)
}

export const checkWindow = (value: number | undefined): Effect.Effect<number, ReliableConfigError> => {
  if (value === undefined) return Effect.succeed(DefaultWindow)
  return Number.isInteger(value) && value >= MinWindow && value <= MaxWindow
    ? Effect.succeed(value)
    : fail("window", `window must be an integer in [${MinWindow}, ${MaxWindow}], got ${value}`)
}

export const checkInterval = (
  option: string,
  value: Duration.DurationInput | undefined,
  fallback: Duration.Duration
): Effect.Effect<Duration.Duration, ReliableConfigError> =>
  checkDuration(option, value, fallback, "a positive, finite duration", (duration) => {
    const millis = Duration.toMillis(duration)
    return Number.isFinite(millis) && millis > 0
  })

const queueRetryKeys = optionKeys<QueueRetry>({ attempts: true, interval: true })

export const checkQueueRetry = (
  value: QueueRetry | undefined
): Effect.Effect<{ readonly attempts: number; readonly interval: Duration.Duration }, ReliableConfigError> => {
  if (value === undefined) return Effect.succeed({ attempts: DefaultQueueRetryAttempts, interval: DefaultQueueRetryInterval })
  return Effect.zipRight(checkKeys("the queueRetry option", value, queueRetryKeys), Effect.suspend(() => {
    if (!Number.isInteger(value.attempts) || value.attempts < 1 || value.attempts > 1000) {
      return fail("queueRetry.attempts", `queueRetry.attempts must be an integer in [1, 1000], got ${value.attempts}`)
    }
    return Effect.map(
      checkInterval("queueRetry.interval", value.interval, DefaultQueueRetryInterval),
      (interval) => ({ attempts: value.attempts, interval })
    )
  }))
}

/** A graceful shutdown's bound: any finite duration, 0 for none (close at once). */
export const checkDrainTimeout = (value: Duration.DurationInput | undefined): Effect.Effect<Duration.Duration, ReliableConfigError> =>
  checkDelay("drainTimeout", value, DefaultDrainTimeout)

/** The queue policy: retries before a restart, the call timeout, and the reload backoff. */
const queueBackoffKeys = optionKeys<QueueBackoff>({ initial: true, max: true })

export const checkQueuePolicy = (options: {
  readonly queueRetry?: QueueRetry | undefined
  readonly queueTimeout?: Duration.DurationInput | undefined
  readonly queueBackoff?: QueueBackoff | undefined
}) =>
  Effect.gen(function*() {
    const retry = yield* checkQueueRetry(options.queueRetry)
    if (options.queueBackoff !== undefined) yield* checkKeys("the queueBackoff option", options.queueBackoff, queueBackoffKeys)
    const timeout = yield* checkInterval("queueTimeout", options.queueTimeout, DefaultQueueTimeout)
    const initial = yield* checkInterval("queueBackoff.initial", options.queueBackoff?.initial, DefaultQueueBackoff.initial)
    const max = yield* checkInterval("queueBackoff.max", options.queueBackoff?.max, DefaultQueueBackoff.max)
    if (Duration.lessThan(max, initial)) {
      return yield* fail("queueBackoff.max", `queueBackoff.max (${Duration.format(max)}) must not be shorter than queueBackoff.initial (${Duration.format(initial)})`)
    }
    return { ...retry, timeout, backoff: { initial, max } }
  })

/** A `Schedule` option (the retry delays of a failed handler); absent means `fallback`. */
export const checkSchedule = (
  option: string,
  value: Schedule.Schedule<unknown, unknown> | undefined,
  fallback: Schedule.Schedule<unknown, unknown>
): Effect.Effect<Schedule.Schedule<unknown, unknown>, ReliableConfigError> =>
  value === undefined
    ? Effect.succeed(fallback)
    : Schedule.isSchedule(value)
    ? Effect.succeed(value)
    : fail(option, `${option} must be a Schedule (e.g. Schedule.exponential("200 millis")), got ${typeof value}`)

/** Attempts before a failing message is dead-lettered: a positive integer, or Infinity for never. */
export const checkMaxAttempts = (value: number | undefined, fallback: number): Effect.Effect<number, ReliableConfigError> => {
  if (value === undefined) return Effect.succeed(fallback)
  return value === Number.POSITIVE_INFINITY || (Number.isInteger(value) && value >= 1)
    ? Effect.succeed(value)
    : fail("maxAttempts", `maxAttempts must be a positive integer (or Infinity: never dead-letter), got ${value}`)
}

/** A positive duration that is off when absent. */
export const checkOptionalInterval = (
  option: string,
  value: Duration.DurationInput | undefined
): Effect.Effect<Duration.Duration | undefined, ReliableConfigError> =>
  value === undefined ? Effect.succeed(undefined) : checkInterval(option, value, Duration.zero)

/** The most deliveries a worker works on at once. */
export const MaxConcurrency = 1024

export const checkConcurrency = (value: number | undefined): Effect.Effect<number, ReliableConfigError> => {
  if (value === undefined) return Effect.succeed(1)
  return Number.isInteger(value) && value >= 1 && value <= MaxConcurrency
    ? Effect.succeed(value)
    : fail("concurrency", `concurrency must be an integer in [1, ${MaxConcurrency}], got ${value}`)
}

export const checkChunkSize = (value: number | undefined): Effect.Effect<number | undefined, ReliableConfigError> => {
  if (value === undefined) return Effect.succeed(undefined)
  return Number.isInteger(value) && value >= MinChunkSize && value <= MaxChunkSize
    ? Effect.succeed(value)
    : fail("chunkSize", `chunkSize must be an integer in [${MinChunkSize}, ${MaxChunkSize}] bytes, got ${value}`)
}

/** Lending applies to binary payloads: any other payload is decoded into a new value anyway. */
export const checkLendPayloads = (value: boolean | undefined, binary: boolean): Effect.Effect<boolean, ReliableConfigError> => {
  if (value === undefined || value === false) return Effect.succeed(false)
  if (value !== true) return fail("lendPayloads", `lendPayloads must be a boolean, got ${JSON.stringify(value)}`)
  return binary
    ? Effect.succeed(true)
    : fail("lendPayloads", "lendPayloads applies to binary payloads (a Schema whose encoded side is Uint8ArrayFromSelf); other payloads are decoded into new values anyway")
}

/** Room a chunk leaves in its frame for the envelope around it (addresses, ids, sequence). */
export const ChunkFrameHeadroom = 4 * 1024

/** Chunks to a remote consumer must fit the transport's frame with room for their envelope. */
export const checkChunkFitsFrame = (
  chunkSize: number | undefined,
  maxFrameSize: number | undefined
): Effect.Effect<void, ReliableConfigError> =>
  chunkSize === undefined || maxFrameSize === undefined || chunkSize + ChunkFrameHeadroom <= maxFrameSize
    ? Effect.void
    : fail("chunkSize", `chunkSize ${chunkSize} leaves no room in the transport's ${maxFrameSize}-byte frames; use at most ${maxFrameSize - ChunkFrameHeadroom}`)

/** The remoting address of the node hosting a flow's peer endpoint (a remoting-only flow). */
export interface PeerAddress {
  readonly host: string
  readonly port: number
}

/** What a system can do, as far as peer addresses care. */
export interface PeerCapabilities {
  /** The transport reaches other processes. */
  readonly remoting: boolean
  /** Peers are resolved through a cluster registry. */
  readonly clustered: boolean
}

/**
 * Checks a peer address option and returns the node it names (`host:port`), or undefined when
 * the option is absent (the peer is local). A peer address needs a remoting transport and
 * excludes cluster mode: a flow follows exactly one resolution authority.
 */
export const checkPeerAddress = (
  option: string,
  value: PeerAddress | undefined,
  system: PeerCapabilities
): Effect.Effect<string | undefined, ReliableEndpointConfigError> => {
  if (value === undefined) return Effect.succeed(undefined)
  if (typeof value !== "object" || value === null || typeof value.host !== "string" || value.host.trim().length === 0) {
    return fail(`${option}.host`, `${option}.host must be a non-blank host name or IP address, got ${JSON.stringify(value?.host)}`)
  }
  if (!Number.isInteger(value.port) || value.port < 1 || value.port > 65535) {
    return fail(`${option}.port`, `${option}.port must be an integer in [1, 65535], got ${value.port}`)
  }
  if (system.clustered) {
    return Effect.fail(new ReliablePeerClusterConflict({
      option,
      message: `${option} cannot be combined with cluster mode: a flow is resolved either through the cluster or at a peer address`
    }))
  }
  if (!system.remoting) {
    return Effect.fail(new ReliablePeerRemotingRequired({
      option,
      message: `${option} needs a remoting transport (Transport.layerSocket); this system's transport stays in one process`
    }))
  }
  return Effect.succeed(formatNode(value.host, value.port))
}
