/**
 * Test support for cross-process tests: child nodes (`test/fixtures/RemoteNode.ts` under tsx)
 * with a line protocol on stdio, killed with the test's scope, and the delivery logs they write.
 */
import { Deferred, Duration, Effect, Queue } from "effect"
import type { Scope } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as Readline from "node:readline"
import { fileURLToPath } from "node:url"
import type { Received } from "./Delivery.js"

const fixture = fileURLToPath(new URL("../fixtures/RemoteNode.ts", import.meta.url))

export interface ChildNode {
  readonly port: number
  readonly process: ChildProcess.ChildProcess
  /** Writes one command line to the child's stdin. */
  readonly send: (line: string) => void
  /** The next stdout line starting with `prefix` (the prefix removed). */
  readonly next: (prefix: string, timeout?: Duration.DurationInput) => Effect.Effect<string, Error>
  readonly kill: (signal: NodeJS.Signals) => Effect.Effect<void>
  /** The child's `STATS` answer. */
  readonly stats: Effect.Effect<Record<string, number>, Error>
}

/** Starts one node (`script`: a fixture path, default RemoteNode); SIGKILLed when the scope closes, if still alive, and waited for. */
export const spawnNode = (env: Record<string, string>, script: string = fixture): Effect.Effect<ChildNode, Error, Scope.Scope> =>
  Effect.gen(function*() {
    const lines = yield* Queue.unbounded<string>()
    const exited = yield* Deferred.make<number | null>()
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        ChildProcess.spawn(process.execPath, ["--import", "tsx", script], {
          env: { ...process.env, ...env },
          stdio: ["pipe", "pipe", "inherit"]
        })
      ),
      // Waits for the exit (bounded), so what the test tears down after (its tables) is not
      // still in use by the child.
      (child) =>
        child.exitCode !== null || child.signalCode !== null
          ? Effect.void
          : Effect.zipRight(Effect.sync(() => child.kill("SIGKILL")), Effect.ignore(Effect.timeout(Deferred.await(exited), Duration.seconds(5))))
    )
    child.on("exit", (code) => Deferred.unsafeDone(exited, Effect.succeed(code)))
    Readline.createInterface({ input: child.stdout! }).on("line", (line) => lines.unsafeOffer(line))
    child.stdin!.on("error", () => {})

    const next = (prefix: string, timeout: Duration.DurationInput = Duration.seconds(30)): Effect.Effect<string, Error> =>
      Effect.gen(function*() {
        while (true) {
          const line = yield* Queue.take(lines)
          if (line.startsWith(prefix)) return line.slice(prefix.length).trim()
        }
      }).pipe(
        Effect.raceFirst(Effect.flatMap(Deferred.await(exited), (code) => Effect.fail(new Error(`node exited (${code}) before printing ${prefix}`)))),
        Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`no "${prefix}" line from node within ${Duration.format(Duration.decode(timeout))}`) })
      )

    const port = Number(yield* next("LISTENING"))
    return {
      port,
      process: child,
      send: (line) => void child.stdin!.write(`${line}\n`),
      next,
      kill: (signal) =>
        Effect.suspend(() => {
          if (child.exitCode !== null || child.signalCode !== null) return Effect.void
          child.kill(signal)
          return signal === "SIGKILL" || signal === "SIGTERM" ? Effect.asVoid(Deferred.await(exited)) : Effect.void
        }),
      stats: Effect.suspend(() => {
        child.stdin!.write("STATS\n")
        return Effect.map(next("STATS", Duration.seconds(10)), (json) => JSON.parse(json) as Record<string, number>)
      })
    }
  })

/** A fresh directory for delivery logs, removed with the scope. */
export const tempDir = Effect.acquireRelease(
  Effect.sync(() => Fs.mkdtempSync(Path.join(process.env.TMPDIR ?? "/tmp", "effect-reliable-"))),
  (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
)

/** Every complete line of a consumer's delivery log (a torn last line after SIGKILL is ignored). */
export const readLog = (file: string, incarnation: number): Array<Received> => {
  if (!Fs.existsSync(file)) return []
  const text = Fs.readFileSync(file, "utf8")
  const end = text.lastIndexOf("\n")
  if (end < 0) return []
  return text.slice(0, end).split("\n").map((line) => ({ incarnation, index: Number(line) }))
}

/** Lines in a log so far (cheap: counts newlines). */
export const countLines = (file: string): number => {
  if (!Fs.existsSync(file)) return 0
  const bytes = Fs.readFileSync(file)
  let count = 0
  for (let index = 0; index < bytes.length; index++) if (bytes[index] === 10) count++
  return count
}
