/**
 * Every benchmark case by id. Each runs in its own child process so its peak RSS is its own.
 */
import { Effect } from "effect"
import type { Row } from "./Row.js"
import * as Baseline from "./baseline.js"
import * as Chunked from "./chunked.js"
import * as Durable from "./durable.js"
import * as PointToPoint from "./pointToPoint.js"
import * as Remote from "./remote.js"

export type Case = () => Promise<Row>

const run = (effect: Effect.Effect<Row, unknown>): Promise<Row> => Effect.runPromise(effect)

export const cases: Record<string, Case> = {
  "baseline": () => run(Baseline.queueHop(1_000_000)),
  "p2p-send-100k": () => run(PointToPoint.send(100_000)),
  "p2p-send-1m": () => run(PointToPoint.send(1_000_000)),
  "p2p-sendAll-1m": () => run(PointToPoint.sendAll(1_000_000)),
  "p2p-sendAll-1m-w1000": () => run(PointToPoint.sendAll(1_000_000, 1000)),
  "durable-sqlite-send-20k": () => run(Durable.sqliteSend(20_000)),
  "durable-sqlite-sendAll-100k": () => run(Durable.sqliteSendAll(100_000)),
  "durable-pg-send-20k": () => run(Durable.postgresSend(20_000)),
  "durable-pg-sendAll-100k": () => run(Durable.postgresSendAll(100_000)),
  "remote-tcp-1m-w50": () => run(Remote.remote(1_000_000, 50)),
  "remote-tcp-1m-w1000": () => run(Remote.remote(1_000_000, 1000)),
  "chunked-8mib-x200": () => run(Chunked.chunkedFlow({ messages: 200, messageBytes: 8 * 1024 * 1024, chunkSize: 256 * 1024, window: 50 })),
  "chunked-8mib-x200-collect": () =>
    run(Chunked.chunkedFlow({ messages: 200, messageBytes: 8 * 1024 * 1024, chunkSize: 256 * 1024, window: 50, collect: true }))
}
