/**
 * The placement a relocatable factory runs under: which endpoint name the cluster asked it to
 * create and the registry generation assigned to this node, so the endpoint's claim adopts that
 * record instead of claiming the name afresh.
 */
import { FiberRef } from "effect"
import { globalValue } from "effect/GlobalValue"

export interface Placement {
  readonly name: string
  /** The relocatable factory key the endpoint was created by. */
  readonly factory: string
  readonly generation: number
}

export const currentPlacement: FiberRef.FiberRef<Placement | undefined> = globalValue(
  Symbol.for("effect-reliable/Cluster/currentPlacement"),
  () => FiberRef.unsafeMake<Placement | undefined>(undefined)
)
