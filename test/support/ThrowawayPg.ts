/**
 * A PostgreSQL cluster of the test's own (initdb into a temp directory, a free port on
 * 127.0.0.1, trust auth), for the tests that must stop or restart a real server: the shared
 * server at 127.0.0.1:5432 is never stopped by a test. Removed with the scope.
 *
 * Run as root (as CI does), the cluster belongs to the `postgres` user: initdb refuses root.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"

export interface ThrowawayPg {
  readonly url: string
  readonly port: number
  /** `pg_ctl restart -m immediate`: every connection dies, the server crash-recovers and comes back. */
  readonly restartImmediate: Effect.Effect<void, Error>
  readonly stopImmediate: Effect.Effect<void, Error>
  readonly start: Effect.Effect<void, Error>
}

const binDirectory = (): string | undefined => {
  const candidates = [process.env.RELIABLE_PG_BIN, "/usr/local/bin"]
  if (Fs.existsSync("/usr/lib/postgresql")) {
    for (const version of Fs.readdirSync("/usr/lib/postgresql").sort().reverse()) {
      candidates.push(`/usr/lib/postgresql/${version}/bin`)
    }
  }
  return candidates.find((dir) => dir !== undefined && Fs.existsSync(Path.join(dir, "initdb")) && Fs.existsSync(Path.join(dir, "pg_ctl")))
}

/** Why no throwaway cluster can be made here, or undefined when one can. */
export const unavailable = (): string | undefined => binDirectory() === undefined ? "initdb and pg_ctl not found" : undefined

const freePort = (): Effect.Effect<number, Error> =>
  Effect.async((resume) => {
    const server = Net.createServer()
    server.once("error", (error) => resume(Effect.fail(error)))
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as Net.AddressInfo).port
      server.close(() => resume(Effect.succeed(port)))
    })
  })

const asRoot = typeof process.getuid === "function" && process.getuid() === 0

const run = (command: string, args: ReadonlyArray<string>): Effect.Effect<void, Error> =>
  Effect.async((resume) => {
    const [file, argv] = asRoot ? ["runuser", ["-u", "postgres", "--", command, ...args]] : [command, [...args]]
    ChildProcess.execFile(file, argv, { timeout: 60_000 }, (error, _stdout, stderr) =>
      resume(error ? Effect.fail(new Error(`${Path.basename(command)} ${args[0]}: ${error.message} ${stderr}`)) : Effect.void))
  })

export const make: Effect.Effect<ThrowawayPg, Error, Scope.Scope> = Effect.gen(function*() {
  const bin = binDirectory()
  if (bin === undefined) return yield* Effect.fail(new Error("initdb and pg_ctl not found"))
  const port = yield* freePort()
  const directory = yield* Effect.acquireRelease(
    Effect.sync(() => {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "reliable-pg-"))
      if (asRoot) ChildProcess.execFileSync("chown", ["postgres", dir])
      return dir
    }),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  const data = Path.join(directory, "data")
  const pgCtl = Path.join(bin, "pg_ctl")
  yield* run(Path.join(bin, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
  const options = `-p ${port} -k ${directory} -c listen_addresses=127.0.0.1 -c fsync=off`
  // The server's output goes to a log file: a server holding the pipe of `execFile` open would
  // keep the call waiting until its timeout.
  const log = Path.join(directory, "log")
  const start = run(pgCtl, ["start", "-D", data, "-w", "-t", "60", "-l", log, "-o", options])
  const stopImmediate = run(pgCtl, ["stop", "-D", data, "-w", "-m", "immediate"])
  yield* Effect.acquireRelease(start, () => Effect.ignore(stopImmediate))
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    start,
    stopImmediate,
    restartImmediate: run(pgCtl, ["restart", "-D", data, "-w", "-t", "60", "-m", "immediate", "-l", log, "-o", options])
  }
})
