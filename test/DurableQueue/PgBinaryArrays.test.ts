/**
 * The binary array parameters of the PostgreSQL queues round-trip through the server exactly:
 * empty arrays, non-ASCII and empty text, empty and non-UTF-8 bytes, 64-bit seqs up to the
 * largest safe integer, negative smallints, and NULL elements.
 */
import { expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql/SqlClient"
import { Effect } from "effect"
import { pgByteaArray, pgInt2Array, pgInt8Array, pgTextArray } from "../../src/DurableQueue/internal/SqlSupport.js"
import { pgClientLayer, describePostgres, probePostgres } from "./SqlTestSupport.js"

const probe = await probePostgres

const roundTrip = <A>(parameter: Buffer, cast: string, column: (row: Record<string, unknown>) => A) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    const rows = yield* sql.unsafe<Record<string, unknown>>(`SELECT unnest($1::${cast}) AS v`, [parameter])
    return rows.map(column)
  }).pipe(Effect.provide(pgClientLayer()))

describePostgres(probe, "PostgreSQL binary array parameters", () => {
  it.effect("text[]", () =>
    Effect.gen(function*() {
      const ids = ["order-1", "", "ünïcødé ✓ 注文", "quote ' and \" and \\ and {,}", "0192f0c4-7b1e-7cc0-8000-000000000000"]
      expect(yield* roundTrip(pgTextArray(ids), "text[]", (row) => row.v)).toEqual(ids)
      expect(yield* roundTrip(pgTextArray([]), "text[]", (row) => row.v)).toEqual([])
    }))

  it.effect("bytea[]", () =>
    Effect.gen(function*() {
      const payloads = [new Uint8Array([]), new Uint8Array([0, 255, 128, 10]), new TextEncoder().encode("{\"a\":1}")]
      const back = yield* roundTrip(pgByteaArray(payloads), "bytea[]", (row) => Array.from(row.v as Uint8Array))
      expect(back).toEqual(payloads.map((payload) => Array.from(payload)))
      expect(yield* roundTrip(pgByteaArray([]), "bytea[]", (row) => row.v)).toEqual([])
    }))

  it.effect("bigint[] and smallint[]", () =>
    Effect.gen(function*() {
      const seqs = [0, 1, 2 ** 32 - 1, 2 ** 32, 2 ** 40 + 7, Number.MAX_SAFE_INTEGER]
      expect(yield* roundTrip(pgInt8Array(seqs), "bigint[]", (row) => String(row.v))).toEqual(seqs.map(String))
      const codes = [0, 1, 2, -1, 32767, -32768]
      expect(yield* roundTrip(pgInt2Array(codes), "smallint[]", (row) => Number(row.v))).toEqual(codes)
      expect(yield* roundTrip(pgInt8Array([]), "bigint[]", (row) => row.v)).toEqual([])
    }))

  it.effect("NULL elements (undefined) in text[] and bigint[]", () =>
    Effect.gen(function*() {
      const traces = [undefined, "00-trace-01", "", undefined]
      expect(yield* roundTrip(pgTextArray(traces), "text[]", (row) => row.v)).toEqual([null, "00-trace-01", "", null])
      const times = [undefined, 0, 1_700_000_000_000, undefined]
      expect(yield* roundTrip(pgInt8Array(times), "bigint[]", (row) => row.v === null ? null : Number(row.v)))
        .toEqual([null, 0, 1_700_000_000_000, null])
      expect(yield* roundTrip(pgTextArray([undefined]), "text[]", (row) => row.v)).toEqual([null])
    }))
})
