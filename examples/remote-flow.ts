/**
 * A remoting-only flow between two processes (`npx tsx examples/remote-flow.ts`).
 *
 * Run without arguments, this file is the operator: it starts a producer node and a consumer
 * node as child processes on 127.0.0.1, kills the consumer process with SIGKILL in the middle of
 * the flow, starts it again on the same address, and reports what the consumer processed. Each
 * node names its peer by `host:port` (`remoteConsumer` / `remoteProducer`) over a TCP transport
 * (`Transport.layerSocket`); nothing else connects them.
 *
 * What to expect: every order arrives, in order; the few orders the first consumer had not
 * confirmed when it died arrive again at its successor, so the handler must be idempotent.
 */
import { Console, Effect, Layer, Schema } from "effect"
import * as ChildProcess from "node:child_process"
import * as Net from "node:net"
import * as Readline from "node:readline"
import { fileURLToPath } from "node:url"
import { Consumer, Producer, ReliableSystem, Transport } from "effect-reliable"

const OrderCreated = Schema.Struct({ orderId: Schema.Number, customer: Schema.String })
const orders = 5_000
const host = "127.0.0.1"

// ---- the two nodes ----

/** A node: one reliable system on a TCP transport bound to `host:port`. */
const node = (port: number) => ReliableSystem.layer().pipe(Layer.provideMerge(Transport.layerSocket({ host, port })))

const producerNode = (port: number, consumerPort: number) =>
  Effect.gen(function*() {
    const publisher = yield* Producer.make({
      name: "order-publisher",
      consumer: "order-processor",
      payload: OrderCreated,
      remoteConsumer: { host, port: consumerPort }
    })
    for (let orderId = 1; orderId <= orders; orderId++) {
      // `send` waits for demand: while the consumer process is down, this simply waits.
      yield* publisher.send({ orderId, customer: `customer-${orderId % 97}` }, { messageId: `order-${orderId}` })
      if (orderId % 20 === 0) yield* Effect.sleep("1 millis") // a steady trickle, so the kill lands mid-flow
    }
    yield* Console.log(`[producer] all ${orders} orders sent`)
    return yield* Effect.never
  }).pipe(Effect.scoped, Effect.provide(node(port)))

const consumerNode = (port: number, producerPort: number) =>
  Effect.gen(function*() {
    const processor = yield* Consumer.make({
      name: "order-processor",
      producer: "order-publisher",
      payload: OrderCreated,
      window: 50,
      resendInterval: "200 millis",
      remoteProducer: { host, port: producerPort }
    })
    // The "business effect" is a line the operator reads. Confirm only once it has really left
    // this process (the write callback): a SIGKILL loses whatever stdout still buffers, and a
    // confirmed order must never be lost. A real handler commits `messageId` with its effect.
    return yield* processor.run((delivery) =>
      Effect.async<void>((resume) => {
        process.stdout.write(`processed ${delivery.payload.orderId}\n`, () => resume(Effect.void))
      })
    )
  }).pipe(Effect.scoped, Effect.provide(node(port)))

// ---- the operator ----

/** A free port on 127.0.0.1 (bound and released: good enough for an example). */
const freePort = Effect.async<number>((resume) => {
  const server = Net.createServer()
  server.listen(0, host, () => {
    const port = (server.address() as Net.AddressInfo).port
    server.close(() => resume(Effect.succeed(port)))
  })
})

const self = fileURLToPath(import.meta.url)

/** Starts this file as a node process; `onLine` sees each line it prints. */
const spawn = (args: ReadonlyArray<string>, onLine: (line: string) => void) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      // process.execArgv carries tsx's loader flags, so the child runs this TypeScript file too.
      const child = ChildProcess.spawn(process.execPath, [...process.execArgv, self, ...args], { stdio: ["ignore", "pipe", "inherit"] })
      Readline.createInterface({ input: child.stdout! }).on("line", onLine)
      return child
    }),
    (child) => Effect.sync(() => void child.kill("SIGKILL"))
  )

const operator = Effect.gen(function*() {
  const producerPort = yield* freePort
  const consumerPort = yield* freePort
  const processedBy: Array<Array<number>> = [[], []]
  let allDone: () => void = () => {}
  const done = new Promise<void>((resolve) => void (allDone = resolve))
  const record = (incarnation: number) => (line: string) => {
    if (!line.startsWith("processed ")) return void console.log(line)
    processedBy[incarnation].push(Number(line.slice(10)))
    if (new Set(processedBy.flat()).size === orders) allDone()
  }

  yield* Console.log(`producer node on ${host}:${producerPort}, consumer node on ${host}:${consumerPort}`)
  const started = Date.now()
  yield* spawn(["producer", String(producerPort), String(consumerPort)], (line) => console.log(line))
  const first = yield* spawn(["consumer", String(consumerPort), String(producerPort)], record(0))

  yield* Effect.promise(() => new Promise<void>((resolve) => {
    const check = setInterval(() => processedBy[0].length >= orders / 3 && (clearInterval(check), resolve()), 5)
  }))
  first.kill("SIGKILL")
  yield* Console.log(`killed the consumer process (SIGKILL) mid-flow`)
  yield* spawn(["consumer", String(consumerPort), String(producerPort)], record(1))
  yield* Console.log("started a new consumer process on the same address")

  yield* Effect.promise(() => done).pipe(Effect.timeoutFail({ duration: "60 seconds", onTimeout: () => new Error("not every order arrived within 60s") }))
  const elapsed = Date.now() - started
  const [before, after] = processedBy
  const again = after.filter((orderId) => before.includes(orderId))
  const contiguous = (run: ReadonlyArray<number>) => run.every((orderId, index) => index === 0 || orderId === run[index - 1] + 1)
  const inOrder = contiguous(before) && contiguous(after) && before[0] === 1 && after[0] <= before[before.length - 1] + 1
  yield* Console.log([
    ``,
    `all ${orders} orders processed in ${elapsed} ms across two consumer processes`,
    `  first consumer:  orders ${before[0]}..${before[before.length - 1]} (${before.length})`,
    `  second consumer: orders ${after[0]}..${after[after.length - 1]} (${after.length})`,
    `  processed again after the restart: ${again.length} (unconfirmed when the first process died; at most the window)`,
    `  in order, without gaps, within and across the two processes: ${inOrder ? "yes" : "NO"}`
  ].join("\n"))
}).pipe(Effect.scoped)

const [role, port, peerPort] = process.argv.slice(2)
const main = role === "producer"
  ? producerNode(Number(port), Number(peerPort))
  : role === "consumer"
  ? consumerNode(Number(port), Number(peerPort))
  : operator

Effect.runPromise(main).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
