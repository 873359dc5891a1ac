/**
 * Throwaway certificates for TLS tests and benchmarks, made with the `openssl` binary in a
 * directory the caller owns (no private key is ever committed): a CA, and node certificates it
 * signs for given names.
 */
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"

export interface NodeCertificate {
  /** PEM strings, and the files they were written to. */
  readonly certificate: string
  readonly privateKey: string
  readonly certificateFile: string
  readonly privateKeyFile: string
}

export interface TestCa {
  readonly ca: string
  readonly caFile: string
  /**
   * A certificate for common name `name`, with these subject alternative names (`IP:127.0.0.1`,
   * `DNS:node-a`...), usable by a server and a client.
   */
  readonly issue: (name: string, altNames: ReadonlyArray<string>) => NodeCertificate
}

const openssl = (dir: string, args: ReadonlyArray<string>) =>
  ChildProcess.execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] })

const newKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]

/** A fresh CA named `name` in `dir` (which must exist). */
export const makeCa = (dir: string, name: string): TestCa => {
  const caFile = Path.join(dir, `${name}.pem`)
  const caKey = Path.join(dir, `${name}-key.pem`)
  openssl(dir, ["req", "-x509", ...newKey, "-keyout", caKey, "-out", caFile, "-days", "2", "-subj", `/CN=${name}`])
  return {
    ca: Fs.readFileSync(caFile, "utf8"),
    caFile,
    issue: (node, altNames) => {
      const base = Path.join(dir, `${name}-${node}`)
      const extensions = `${base}.ext`
      Fs.writeFileSync(
        extensions,
        `${altNames.length === 0 ? "" : `subjectAltName=${altNames.join(",")}\n`}extendedKeyUsage=serverAuth,clientAuth\n`
      )
      openssl(dir, ["req", ...newKey, "-keyout", `${base}-key.pem`, "-out", `${base}.csr`, "-subj", `/CN=${node}`])
      openssl(dir, [
        "x509", "-req", "-in", `${base}.csr`, "-CA", caFile, "-CAkey", caKey, "-CAcreateserial",
        "-out", `${base}.pem`, "-days", "2", "-extfile", extensions
      ])
      return {
        certificate: Fs.readFileSync(`${base}.pem`, "utf8"),
        privateKey: Fs.readFileSync(`${base}-key.pem`, "utf8"),
        certificateFile: `${base}.pem`,
        privateKeyFile: `${base}-key.pem`
      }
    }
  }
}
