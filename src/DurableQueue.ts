/**
 * Durable queues: the contracts a producer persists through, their implementations (in-memory
 * reference, SQLite and PostgreSQL through `@effect/sql`), writers that fill a queue's backlog
 * from anywhere (the transactional outbox) and a fault-injecting wrapper for tests.
 * The conformance suites every implementation passes are exported from
 * `effect-reliable/conformance`.
 */
export { DurableProducerQueue } from "./DurableQueue/DurableProducerQueue.js"
export type {
  BacklogEntry,
  DeadLetter,
  DeadLetterRequest,
  DeadLettersOptions,
  DurableProducerQueueService,
  DurableQueueState,
  EnqueueRequest,
  EnqueueResult,
  InspectedEntry,
  InspectedState,
  InspectOptions,
  LoadResult,
  QueueEpoch,
  QueueInspection,
  QueueOperatorService,
  StoredEntry,
  StoreOptions,
  StoreRequest,
  StoreResult
} from "./DurableQueue/DurableProducerQueue.js"
export { DurableWorkQueue } from "./DurableQueue/DurableWorkQueue.js"
export type {
  DurableWorkQueueService,
  FailureRequest,
  WorkLoadResult,
  WorkQueueState,
  WorkStoreResult
} from "./DurableQueue/DurableWorkQueue.js"
export { isTerminal, QueueBackendError, QueueChunkedBatch, QueueConflict, QueueFenced, QueueRejected } from "./DurableQueue/QueueErrors.js"
export type { DurableQueueError } from "./DurableQueue/QueueErrors.js"
export { layerMemory, makeMemory } from "./DurableQueue/MemoryProducerQueue.js"
export { layerWorkMemory, makeWorkMemory } from "./DurableQueue/MemoryWorkQueue.js"
export { layerSql, layerSqlConfig, makeSql } from "./DurableQueue/SqlProducerQueue.js"
export type { SqlQueueOptions } from "./DurableQueue/SqlProducerQueue.js"
export { layerWorkSql, layerWorkSqlConfig, makeWorkSql } from "./DurableQueue/SqlWorkQueue.js"
export { deadLetters, discardDeadLetter, inspect, requeueDeadLetter } from "./DurableQueue/Operators.js"
export type { DecodedEntry, DecodedInspection } from "./DurableQueue/Operators.js"
export { writer, writerMemory } from "./DurableQueue/Writer.js"
export type { QueueWriter, WriteOptions, WriterError, WriterKind, WriterMessage, WriterOptions } from "./DurableQueue/Writer.js"
export { FlakyFailure, flakyProducerQueue, flakyWorkQueue } from "./DurableQueue/FlakyQueue.js"
export type { FlakyFault, FlakyOptions } from "./DurableQueue/FlakyQueue.js"
export type { ChunkMark } from "./Protocol/WireMessage.js"
