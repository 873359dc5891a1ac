/**
 * The in-memory cluster registry: the reference for the registry contract, for nodes that share
 * one process (tests, examples). Leases run on the Effect `Clock` it was built with, so
 * `TestClock` drives expiry. Every operation is one synchronous step, hence linearizable.
 */
import { Effect, Layer, Option } from "effect"
import type { Clock } from "effect"
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

interface State {
  readonly nodes: Map<string, ClusterNode>
  readonly records: Map<string, ClusterRecord>
}

const liveIn = (state: State, now: number) => (record: ClusterRecord): boolean => {
  const member = state.nodes.get(record.node)
  return member !== undefined && member.incarnation === record.nodeIncarnation && member.leaseExpiresAt > now
}

const claimIn = (state: State, live: (record: ClusterRecord) => boolean, request: ClaimRequest): ClaimResult => {
  const existing = state.records.get(request.name)
  if (existing !== undefined && live(existing)) return { _tag: "Taken", owner: existing.node }
  const generation = (existing?.generation ?? 0) + 1
  state.records.set(request.name, { ...request, generation })
  return { _tag: "Claimed", generation }
}

const placeIn = (state: State, now: number, name: string, factory: string, node: string): PlaceResult => {
  const live = liveIn(state, now)
  const member = state.nodes.get(node)
  if (member === undefined || member.leaseExpiresAt <= now) return { _tag: "NodeUnavailable" }
  if (!member.factories.includes(factory)) return { _tag: "UnknownFactory" }
  const existing = state.records.get(name)
  if (existing !== undefined && live(existing)) return { _tag: "Taken", owner: existing.node }
  const generation = (existing?.generation ?? 0) + 1
  state.records.set(name, {
    name,
    kind: undefined,
    peer: undefined,
    factory,
    node,
    nodeIncarnation: member.incarnation,
    generation
  })
  return { _tag: "Placed", generation }
}

/** Changes the record `name` at `generation` with `change`, if `when` holds; the new generation. */
const moveIn = (
  state: State,
  name: string,
  generation: number,
  when: (record: ClusterRecord) => boolean,
  change: Partial<ClusterRecord>
): Option.Option<number> => {
  const record = state.records.get(name)
  if (record === undefined || record.generation !== generation || !when(record)) return Option.none()
  state.records.set(name, { ...record, ...change, generation: generation + 1 })
  return Option.some(generation + 1)
}

/** A registry over the given clock (the registry's single time authority). */
export const makeWith = (clock: Clock.Clock): ClusterRegistryService => {
  const state: State = { nodes: new Map(), records: new Map() }
  const now = () => clock.unsafeCurrentTimeMillis()
  const live = (record: ClusterRecord) => liveIn(state, now())(record)
  const status = (record: ClusterRecord): ClusterRecordStatus => ({ ...record, live: live(record) })
  return {
    join: (member, leaseMs) =>
      Effect.sync(() => void state.nodes.set(member.node, { ...member, factories: [...member.factories], leaseExpiresAt: now() + leaseMs })),
    renew: (node, incarnation, leaseMs) =>
      Effect.sync(() => {
        const member = state.nodes.get(node)
        if (member === undefined || member.incarnation !== incarnation || member.leaseExpiresAt <= now()) return false
        state.nodes.set(node, { ...member, leaseExpiresAt: now() + leaseMs })
        return true
      }),
    leave: (node, incarnation) =>
      Effect.sync(() => {
        if (state.nodes.get(node)?.incarnation === incarnation) state.nodes.delete(node)
      }),
    members: Effect.sync(() => [...state.nodes.values()].filter((member) => member.leaseExpiresAt > now())),
    claim: (request) => Effect.sync(() => claimIn(state, live, request)),
    adopt: (request) =>
      Effect.sync(() => {
        const record = state.records.get(request.name)
        if (
          record === undefined || record.generation !== request.generation || record.node !== request.node ||
          record.nodeIncarnation !== request.nodeIncarnation
        ) return false
        // Starting a placed record changes no ownership: the generation stays.
        state.records.set(request.name, { ...record, kind: request.kind, peer: request.peer })
        return true
      }),
    reclaim: (name, generation, node, incarnation) =>
      Effect.sync(() => moveIn(state, name, generation, (record) => record.node === node, { nodeIncarnation: incarnation })),
    abandon: (name, generation) =>
      Effect.sync(() => moveIn(state, name, generation, (record) => record.factory !== undefined, { nodeIncarnation: "" })),
    release: (name, generation) =>
      Effect.sync(() => {
        if (state.records.get(name)?.generation === generation) state.records.delete(name)
      }),
    resolve: (name) =>
      Effect.sync(() => Option.filter(Option.fromNullable(state.records.get(name)), (record) => record.kind !== undefined && live(record))),
    get: (name) => Effect.sync(() => Option.map(Option.fromNullable(state.records.get(name)), status)),
    orphans: (factories) =>
      Effect.sync(() =>
        [...state.records.values()].filter((record) =>
          record.factory !== undefined && factories.includes(record.factory) && !live(record)
        )
      ),
    takeOver: (name, generation, node, incarnation) =>
      Effect.sync(() =>
        moveIn(state, name, generation, (record) => record.factory !== undefined && !live(record), {
          node,
          nodeIncarnation: incarnation,
          kind: undefined,
          peer: undefined
        })
      ),
    place: (name, factory, node) => Effect.sync(() => placeIn(state, now(), name, factory, node)),
    owned: (node, incarnation) =>
      Effect.sync(() => [...state.records.values()].filter((record) => record.node === node && record.nodeIncarnation === incarnation)),
    endpoints: Effect.sync(() => [...state.records.values()].map(status))
  }
}

/** A fresh in-memory registry on the current clock. */
export const makeMemory: Effect.Effect<ClusterRegistryService> = Effect.map(Effect.clock, makeWith)

/** One in-memory registry; build it once and provide it to every node of the process. */
export const layerMemory: Layer.Layer<ClusterRegistry> = Layer.effect(ClusterRegistry, makeMemory)
