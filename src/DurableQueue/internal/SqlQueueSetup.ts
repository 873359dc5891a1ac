/**
 * What every SQL queue (and writer) does before its first statement: check its options, take the
 * client without row transforms, check the dialect, derive the table names, and run the
 * migrations. On PostgreSQL it also finds the client's `listen` (the backlog signal).
 */
import { SqlClient } from "@effect/sql/SqlClient"
import { Effect } from "effect"
import * as Config from "../../Protocol/Config.js"
import type { ReliableConfigError } from "../../Protocol/Errors.js"
import { QueueBackendError } from "../QueueErrors.js"
import type { Listen, PgListener } from "./PgNotifications.js"
import type { Tables } from "./SqlSchema.js"
import { migrate, tables } from "./SqlSchema.js"
import { dialectOf } from "./SqlSupport.js"

export interface SqlQueueOptions {
  /** The queue's name; every row of the queue is keyed by it. */
  readonly queueName: string
  /** The prefix of every table name (letters, digits, `_`); default `reliable_`. */
  readonly tablePrefix?: string | undefined
}

const sqlQueueKeys = Config.optionKeys<SqlQueueOptions>({ queueName: true, tablePrefix: true })

/** Checks the options of a SQL queue (producer or work queue) before it touches the database. */
export const checkSqlQueueOptions = (
  constructor: string,
  options: SqlQueueOptions,
  extraKeys: ReadonlyArray<string> = []
): Effect.Effect<void, ReliableConfigError> =>
  Effect.all([
    Config.checkKeys(constructor, options, new Set([...sqlQueueKeys, ...extraKeys])),
    Config.checkName("queueName", options.queueName),
    Config.checkTablePrefix(options.tablePrefix)
  ], { discard: true })

export interface SqlQueueContext {
  readonly sql: SqlClient
  readonly tables: Tables
  /** PostgreSQL's `LISTEN` (from `@effect/sql-pg`'s client) and `NOTIFY`; undefined on SQLite. */
  readonly listener: PgListener | undefined
}

type Listening = SqlClient & { readonly listen: Listen }

const canListen = (client: SqlClient): client is Listening =>
  "listen" in client && typeof (client as { readonly listen?: unknown }).listen === "function"

/** Checks the options, then migrates the tables of the prefix. */
export const setUp = (
  constructor: string,
  options: SqlQueueOptions,
  extraKeys: ReadonlyArray<string> = []
): Effect.Effect<SqlQueueContext, QueueBackendError | ReliableConfigError, SqlClient> =>
  Effect.gen(function*() {
    yield* checkSqlQueueOptions(constructor, options, extraKeys)
    const client = yield* SqlClient
    const sql = client.withoutTransforms()
    const dialect = yield* dialectOf(sql)
    const t = yield* tables(options.tablePrefix)
    yield* Effect.mapError(migrate(sql, t), (cause) => new QueueBackendError({ operation: "migrate", cause }))
    const listener: PgListener | undefined = dialect === "pg" && canListen(client)
      ? { listen: client.listen, notify: (channel, payload) => Effect.asVoid(sql`SELECT pg_notify(${channel}, ${payload})`) }
      : undefined
    return { sql, tables: t, listener }
  })
