/**
 * The Config layers: `ReliableSystem.layerConfig` and `Transport.layerSocketConfig` read their
 * options from the ConfigProvider in context; a value Config cannot read is a `ConfigError`, a
 * value read but refused is the layer's own typed error.
 */
import { describe, expect, it } from "@effect/vitest"
import { Config, ConfigProvider, Context, Effect, Layer, Queue, Schedule } from "effect"
import type { ControllerAddress } from "../src/Protocol/Address.js"
import * as ReliableSystem from "../src/ReliableSystem.js"
import * as MemoryTransport from "../src/Transport/MemoryTransport.js"
import * as SocketTransport from "../src/Transport/SocketTransport.js"
import { Transport } from "../src/Transport/Transport.js"

const withEnvironment = (entries: Record<string, string>) => Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(entries))))

describe("ReliableSystem.layerConfig", () => {
  const config = { lookupTimeout: Config.duration("RELIABLE_LOOKUP_TIMEOUT") }
  const build = (entries: Record<string, string>) =>
    Layer.build(ReliableSystem.layerConfig(config).pipe(Layer.provide(Layer.merge(MemoryTransport.layerMemory, withEnvironment(entries)))))

  it.scoped("builds a system from the values read", () =>
    Effect.gen(function*() {
      const system = Context.get(yield* build({ RELIABLE_LOOKUP_TIMEOUT: "200 millis" }), ReliableSystem.ReliableSystem)
      expect(system.node).toBe("memory")
    }))

  it.scoped("a value Config cannot read is a ConfigError; one the system refuses is a ReliableConfigError", () =>
    Effect.gen(function*() {
      expect((yield* Effect.flip(build({})))._tag).toBe("ConfigError")
      expect((yield* Effect.flip(build({ RELIABLE_LOOKUP_TIMEOUT: "soon" })))._tag).toBe("ConfigError")
      expect(yield* Effect.flip(build({ RELIABLE_LOOKUP_TIMEOUT: "0 millis" }))).toMatchObject({ _tag: "ReliableConfigError", option: "lookupTimeout" })
    }))
})

describe("Transport.layerSocketConfig", () => {
  const config = {
    host: Config.string("RELIABLE_HOST"),
    port: Config.integer("RELIABLE_PORT"),
    maxFrameSize: Config.integer("RELIABLE_MAX_FRAME_SIZE").pipe(Config.withDefault(64 * 1024)),
    sharedSecret: Config.redacted("RELIABLE_SECRET"),
    verifyPeerHost: Config.boolean("RELIABLE_VERIFY_PEER_HOST").pipe(Config.withDefault(true))
  }
  const good = { RELIABLE_HOST: "127.0.0.1", RELIABLE_PORT: "0", RELIABLE_SECRET: "a secret of more than sixteen bytes" }
  const build = (entries: Record<string, string>) =>
    Effect.map(
      Layer.build(SocketTransport.layerSocketConfig(config).pipe(Layer.provide(withEnvironment(entries)))),
      (context) => Context.get(context, Transport)
    )

  it.scopedLive("binds the host read, and peers holding the secret read exchange envelopes", () =>
    Effect.gen(function*() {
      const a = yield* build(good)
      const b = yield* build(good)
      expect(a.node.startsWith("127.0.0.1:")).toBe(true)
      const to: ControllerAddress = { node: b.node, endpoint: "config-in", incarnation: "i-1" }
      const inbox = yield* b.open(to)
      a.post([{ from: { node: a.node, endpoint: "config-out", incarnation: "i-1" }, to, message: { _tag: "Ack", sessionId: "s", nonce: "n", confirmedSeq: 1 } }])
      expect((yield* Queue.take(inbox)).message._tag).toBe("Ack")
    }))

  it.scopedLive("the secret read is enforced: a peer without it is refused", () =>
    Effect.gen(function*() {
      const guarded = (yield* build(good)) as SocketTransport.SocketTransportService
      const stranger = yield* SocketTransport.makeSocket({ host: "127.0.0.1", port: 0 })
      const to: ControllerAddress = { node: guarded.node, endpoint: "config-in", incarnation: "i-1" }
      yield* guarded.open(to)
      stranger.post([{ from: { node: stranger.node, endpoint: "x", incarnation: "i-1" }, to, message: { _tag: "Ack", sessionId: "s", nonce: "n", confirmedSeq: 1 } }])
      yield* Effect.sync(() => guarded.stats().handshakesRefused).pipe(
        Effect.repeat({ until: (refused) => refused > 0, schedule: Schedule.spaced("5 millis") }),
        Effect.timeout("10 seconds")
      )
      expect(guarded.stats().delivered).toBe(0)
    }))

  it.scoped("a value Config cannot read is a ConfigError; one the transport refuses is a SocketTransportError", () =>
    Effect.gen(function*() {
      expect((yield* Effect.flip(build({ ...good, RELIABLE_PORT: "http" })))._tag).toBe("ConfigError")
      expect(yield* Effect.flip(build({ ...good, RELIABLE_PORT: "70000" }))).toMatchObject({ _tag: "SocketTransportError", reason: "InvalidOptions" })
      expect((yield* Effect.flip(build({ RELIABLE_HOST: "127.0.0.1", RELIABLE_PORT: "0" })))._tag).toBe("ConfigError")
      expect(yield* Effect.flip(build({ ...good, RELIABLE_SECRET: "short" }))).toMatchObject({
        _tag: "SocketTransportError",
        reason: "InvalidOptions",
        message: expect.stringContaining("sharedSecret")
      })
      expect(yield* Effect.flip(build({ ...good, RELIABLE_MAX_FRAME_SIZE: "10" }))).toMatchObject({
        _tag: "SocketTransportError",
        reason: "InvalidOptions",
        message: expect.stringContaining("maxFrameSize")
      })
    }))

  it.scoped("TLS options read from Config: material that does not load is refused", () =>
    Effect.gen(function*() {
      const tlsConfig = {
        host: Config.string("RELIABLE_HOST"),
        port: Config.integer("RELIABLE_PORT"),
        tls: { certificate: Config.string("TLS_CERTIFICATE"), privateKey: Config.redacted("TLS_KEY"), ca: Config.string("TLS_CA") }
      }
      const error = yield* Effect.flip(Layer.build(SocketTransport.layerSocketConfig(tlsConfig).pipe(
        Layer.provide(withEnvironment({ RELIABLE_HOST: "127.0.0.1", RELIABLE_PORT: "0", TLS_CERTIFICATE: "not a pem", TLS_KEY: "nor this", TLS_CA: "nor that" }))
      )))
      expect(error).toMatchObject({ _tag: "SocketTransportError", reason: "InvalidOptions", message: expect.stringContaining("TLS") })
    }))
})
