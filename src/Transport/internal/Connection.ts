/**
 * One socket of the TCP transport (plain or TLS) from its handshake to its close. While the
 * handshake runs, what arrives is read as handshake messages; `serve` then hands every later
 * chunk, starting with whatever followed the last message, to a frame handler. The socket is
 * destroyed, never drained, when the connection's scope closes: a peer that has stopped reading
 * must not keep it open.
 */
import { Data, Deferred, Duration, Effect, Either, FiberId } from "effect"
import type { Scope } from "effect"
import type * as Net from "node:net"
import { encodeMessage, HandshakeReader } from "./HandshakeProtocol.js"
import type { HandshakeMessage } from "./HandshakeProtocol.js"

/** The handshake did not complete; `reason` says why, in words for a log line. */
export class HandshakeFailure extends Data.TaggedError("HandshakeFailure")<{ readonly reason: string }> {}

/** A write did not reach the kernel (the socket broke or was closed). */
export class WriteFailure extends Data.TaggedError("WriteFailure")<{ readonly cause: unknown }> {}

const noop = () => {}

/** How long a refused peer gets to read the refusal before its socket is destroyed. */
const RefusalGrace = Duration.seconds(1)

export class Connection {
  private readonly reader = new HandshakeReader()
  private onChunk: ((chunk: Buffer) => void) | undefined
  private wake: (() => void) | undefined
  private isClosed = false
  /** Completes when the socket has closed. */
  readonly closed: Deferred.Deferred<void> = Deferred.unsafeMake<void>(FiberId.none)

  private constructor(readonly socket: Net.Socket) {
    // Errors surface as 'close'; this listener keeps them from being thrown.
    socket.on("error", noop)
    socket.on("data", (chunk: Buffer) => {
      if (this.onChunk !== undefined) return this.onChunk(chunk)
      this.reader.push(chunk)
      this.wake?.()
    })
    socket.once("close", () => {
      this.isClosed = true
      this.wake?.()
      Deferred.unsafeDone(this.closed, Effect.void)
    })
  }

  /** Takes over `socket` for the life of the scope. */
  static make(socket: Net.Socket): Effect.Effect<Connection, never, Scope.Scope> {
    return Effect.acquireRelease(
      Effect.sync(() => new Connection(socket)),
      (connection) => Effect.sync(() => connection.socket.destroy())
    )
  }

  /** The next handshake message; fails on a violation or when the socket closes first. */
  receive(): Effect.Effect<HandshakeMessage, HandshakeFailure> {
    return Effect.async<HandshakeMessage, HandshakeFailure>((resume) => {
      const attempt = (): boolean => {
        const result = this.reader.next()
        if (Either.isLeft(result)) {
          resume(Effect.fail(new HandshakeFailure({ reason: result.left })))
          return true
        }
        if (result.right !== undefined) {
          resume(Effect.succeed(result.right))
          return true
        }
        if (this.isClosed) {
          resume(Effect.fail(new HandshakeFailure({ reason: "the peer closed the connection during the handshake (it may require TLS or a shared secret, or have refused this node)" })))
          return true
        }
        return false
      }
      if (attempt()) return
      this.wake = () => {
        if (attempt()) this.wake = undefined
      }
      return Effect.sync(() => void (this.wake = undefined))
    })
  }

  /** Sends one handshake message (the first one of a side with the preamble). */
  send(message: HandshakeMessage, withPreamble = false): void {
    this.socket.write(encodeMessage(message, withPreamble))
  }

  /**
   * Ends the handshake, after sending this side's last message if it has one: from now on every
   * chunk goes to `onChunk`. One synchronous step, so no frame the peer sends in answer can reach
   * the handshake reader.
   */
  serve(onChunk: (chunk: Buffer) => void, last?: { readonly message: HandshakeMessage; readonly withPreamble: boolean }): void {
    if (last !== undefined) this.send(last.message, last.withPreamble)
    this.onChunk = onChunk
    const rest = this.reader.rest()
    if (rest.length > 0) onChunk(rest)
  }

  /** Writes `bytes`; completes once they reached the kernel. */
  write(bytes: Uint8Array): Effect.Effect<void, WriteFailure> {
    return Effect.async<void, WriteFailure>((resume) => {
      this.socket.write(bytes, (cause) => resume(cause ? Effect.fail(new WriteFailure({ cause })) : Effect.void))
    })
  }

  /**
   * Sends a refusal and gives the peer a moment to read it and hang up, so its log can say why;
   * the caller's scope then destroys the socket.
   */
  refuse(reason: string, withPreamble: boolean): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (!this.isClosed) this.socket.end(encodeMessage({ _tag: "Refused", reason: reason.slice(0, 500) }, withPreamble))
      return Effect.ignore(Effect.timeout(Deferred.await(this.closed), RefusalGrace))
    })
  }

  destroy(): void {
    this.socket.destroy()
  }
}
