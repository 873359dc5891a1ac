/**
 * Small helpers shared by the SQL durable queues: transactions whose commit failures stay typed,
 * error classification, and conversions between driver values and queue values.
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import { TransactionConnection } from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import { QueueBackendError, QueueConflict, QueueRejected } from "../QueueErrors.js"

export type Dialect = "pg" | "sqlite"

/** The dialect of a client; only PostgreSQL and SQLite are supported. */
export const dialectOf = (sql: SqlClient): Effect.Effect<Dialect, QueueBackendError> =>
  sql.onDialectOrElse({
    pg: (): Effect.Effect<Dialect, QueueBackendError> => Effect.succeed("pg"),
    sqlite: () => Effect.succeed("sqlite"),
    orElse: () =>
      Effect.fail(
        new QueueBackendError({
          operation: "configure",
          cause: new Error("the SQL durable queues support PostgreSQL and SQLite only")
        })
      )
  })

/**
 * Runs `effect` in a transaction. On PostgreSQL the transaction is READ COMMITTED whatever the
 * database's default: the queues lock their queue row first and rely on every later statement
 * seeing what committed while they waited. `@effect/sql` turns a failed COMMIT into a defect;
 * here it stays a typed `SqlError`, because a lost connection at commit is ordinary backend
 * trouble.
 */
export const transaction = <A, E, R>(sql: SqlClient, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
  sql.withTransaction(
    sql.onDialectOrElse({
      pg: () => Effect.zipRight(sql`SET TRANSACTION ISOLATION LEVEL READ COMMITTED`, effect),
      orElse: () => effect
    })
  ).pipe(
    Effect.catchSomeDefect((defect) => defect instanceof SqlError ? Option.some(Effect.fail(defect)) : Option.none())
  )

/**
 * Runs `effect` in the caller's transaction when there is one (a writer inside the application's
 * `sql.withTransaction`: the effect commits or rolls back with it), else in one of its own.
 */
export const joinOrTransaction = <A, E, R>(sql: SqlClient, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
  Effect.flatMap(
    Effect.serviceOption(TransactionConnection),
    (ambient) => Option.isSome(ambient) ? effect : transaction(sql, effect)
  )

/**
 * Runs reads as one snapshot that blocks no writer: on PostgreSQL a READ ONLY, REPEATABLE READ
 * transaction (plain reads take no row locks), or the caller's transaction when there is one; on
 * SQLite the statements as they are (one connection serves them in turn).
 */
export const readSnapshot = <A, E, R>(sql: SqlClient, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
  sql.onDialectOrElse({
    pg: () =>
      Effect.flatMap(Effect.serviceOption(TransactionConnection), (ambient) =>
        Option.isSome(ambient)
          ? effect
          : sql.withTransaction(Effect.zipRight(sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`, effect)).pipe(
            Effect.catchSomeDefect((defect) => defect instanceof SqlError ? Option.some(Effect.fail(defect)) : Option.none())
          )),
    orElse: () => effect
  })

const causeCode = (error: SqlError): string | undefined => {
  const cause = error.cause
  if (typeof cause === "object" && cause !== null && "code" in cause && typeof cause.code === "string") {
    return cause.code
  }
  return undefined
}

/** A unique, primary key, not-null or check violation (PostgreSQL class 23, SQLite constraint errors). */
export const isIntegrityViolation = (error: SqlError): boolean => {
  const code = causeCode(error)
  return code !== undefined && (code.startsWith("23") || code.startsWith("SQLITE_CONSTRAINT"))
}

/**
 * Errors after which a single-statement fast path hands over to the locked transaction: an
 * integrity violation (an id stored before), or a serialization failure or deadlock (a database
 * whose default isolation is stricter than READ COMMITTED).
 */
export const isFastPathMiss = (error: SqlError): boolean => {
  const code = causeCode(error)
  return isIntegrityViolation(error) || code === "40001" || code === "40P01"
}

/**
 * A value the database cannot hold (PostgreSQL data exceptions, class 22, and program limits,
 * class 54: a NUL in text, ill-formed UTF-8, an index row too large): the request's content is
 * refused, and no retry can change that.
 */
export const isContentRefusal = (error: SqlError): boolean => {
  const code = causeCode(error)
  return code !== undefined && code.length === 5 && (code.startsWith("22") || code.startsWith("54"))
}

/** Integrity violations contradict the queue's contract (`QueueConflict`); anything else is retriable. */
export const fromSqlError = (operation: string) => (error: SqlError): QueueConflict | QueueBackendError =>
  isIntegrityViolation(error)
    ? new QueueConflict({ message: `durable queue ${operation} violated the queue's integrity: ${error.message}` })
    : new QueueBackendError({ operation, cause: error })

/** Maps every `SqlError` of `effect` with `fromSqlError`, keeping its other errors. */
export const mapSqlError = (operation: string) =>
<A, E, R>(
  effect: Effect.Effect<A, E | SqlError, R>
): Effect.Effect<A, Exclude<E, SqlError> | QueueConflict | QueueBackendError, R> =>
  Effect.mapError(
    effect,
    (error) => error instanceof SqlError ? fromSqlError(operation)(error) : error as Exclude<E, SqlError>
  )

/**
 * For requests that write new content (stores): as `mapSqlError`, and content the database
 * cannot hold is `QueueRejected` (no retry can store it).
 */
export const mapStoreError = (operation: string) =>
<A, E, R>(
  effect: Effect.Effect<A, E | SqlError, R>
): Effect.Effect<A, Exclude<E, SqlError> | QueueConflict | QueueRejected | QueueBackendError, R> =>
  Effect.mapError(
    effect,
    (error) =>
      error instanceof SqlError
        ? (isContentRefusal(error) ? new QueueRejected({ operation, cause: error }) : fromSqlError(operation)(error))
        : error as Exclude<E, SqlError>
  )

/** Integers come back as strings from PostgreSQL BIGINT and counts, as numbers from SQLite. */
export const toNumber = (value: unknown): number => typeof value === "number" ? value : Number(value)

/** A plain `Uint8Array` copy of a driver's bytes (a Node `Buffer` from both drivers). */
export const toBytes = (value: unknown): Uint8Array =>
  value instanceof Uint8Array ? new Uint8Array(value) : new Uint8Array(0)

/** Bytes as a driver parameter: better-sqlite3 binds only `Buffer`s; this shares the memory. */
export const toParam = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)

/** Splits `items` into runs of at most `size`. */
export const chunksOf = <A>(items: ReadonlyArray<A>, size: number): ReadonlyArray<ReadonlyArray<A>> => {
  const chunks: Array<ReadonlyArray<A>> = []
  for (let i = 0; i < items.length; i += size) chunks.push(items.slice(i, i + size))
  return chunks
}

/** SQLite binds at most 32,766 parameters per statement; its statements stay far below. */
export const sqliteRunSize = 500

/**
 * Runs a statement over many rows or ids: once on PostgreSQL (arrays travel as one parameter),
 * in runs of `sqliteRunSize` on SQLite, results concatenated.
 */
export const inRuns = <I, A>(
  sql: SqlClient,
  items: ReadonlyArray<I>,
  pg: (all: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<A>, SqlError>,
  sqlite: (run: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<A>, SqlError>
): Effect.Effect<ReadonlyArray<A>, SqlError> =>
  items.length === 0 ? Effect.succeed([]) : sql.onDialectOrElse({
    pg: () => pg(items),
    orElse: () => Effect.map(Effect.forEach(chunksOf(items, sqliteRunSize), sqlite), (runs) => runs.flat())
  })

// ---- PostgreSQL arrays in binary form ----------------------------------------------------------
//
// The driver sends a `Buffer` parameter in PostgreSQL's binary format as it is, and anything else
// as text: a JavaScript array becomes an array literal, every element quoted and escaped (bytes
// as hex) in JavaScript and parsed again by the server. A parameter cast to an array type
// (`$1::text[]`) accepts the array's binary form instead: a header, then each element as its
// length and its bytes, written here in one buffer with no escaping on either side.

const textOid = 25
const byteaOid = 17
const int8Oid = 20
const int2Oid = 21

/** The binary array's header (one dimension, lower bound 1); an empty array has none. */
const arrayBuffer = (oid: number, count: number, elementBytes: number, hasNull = false): { buffer: Buffer; offset: number } => {
  if (count === 0) {
    const buffer = Buffer.alloc(12)
    buffer.writeInt32BE(oid, 8)
    return { buffer, offset: 12 }
  }
  const buffer = Buffer.allocUnsafe(20 + 4 * count + elementBytes)
  buffer.writeInt32BE(1, 0)
  buffer.writeInt32BE(hasNull ? 1 : 0, 4)
  buffer.writeInt32BE(oid, 8)
  buffer.writeInt32BE(count, 12)
  buffer.writeInt32BE(1, 16)
  return { buffer, offset: 20 }
}

/** A `text[]` parameter (cast it: `${pgTextArray(ids)}::text[]`); `undefined` elements are NULL. */
export const pgTextArray = (items: ReadonlyArray<string | undefined>): Buffer => {
  const count = items.length
  const lengths = new Array<number>(count)
  let total = 0
  let hasNull = false
  for (let i = 0; i < count; i++) {
    const item = items[i]
    const length = item === undefined ? -1 : Buffer.byteLength(item, "utf8")
    hasNull ||= item === undefined
    lengths[i] = length
    total += Math.max(length, 0)
  }
  const { buffer, offset: start } = arrayBuffer(textOid, count, total, hasNull)
  let offset = start
  for (let i = 0; i < count; i++) {
    buffer.writeInt32BE(lengths[i], offset)
    offset += 4
    if (lengths[i] > 0) offset += buffer.write(items[i]!, offset, lengths[i], "utf8")
  }
  return buffer
}

/** A `bytea[]` parameter (cast it: `${pgByteaArray(payloads)}::bytea[]`). */
export const pgByteaArray = (items: ReadonlyArray<Uint8Array>): Buffer => {
  const count = items.length
  let total = 0
  for (let i = 0; i < count; i++) total += items[i].byteLength
  const { buffer, offset: start } = arrayBuffer(byteaOid, count, total)
  let offset = start
  for (let i = 0; i < count; i++) {
    const item = items[i]
    buffer.writeInt32BE(item.byteLength, offset)
    offset += 4
    buffer.set(item, offset)
    offset += item.byteLength
  }
  return buffer
}

/** A `bigint[]` parameter of safe integers (cast it: `${pgInt8Array(seqs)}::bigint[]`); `undefined` elements are NULL. */
export const pgInt8Array = (items: ReadonlyArray<number | undefined>): Buffer => {
  const count = items.length
  let present = 0
  for (let i = 0; i < count; i++) if (items[i] !== undefined) present += 1
  const { buffer, offset: start } = arrayBuffer(int8Oid, count, 8 * present, present < count)
  let offset = start
  for (let i = 0; i < count; i++) {
    const value = items[i]
    if (value === undefined) {
      buffer.writeInt32BE(-1, offset)
      offset += 4
      continue
    }
    const high = Math.floor(value / 0x100000000)
    buffer.writeInt32BE(8, offset)
    buffer.writeInt32BE(high, offset + 4)
    buffer.writeUInt32BE(value - high * 0x100000000, offset + 8)
    offset += 12
  }
  return buffer
}

/** A `smallint[]` parameter (cast it: `${pgInt2Array(codes)}::smallint[]`). */
export const pgInt2Array = (items: ReadonlyArray<number>): Buffer => {
  const count = items.length
  const { buffer, offset: start } = arrayBuffer(int2Oid, count, 2 * count)
  let offset = start
  for (let i = 0; i < count; i++) {
    buffer.writeInt32BE(2, offset)
    buffer.writeInt16BE(items[i], offset + 4)
    offset += 6
  }
  return buffer
}
