/**
 * The cluster registry on PostgreSQL through `@effect/sql` (`@effect/sql-pg`).
 *
 * Storage: `<prefix>cluster_nodes` holds one row per node address (its current incarnation, the
 * factory keys it can host, its lease end); `<prefix>cluster_endpoints` one row per endpoint name
 * (kind, peer, factory, owner node and incarnation, generation). Tables are created by migrations
 * when the layer is built.
 *
 * Time: lease ends are computed and compared with the database's `now()`, the one clock every
 * node agrees on. Concurrency: every ownership change is a single conditional statement
 * (`UPDATE ... WHERE generation = $expected AND NOT <owner live>`, or an upsert whose conflict
 * branch carries the same condition); PostgreSQL re-checks the condition on the latest row version
 * after waiting for a concurrent writer, so of two racing writers exactly one changes the row.
 */
import { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type { Fragment, Identifier } from "@effect/sql/Statement"
import { Effect, Layer, Option } from "effect"
import * as Config from "../Protocol/Config.js"
import type { ReliableConfigError } from "../Protocol/Errors.js"
import type { EndpointKind } from "../Protocol/WireMessage.js"
import { ClusterRegistryError } from "./ClusterErrors.js"
import { ClusterRegistry } from "./ClusterRegistry.js"
import type {
  ClaimRequest,
  ClaimResult,
  ClusterNode,
  ClusterRecord,
  ClusterRecordStatus,
  ClusterRegistryService,
  PlaceResult
} from "./ClusterRegistry.js"
import { migrate, tables } from "./internal/ClusterSchema.js"

export interface PgClusterRegistryOptions {
  /** Prefix of the registry's table names; default `reliable_`. */
  readonly tablePrefix?: string
}

const registryKeys = Config.optionKeys<PgClusterRegistryOptions>({ tablePrefix: true })

interface RecordRow {
  readonly name: string
  readonly kind: string | null
  readonly peer: string | null
  readonly factory: string | null
  readonly node: string
  readonly node_incarnation: string
  readonly generation: number | string
  readonly live?: boolean
}

interface NodeRow {
  readonly node: string
  readonly incarnation: string
  readonly factories: ReadonlyArray<string>
  readonly lease_ms: number | string
}

const kinds: ReadonlyArray<EndpointKind> = ["Producer", "Consumer", "WorkProducer", "Worker"]

const decodeKind = (value: string | null): EndpointKind | undefined =>
  kinds.find((kind) => kind === value)

const decodeRecord = (row: RecordRow): ClusterRecord => ({
  name: row.name,
  kind: decodeKind(row.kind),
  peer: row.peer ?? undefined,
  factory: row.factory ?? undefined,
  node: row.node,
  nodeIncarnation: row.node_incarnation,
  generation: Number(row.generation)
})

const decodeStatus = (row: RecordRow): ClusterRecordStatus => ({ ...decodeRecord(row), live: row.live === true })

const decodeNode = (row: NodeRow): ClusterNode => ({
  node: row.node,
  incarnation: row.incarnation,
  factories: [...row.factories],
  leaseExpiresAt: Number(row.lease_ms)
})

const firstGeneration = (rows: ReadonlyArray<{ readonly generation: number | string }>): Option.Option<number> =>
  rows.length === 0 ? Option.none() : Option.some(Number(rows[0].generation))

interface Tables {
  readonly sql: SqlClient
  readonly nodes: Identifier
  readonly endpoints: Identifier
}

/** `now() + ms` as a timestamp. */
const leaseEnd = (sql: SqlClient, leaseMs: number): Fragment =>
  sql`now() + ${leaseMs}::double precision * interval '1 millisecond'`

/** True when the record aliased `e` belongs to a live member. */
const ownerLive = ({ nodes, sql }: Tables): Fragment =>
  sql`EXISTS (SELECT 1 FROM ${nodes} n WHERE n.node = e.node AND n.incarnation = e.node_incarnation AND n.lease_expires_at > now())`

const columns = "e.name, e.kind, e.peer, e.factory, e.node, e.node_incarnation, e.generation"

const membership = (t: Tables) => ({
  join: (member: { readonly node: string; readonly incarnation: string; readonly factories: ReadonlyArray<string> }, leaseMs: number) =>
    t.sql`INSERT INTO ${t.nodes} (node, incarnation, factories, lease_expires_at, joined_at)
      VALUES (${member.node}, ${member.incarnation}, ${[...member.factories]}::text[], ${leaseEnd(t.sql, leaseMs)}, now())
      ON CONFLICT (node) DO UPDATE SET incarnation = EXCLUDED.incarnation, factories = EXCLUDED.factories,
        lease_expires_at = EXCLUDED.lease_expires_at, joined_at = EXCLUDED.joined_at`.pipe(Effect.asVoid),
  renew: (node: string, incarnation: string, leaseMs: number) =>
    t.sql`UPDATE ${t.nodes} SET lease_expires_at = ${leaseEnd(t.sql, leaseMs)}
      WHERE node = ${node} AND incarnation = ${incarnation} AND lease_expires_at > now() RETURNING 1`.pipe(
      Effect.map((rows) => rows.length === 1)
    ),
  leave: (node: string, incarnation: string) =>
    t.sql`DELETE FROM ${t.nodes} WHERE node = ${node} AND incarnation = ${incarnation}`.pipe(Effect.asVoid),
  members: t.sql<NodeRow>`SELECT node, incarnation, factories,
      (extract(epoch FROM lease_expires_at) * 1000)::double precision AS lease_ms
    FROM ${t.nodes} WHERE lease_expires_at > now() ORDER BY node`.pipe(Effect.map((rows) => rows.map(decodeNode)))
})

/** The current owner of `name`, for a refusal's message (absent: the row went away meanwhile). */
const ownerOf = (t: Tables, name: string) =>
  t.sql<{ readonly node: string }>`SELECT node FROM ${t.endpoints} WHERE name = ${name}`.pipe(
    Effect.map((rows) => rows.length === 0 ? undefined : rows[0].node)
  )

const claim = (t: Tables, request: ClaimRequest): Effect.Effect<ClaimResult, SqlError> =>
  Effect.gen(function*() {
    while (true) {
      const rows = yield* t.sql<{ readonly generation: number | string }>`
        INSERT INTO ${t.endpoints} AS e (name, kind, peer, factory, node, node_incarnation, generation, updated_at)
        VALUES (${request.name}, ${request.kind}, ${request.peer ?? null}, ${request.factory ?? null},
          ${request.node}, ${request.nodeIncarnation}, 1, now())
        ON CONFLICT (name) DO UPDATE SET kind = EXCLUDED.kind, peer = EXCLUDED.peer, factory = EXCLUDED.factory,
          node = EXCLUDED.node, node_incarnation = EXCLUDED.node_incarnation, generation = e.generation + 1,
          updated_at = now()
        WHERE NOT ${ownerLive(t)}
        RETURNING e.generation`
      if (rows.length === 1) return { _tag: "Claimed", generation: Number(rows[0].generation) } as const
      const owner = yield* ownerOf(t, request.name)
      // The live holder released the name between the two statements: try again.
      if (owner !== undefined) return { _tag: "Taken", owner } as const
    }
  })

const place = (t: Tables, name: string, factory: string, node: string): Effect.Effect<PlaceResult, SqlError> =>
  Effect.gen(function*() {
    const rows = yield* t.sql<{ readonly generation: number | string }>`
      WITH target AS (
        SELECT incarnation FROM ${t.nodes}
        WHERE node = ${node} AND lease_expires_at > now() AND ${factory} = ANY(factories)
      )
      INSERT INTO ${t.endpoints} AS e (name, kind, peer, factory, node, node_incarnation, generation, updated_at)
      SELECT ${name}, NULL, NULL, ${factory}, ${node}, target.incarnation, 1, now() FROM target
      ON CONFLICT (name) DO UPDATE SET kind = NULL, peer = NULL, factory = EXCLUDED.factory, node = EXCLUDED.node,
        node_incarnation = EXCLUDED.node_incarnation, generation = e.generation + 1, updated_at = now()
      WHERE NOT ${ownerLive(t)}
      RETURNING e.generation`
    if (rows.length === 1) return { _tag: "Placed", generation: Number(rows[0].generation) } as const
    const targets = yield* t.sql<{ readonly has: boolean }>`
      SELECT ${factory} = ANY(factories) AS has FROM ${t.nodes} WHERE node = ${node} AND lease_expires_at > now()`
    if (targets.length === 0) return { _tag: "NodeUnavailable" } as const
    if (targets[0].has !== true) return { _tag: "UnknownFactory" } as const
    const owner = yield* ownerOf(t, name)
    return owner === undefined ? yield* place(t, name, factory, node) : { _tag: "Taken", owner } as const
  })

const records = (t: Tables) => ({
  adopt: (request: ClaimRequest & { readonly generation: number }) =>
    t.sql`UPDATE ${t.endpoints} SET kind = ${request.kind}, peer = ${request.peer ?? null}, updated_at = now()
      WHERE name = ${request.name} AND generation = ${request.generation} AND node = ${request.node}
        AND node_incarnation = ${request.nodeIncarnation}
      RETURNING 1`.pipe(Effect.map((rows) => rows.length === 1)),
  reclaim: (name: string, generation: number, node: string, incarnation: string) =>
    t.sql<{ readonly generation: number | string }>`UPDATE ${t.endpoints}
      SET node_incarnation = ${incarnation}, generation = generation + 1, updated_at = now()
      WHERE name = ${name} AND generation = ${generation} AND node = ${node}
      RETURNING generation`.pipe(Effect.map(firstGeneration)),
  abandon: (name: string, generation: number) =>
    t.sql<{ readonly generation: number | string }>`UPDATE ${t.endpoints}
      SET node_incarnation = '', generation = generation + 1, updated_at = now()
      WHERE name = ${name} AND generation = ${generation} AND factory IS NOT NULL
      RETURNING generation`.pipe(Effect.map(firstGeneration)),
  release: (name: string, generation: number) =>
    t.sql`DELETE FROM ${t.endpoints} WHERE name = ${name} AND generation = ${generation}`.pipe(Effect.asVoid),
  resolve: (name: string) =>
    t.sql<RecordRow>`SELECT ${t.sql.literal(columns)} FROM ${t.endpoints} e
      WHERE e.name = ${name} AND e.kind IS NOT NULL AND ${ownerLive(t)}`.pipe(
      Effect.map((rows) => rows.length === 0 ? Option.none() : Option.some(decodeRecord(rows[0])))
    ),
  get: (name: string) =>
    t.sql<RecordRow>`SELECT ${t.sql.literal(columns)}, ${ownerLive(t)} AS live FROM ${t.endpoints} e
      WHERE e.name = ${name}`.pipe(
      Effect.map((rows) => rows.length === 0 ? Option.none() : Option.some(decodeStatus(rows[0])))
    ),
  orphans: (factories: ReadonlyArray<string>) =>
    factories.length === 0 ? Effect.succeed([]) : t.sql<RecordRow>`SELECT ${t.sql.literal(columns)} FROM ${t.endpoints} e
      WHERE e.factory = ANY(${[...factories]}::text[]) AND NOT ${ownerLive(t)}
      ORDER BY e.name`.pipe(Effect.map((rows) => rows.map(decodeRecord))),
  takeOver: (name: string, generation: number, node: string, incarnation: string) =>
    t.sql<{ readonly generation: number | string }>`UPDATE ${t.endpoints} e
      SET node = ${node}, node_incarnation = ${incarnation}, kind = NULL, peer = NULL,
        generation = e.generation + 1, updated_at = now()
      WHERE e.name = ${name} AND e.generation = ${generation} AND e.factory IS NOT NULL AND NOT ${ownerLive(t)}
      RETURNING e.generation`.pipe(Effect.map(firstGeneration)),
  owned: (node: string, incarnation: string) =>
    t.sql<RecordRow>`SELECT ${t.sql.literal(columns)} FROM ${t.endpoints} e
      WHERE e.node = ${node} AND e.node_incarnation = ${incarnation}
      ORDER BY e.name`.pipe(Effect.map((rows) => rows.map(decodeRecord))),
  endpoints: t.sql<RecordRow>`SELECT ${t.sql.literal(columns)}, ${ownerLive(t)} AS live FROM ${t.endpoints} e
    ORDER BY e.name`.pipe(Effect.map((rows) => rows.map(decodeStatus)))
})

/** Maps a statement's `SqlError` to `ClusterRegistryError`. */
const wrap = (operation: string) => <A>(effect: Effect.Effect<A, SqlError>): Effect.Effect<A, ClusterRegistryError> =>
  Effect.mapError(effect, (cause) => new ClusterRegistryError({ operation, cause }))

/** Builds the registry on the `SqlClient` in context (PostgreSQL), running the migrations first. */
export const makePg = (
  options: PgClusterRegistryOptions = {}
): Effect.Effect<ClusterRegistryService, ClusterRegistryError | ReliableConfigError, SqlClient> =>
  Effect.gen(function*() {
    yield* Config.checkKeys("Cluster.layerPg", options, registryKeys)
    yield* Config.checkTablePrefix(options.tablePrefix)
    const sql = (yield* SqlClient).withoutTransforms()
    yield* sql.onDialectOrElse({
      pg: () => Effect.void,
      orElse: () =>
        Effect.fail(new ClusterRegistryError({ operation: "configure", cause: new Error("the cluster registry needs PostgreSQL") }))
    })
    const names = yield* tables(options.tablePrefix)
    yield* wrap("migrate")(migrate(sql, names))
    const t: Tables = { sql, nodes: sql(names.nodes), endpoints: sql(names.endpoints) }
    const m = membership(t)
    const r = records(t)
    return {
      join: (member, leaseMs) => wrap("join")(m.join(member, leaseMs)),
      renew: (node, incarnation, leaseMs) => wrap("renew")(m.renew(node, incarnation, leaseMs)),
      leave: (node, incarnation) => wrap("leave")(m.leave(node, incarnation)),
      members: wrap("members")(m.members),
      claim: (request) => wrap("claim")(claim(t, request)),
      adopt: (request) => wrap("adopt")(r.adopt(request)),
      reclaim: (name, generation, node, incarnation) => wrap("reclaim")(r.reclaim(name, generation, node, incarnation)),
      abandon: (name, generation) => wrap("abandon")(r.abandon(name, generation)),
      release: (name, generation) => wrap("release")(r.release(name, generation)),
      resolve: (name) => wrap("resolve")(r.resolve(name)),
      get: (name) => wrap("get")(r.get(name)),
      orphans: (factories) => wrap("orphans")(r.orphans(factories)),
      takeOver: (name, generation, node, incarnation) => wrap("takeOver")(r.takeOver(name, generation, node, incarnation)),
      place: (name, factory, node) => wrap("place")(place(t, name, factory, node)),
      owned: (node, incarnation) => wrap("owned")(r.owned(node, incarnation)),
      endpoints: wrap("endpoints")(r.endpoints)
    }
  })

/** The PostgreSQL registry as a layer; its tables are created (if missing) when it is built. */
export const layerPg = (
  options: PgClusterRegistryOptions = {}
): Layer.Layer<ClusterRegistry, ClusterRegistryError | ReliableConfigError, SqlClient> =>
  Layer.effect(ClusterRegistry, makePg(options))
