/**
 * `npx tsx bench/hostile.ts [words]`: the hostile-peer scenarios (those whose name contains one of the words) of issue 17 at full size against a node
 * with every socket option at its default (`hostileTarget.ts`, a process of its own per
 * scenario), reporting the node's peak RSS above its resting RSS, its RSS once the scenario is
 * over, and what its counters saw.
 * Attackers connect from other loopback addresses (127.0.0.2...), as strangers would. Linux only
 * (reads /proc).
 */
import { Deferred, Duration, Effect, Either, FiberId, Schedule } from "effect"
import type { Scope } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Readline from "node:readline"
import { fileURLToPath } from "node:url"
import { systemAddress } from "../src/internal/NodeLookup.js"
import type { Envelope } from "../src/Protocol/WireMessage.js"
import { encodeMessage } from "../src/Transport/internal/HandshakeProtocol.js"
import * as SocketTransport from "../src/Transport/SocketTransport.js"
import { lengthPrefix, rawClient, rawPeer } from "../test/support/RawPeer.js"
import type { RawClient } from "../test/support/RawPeer.js"

const fromSources = import.meta.url.endsWith(".ts")
const targetScript = fileURLToPath(new URL(fromSources ? "./hostileTarget.ts" : "./hostileTarget.js", import.meta.url))
const MiB = 1024 * 1024
const range = (count: number) => Array.from({ length: count }, (_, index) => index)

interface Target {
  readonly pid: number
  readonly port: number
  readonly stats: Effect.Effect<Record<string, number>>
}

/** The node under attack, killed with the scope. */
const startTarget: Effect.Effect<Target, Error, Scope.Scope> = Effect.gen(function*() {
  const child = yield* Effect.acquireRelease(
    Effect.sync(() => ChildProcess.spawn(process.execPath, [...(fromSources ? ["--import", "tsx"] : []), targetScript], { stdio: ["pipe", "pipe", "inherit"] })),
    (child) => Effect.sync(() => void child.kill("SIGKILL"))
  )
  const listening = yield* Deferred.make<number, Error>()
  let pendingStats: Deferred.Deferred<Record<string, number>> | undefined
  child.on("exit", (code) => Deferred.unsafeDone(listening, Effect.fail(new Error(`target exited (${code})`))))
  Readline.createInterface({ input: child.stdout! }).on("line", (line) => {
    if (line.startsWith("LISTENING ")) Deferred.unsafeDone(listening, Effect.succeed(Number(line.slice(10))))
    if (line.startsWith("STATS ") && pendingStats !== undefined) Deferred.unsafeDone(pendingStats, Effect.succeed(JSON.parse(line.slice(6))))
  })
  const port = yield* Deferred.await(listening)
  return {
    pid: child.pid!,
    port,
    stats: Effect.suspend(() => {
      const answer = Deferred.unsafeMake<Record<string, number>>(FiberId.none)
      pendingStats = answer
      child.stdin!.write("STATS\n")
      return Deferred.await(answer)
    })
  }
})

/** VmRSS and VmHWM (peak) of a process, in MiB; its CPU time so far, in seconds. */
const memory = (pid: number) => {
  const status = Fs.readFileSync(`/proc/${pid}/status`, "utf8")
  const field = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN) / 1024
  return { rss: field("VmRSS"), peak: field("VmHWM") }
}
const cpuSeconds = (pid: number) => {
  const fields = Fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ")
  return (Number(fields[11]) + Number(fields[12])) / 100
}

const waitFor = (condition: () => boolean, timeout: Duration.DurationInput) =>
  Effect.sync(condition).pipe(
    Effect.repeat({ until: (holds) => holds, schedule: Schedule.spaced(Duration.millis(50)) }),
    Effect.timeout(timeout),
    Effect.either,
    Effect.map(Either.isRight)
  )

const frame = (envelope: Envelope): Buffer => Buffer.from(Either.getOrThrow(SocketTransport.encodeEnvelope(envelope)))
const lookup = (fromNode: string, toNode: string, requestId: string): Buffer =>
  frame({ from: systemAddress(fromNode), to: systemAddress(toNode), message: { _tag: "Lookup", requestId, name: "orders-in" } })

const closedAfter = (clients: ReadonlyArray<RawClient>, started: number, timeout: Duration.DurationInput) =>
  Effect.map(waitFor(() => clients.every((client) => client.closed()), timeout), (all) =>
    all ? `all closed after ${((Date.now() - started) / 1000).toFixed(1)} s` : `${clients.filter((client) => client.closed()).length} of ${clients.length} closed`)

interface Scenario {
  readonly name: string
  readonly run: (target: Target) => Effect.Effect<string, Error, Scope.Scope>
}

const scenarios: ReadonlyArray<Scenario> = [
  {
    name: "64 connections each announce a 16 MiB frame and send all but its last byte",
    run: (target) =>
      Effect.gen(function*() {
        const attackers = yield* Effect.forEach(range(64), (index) => rawPeer(target.port, `127.0.0.2:${1000 + index}`, "127.0.0.2"))
        const allButLast = Buffer.alloc(16 * MiB - 1, 7)
        const started = Date.now()
        for (const attacker of attackers) {
          attacker.socket.write(lengthPrefix(16 * MiB))
          attacker.socket.write(allButLast)
        }
        const closed = yield* closedAfter(attackers, started, Duration.seconds(40))
        const stats = yield* target.stats
        return `${closed}: ${stats.droppedInboundOverflow} over inboundBufferBytes, ${stats.timedOut} by readTimeout; ` +
          `peak held ${(stats.peakInboundBufferedBytes / MiB).toFixed(1)} MiB`
      })
  },
  {
    name: "2,000 lookups in spoofed node names, 40 with a 4 MiB request id, 20,000 whose answers are never read",
    run: (target) =>
      Effect.gen(function*() {
        const self = "127.0.0.2:7"
        const node = `127.0.0.1:${target.port}`
        const attacker = yield* rawPeer(target.port, self, "127.0.0.2")
        attacker.socket.pause()
        attacker.socket.write(Buffer.concat(range(2000).map((index) => lookup(`spoof-${index}.example:${1024 + index}`, node, `r-${index}`))))
        const oversized = lookup(self, node, "x".repeat(4 * MiB))
        for (let index = 0; index < 40; index++) attacker.socket.write(oversized)
        const id = "i".repeat(200)
        attacker.socket.write(Buffer.concat(range(20_000).map((index) => lookup(self, node, `${id}-${index}`))))
        yield* Effect.sleep(Duration.seconds(2))
        const cpuBefore = cpuSeconds(target.pid)
        yield* Effect.sleep(Duration.seconds(10))
        const stats = yield* target.stats
        return `${stats.droppedSpoofed} spoofed dropped, ${stats.malformed} malformed, ${stats.served} served, ` +
          `${stats.droppedOverflow} answers dropped at replyBufferBytes, ${stats.knownPeers} peers known, ` +
          `${stats.connectionsOpened} connections dialed; CPU ${(cpuSeconds(target.pid) - cpuBefore).toFixed(2)} s in the 10 s after`
      })
  },
  {
    name: "500 idle connections (50 from each of 10 addresses) and 50 slow drips (1 byte/s of a frame)",
    run: (target) =>
      Effect.gen(function*() {
        const idle = yield* Effect.forEach(range(500), (index) => {
          const from = `127.0.0.${2 + (index % 10)}`
          return rawPeer(target.port, `${from}:${1000 + index}`, from)
        })
        const drips = yield* Effect.forEach(range(50), () => rawClient(target.port, "127.0.0.20"))
        const started = Date.now()
        const hello = encodeMessage({ _tag: "Hello", node: "127.0.0.20:9", auth: "none" }, true)
        const body = Buffer.concat([lengthPrefix(1000), Buffer.alloc(1000)])
        drips.forEach((drip) => drip.socket.write(hello))
        yield* Effect.forkScoped(Effect.forEach(range(1000), (index) =>
          Effect.zipRight(Effect.sleep(Duration.seconds(1)), Effect.sync(() => drips.forEach((drip) => drip.closed() || drip.socket.write(body.subarray(index, index + 1)))))))
        const dripsClosed = yield* closedAfter(drips, started, Duration.seconds(40))
        const idleClosed = yield* closedAfter(idle, started, Duration.seconds(90))
        const stats = yield* target.stats
        return `after the last connected: drips ${dripsClosed}, idle ${idleClosed}; ${stats.connectionsRefused} refused at maxConnections, ` +
          `${stats.timedOut} timed out, ${stats.idleClosed} closed idle`
      })
  },
  {
    name: "a flood of 2,000 connections from 40 addresses",
    run: (target) =>
      Effect.gen(function*() {
        const flood = yield* Effect.forEach(range(2000), (index) => rawClient(target.port, `127.0.1.${1 + (index % 40)}`))
        const started = Date.now()
        const closed = yield* closedAfter(flood, started, Duration.seconds(20))
        const stats = yield* target.stats
        return `${stats.connectionsRefused} refused at accept, the rest ${closed} (handshake timeout: ${stats.handshakesRefused})`
      })
  },
  {
    name: "garbage: 100 connections of random bytes, a 0xFFFFFFFF length, a truncated frame, 20,001 invalid frames",
    run: (target) =>
      Effect.gen(function*() {
        let state = 17017
        const garbage = Buffer.from(range(64 * 1024).map(() => (state = (state * 1103515245 + 12345) & 0x7fffffff) & 0xff))
        const noise = yield* Effect.forEach(range(100), () => rawClient(target.port, "127.0.0.2"))
        noise.forEach((client) => client.socket.write(garbage))
        const huge = yield* rawPeer(target.port, "127.0.0.3:7", "127.0.0.3")
        huge.socket.write(Buffer.from([0xff, 0xff, 0xff, 0xff, 1, 2, 3]))
        const truncated = yield* rawPeer(target.port, "127.0.0.3:8", "127.0.0.3")
        truncated.socket.end(Buffer.concat([lengthPrefix(1000), Buffer.alloc(500)]))
        const invalid = yield* rawPeer(target.port, "127.0.0.3:9", "127.0.0.3")
        const body = Buffer.from("not an envelope")
        invalid.socket.write(Buffer.concat(range(20_001).map(() => Buffer.concat([lengthPrefix(body.length), body]))))
        yield* waitFor(() => noise.every((client) => client.closed()) && huge.closed(), Duration.seconds(10))
        yield* Effect.sleep(Duration.seconds(2))
        const stats = yield* target.stats
        return `${stats.connectionsRefused} refused at accept (maxConnectionsPerAddress), ${stats.handshakesRefused} at the handshake, ` +
          `${stats.connectionsRejected} closed for bad framing, ` +
          `${stats.malformed} malformed dropped, invalid-frame connection ${invalid.closed() ? "closed" : "still open"}`
      })
  }
]

const program = Effect.gen(function*() {
  console.log("| scenario | resting RSS MiB | peak RSS MiB | peak above resting | RSS at the end MiB | outcome |")
  console.log("|---|---|---|---|---|---|")
  const wanted = process.argv.slice(2)
  for (const scenario of scenarios.filter(({ name }) => wanted.length === 0 || wanted.some((word) => name.includes(word)))) {
    const row = yield* Effect.scoped(Effect.gen(function*() {
      const target = yield* startTarget
      yield* Effect.sleep(Duration.seconds(1))
      const before = memory(target.pid)
      const outcome = yield* Effect.scoped(scenario.run(target))
      const after = memory(target.pid)
      return `| ${scenario.name} | ${before.rss.toFixed(0)} | ${after.peak.toFixed(0)} | ${(after.peak - before.rss).toFixed(0)} | ` +
        `${after.rss.toFixed(0)} | ${outcome} |`
    }))
    console.log(row)
  }
})

Effect.runPromise(program).catch((error) => {
  console.error(error)
  process.exit(1)
})
