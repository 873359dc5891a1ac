/**
 * Who a peer is. With TLS its certificate says so: it must chain to the configured CA, name the
 * host of the node the peer announces, and, when an allow list is set, carry one of its names.
 * Without TLS the announced node name is taken at its word, except that its host must resolve to
 * the address the connection comes from (unless that check is turned off), so a peer cannot
 * speak for another host's node.
 */
import { Effect, Either, Redacted } from "effect"
import * as Dns from "node:dns"
import * as Net from "node:net"
import * as Tls from "node:tls"

/** Mutual TLS: every connection runs TLS 1.3 and both ends present a certificate. */
export interface SocketTlsOptions {
  /**
   * This node's certificate (PEM; intermediates may follow it). It must name the host of this
   * node's name (`advertisedHost` or `host`) as a DNS or IP subject alternative name: peers check
   * it when they dial this node and when this node dials them.
   */
  readonly certificate: string | Uint8Array
  /** The certificate's private key (PEM). */
  readonly privateKey: string | Uint8Array | Redacted.Redacted<string>
  /** The CA certificate(s) (PEM) a peer's certificate must chain to. */
  readonly ca: string | Uint8Array | ReadonlyArray<string | Uint8Array>
  /**
   * When set, a peer is accepted only if its certificate carries one of these names (subject
   * common name, DNS or IP subject alternative name).
   */
  readonly allowedNames?: ReadonlyArray<string>
}

/** TLS credentials loaded once, for dialing and for accepting. */
export interface TlsMaterial {
  readonly clientContext: Tls.SecureContext
  readonly serverOptions: Tls.TlsOptions
  readonly allowedNames: ReadonlySet<string> | undefined
}

const pem = (value: string | Uint8Array): string | Buffer => typeof value === "string" ? value : Buffer.from(value)

/** Loads the credentials; `Left` says why they cannot be used. */
export const loadTls = (options: SocketTlsOptions): Either.Either<TlsMaterial, string> => {
  try {
    const key = Redacted.isRedacted(options.privateKey) ? Redacted.value(options.privateKey) : pem(options.privateKey)
    const ca = Array.isArray(options.ca) ? options.ca.map(pem) : pem(options.ca as string | Uint8Array)
    const material = { cert: pem(options.certificate), key, ca, minVersion: "TLSv1.3" as const }
    return Either.right({
      clientContext: Tls.createSecureContext(material),
      // Peers without a trusted certificate finish the TLS handshake and are then refused by
      // this node with a reason both sides log (a TLS-level rejection would be silent here).
      serverOptions: { ...material, requestCert: true, rejectUnauthorized: false },
      allowedNames: options.allowedNames === undefined ? undefined : new Set(options.allowedNames)
    })
  } catch (error) {
    return Either.left(`cannot load the TLS credentials: ${error instanceof Error ? error.message : String(error)}`)
  }
}

/** The names a certificate carries: its subject common name(s), DNS and IP alternative names. */
export const certificateNames = (certificate: Tls.PeerCertificate): ReadonlyArray<string> => {
  const names: Array<string> = []
  const commonName: unknown = certificate.subject?.CN
  if (typeof commonName === "string") names.push(commonName)
  else if (Array.isArray(commonName)) names.push(...commonName.filter((name): name is string => typeof name === "string"))
  for (const entry of (certificate.subjectaltname ?? "").split(", ")) {
    if (entry.startsWith("DNS:")) names.push(entry.slice(4))
    else if (entry.startsWith("IP Address:")) names.push(entry.slice(11))
  }
  return names
}

/** Why a TLS peer is refused once its TLS handshake is done, or `undefined`. */
export const checkCertificate = (socket: Tls.TLSSocket, allowedNames: ReadonlySet<string> | undefined): string | undefined => {
  if (!socket.authorized) {
    const why = socket.authorizationError === undefined ? "none presented" : String(socket.authorizationError)
    return `its certificate is not signed by this node's CA (${why})`
  }
  if (allowedNames === undefined) return undefined
  const names = certificateNames(socket.getPeerCertificate())
  return names.some((name) => allowedNames.has(name)) ? undefined : `its certificate names ${names.join(", ")}, none of them in allowedNames`
}

/** Why a TLS peer may not speak for `node` (host `host`): its certificate does not name that host. */
export const checkCertificateHost = (socket: Tls.TLSSocket, node: string, host: string): string | undefined => {
  const error = Tls.checkServerIdentity(host, socket.getPeerCertificate())
  return error === undefined ? undefined : `its certificate does not name the host of node ${node} (${error.message})`
}

/** A failed TLS handshake in words for a log line, from the side that saw it fail. */
export const describeTlsError = (error: Error & { readonly code?: string; readonly reason?: string }, side: "dialer" | "listener"): string => {
  const code = error.code ?? ""
  if (side === "listener" && /WRONG_VERSION_NUMBER|HTTP_REQUEST|UNKNOWN_PROTOCOL|PACKET_LENGTH_TOO_LONG|RECORD_LENGTH_MISMATCH/.test(code)) {
    return "it does not speak TLS and this node requires TLS"
  }
  if (code === "ECONNRESET") {
    return side === "listener"
      ? "it hung up during the TLS handshake (it may not trust this node's certificate)"
      : "TLS handshake failed: the peer hung up (does it run without TLS?)"
  }
  const detail = error.reason ?? error.message.split("\n")[0]
  return `TLS handshake failed: ${detail}${side === "dialer" ? " (does the peer trust another CA, or run without TLS?)" : ""}`
}

const unmapped = (address: string): string => address.startsWith("::ffff:") ? address.slice(7) : address

/** Why a plain peer may not speak for `node` (host `host`): the host does not resolve to where it connects from. */
export const checkHostAddress = (node: string, host: string, remoteAddress: string | undefined): Effect.Effect<string | undefined> => {
  const from = unmapped(remoteAddress ?? "")
  const mismatch = `it announced node ${node}, whose host does not resolve to ${from}, the address it connects from`
  if (Net.isIP(host) !== 0) return Effect.succeed(unmapped(host) === from ? undefined : mismatch)
  return Effect.tryPromise(() => Dns.promises.lookup(host, { all: true })).pipe(
    Effect.map((addresses) => addresses.some((entry) => unmapped(entry.address) === from) ? undefined : mismatch),
    Effect.orElseSucceed(() => `it announced node ${node}, whose host does not resolve`)
  )
}
