/**
 * Every benchmark case by id. Each runs in its own child process so its peak RSS is its own.
 */
import { Effect } from "effect"
import type { Row } from "./Row.js"
import * as Baseline from "./baseline.js"
import * as Chunked from "./chunked.js"
import * as ClusterBench from "./cluster.js"
import * as Competitors from "./competitors.js"
import * as Durable from "./durable.js"
import * as Observability from "./observability.js"
import * as Ingress from "./ingress.js"
import * as IngressRemote from "./ingressRemote.js"
import * as PointToPoint from "./pointToPoint.js"
import * as Remote from "./remote.js"
import * as WorkPullingBench from "./workPulling.js"

export type Case = () => Promise<Row>

const run = (effect: Effect.Effect<Row, unknown>): Promise<Row> => Effect.runPromise(effect)

export const cases: Record<string, Case> = {
  "baseline": () => run(Baseline.queueHop(1_000_000)),
  "p2p-send-100k": () => run(PointToPoint.send(100_000)),
  "p2p-send-1m": () => run(PointToPoint.send(1_000_000)),
  "p2p-send-10m": () => run(PointToPoint.send(10_000_000)),
  "p2p-sendAll-1m": () => run(PointToPoint.sendAll(1_000_000)),
  "p2p-send-1m-300b": () => run(PointToPoint.sendWithNote(1_000_000)),
  "p2p-send-1m-binary-1k": () => run(PointToPoint.sendBinary(1_000_000)),
  // what observing a flow costs: the same send loop with metrics off, on, and with a tracer
  "obs-send-1m-metrics-off": () => run(Observability.metricsOff(1_000_000)),
  "obs-send-1m-metrics-on": () => run(Observability.metricsOn(1_000_000)),
  "obs-send-100k-traced": () => run(Observability.traced(100_000)),
  "p2p-sendAll-1m-w1000": () => run(PointToPoint.sendAll(1_000_000, 1000)),
  "durable-sqlite-send-20k": () => run(Durable.sqliteSend(20_000)),
  "durable-sqlite-sendAll-100k": () => run(Durable.sqliteSendAll(100_000)),
  "durable-pg-send-20k": () => run(Durable.postgresSend(20_000)),
  "durable-pg-sendAll-100k": () => run(Durable.postgresSendAll(100_000)),
  "wp-1w-1m": () => run(WorkPullingBench.inProcess(1_000_000, 1)),
  "wp-2w-1m": () => run(WorkPullingBench.inProcess(1_000_000, 2)),
  "wp-4w-1m": () => run(WorkPullingBench.inProcess(1_000_000, 4)),
  "wp-8w-1m": () => run(WorkPullingBench.inProcess(1_000_000, 8)),
  // the PostgreSQL work queue, and the same no-op workload on pg-boss and graphile-worker
  "wp-pg-100k": () => run(WorkPullingBench.durablePg(100_000)),
  "wp-pg-100k-1pct-fail2": () => run(WorkPullingBench.durablePgFailing(100_000)),
  "wp-pg-100k-1pct-fail2-retry10ms": () => run(WorkPullingBench.durablePgFailing(100_000, 10)),
  // the same at 500k: the default retry's last delays (200 + 400 ms) are a fixed tail a 1.7 s run cannot absorb
  "wp-pg-500k": () => run(WorkPullingBench.durablePg(500_000)),
  "wp-pg-500k-1pct-fail2": () => run(WorkPullingBench.durablePgFailing(500_000)),
  "wp-pgboss-100k": () => run(Competitors.pgBoss(100_000)),
  "wp-graphile-100k": () => run(Competitors.graphileWorker(100_000)),
  "remote-tcp-1m-w50": () => run(Remote.remote(1_000_000, 50)),
  "remote-tcp-1m-w1000": () => run(Remote.remote(1_000_000, 1000)),
  "remote-tcp-tls-1m-w1000": () => run(Remote.remote(1_000_000, 1000, true)),
  "chunked-8mib-x200": () => run(Chunked.chunkedFlow({ messages: 200, messageBytes: 8 * 1024 * 1024, chunkSize: 256 * 1024, window: 50 })),
  "chunked-8mib-x200-lend": () =>
    run(Chunked.chunkedFlow({ messages: 200, messageBytes: 8 * 1024 * 1024, chunkSize: 256 * 1024, window: 50, lend: true })),
  "chunked-8mib-x200-collect": () =>
    run(Chunked.chunkedFlow({ messages: 200, messageBytes: 8 * 1024 * 1024, chunkSize: 256 * 1024, window: 50, collect: true })),
  // cluster mode: the single-process durable figure first, the cross-node one beside it
  "cluster-single-process-pg-200k": () => run(WorkPullingBench.durablePg(200_000, 2, 250)),
  "cluster-pg-200k-2-worker-nodes": () => run(ClusterBench.crossNode(200_000, 250)),
  "cluster-resume-after-kill": () => run(ClusterBench.resume(500)),
  // how work enters a flow: many one-at-a-time senders against one sender in the same run
  "ingress-pg-500-fibers": () => run(Ingress.postgresSenders(500, 40, 2_000)),
  "ingress-sqlite-100-fibers": () => run(Ingress.sqliteSenders(100, 40, 2_000)),
  "ingress-memory-1000-fibers": () => run(Ingress.memorySenders(1_000, 100, 100_000)),
  "ingress-pg-enqueue-1m": () => run(Ingress.postgresEnqueue(1_000_000, 1_000)),
  "ingress-pg-outbox-writers": () => run(Ingress.postgresOutbox(16, 1_000)),
  "ingress-sink-100k": () => run(Ingress.sinkVersusSendAll(100_000)),
  // remote and durable together, beside RabbitMQ with the same guarantee
  "ingress-remote-pg-200k-w1000": () => run(IngressRemote.remoteDurable(200_000, 1000)),
  "ingress-rabbitmq-200k-prefetch1000": () => run(IngressRemote.rabbitMq(200_000, 1000)),
  "ingress-remote-pg-200k-w5000": () => run(IngressRemote.remoteDurable(200_000, 5000)),
  "ingress-rabbitmq-200k-prefetch5000": () => run(IngressRemote.rabbitMq(200_000, 5000))
}
