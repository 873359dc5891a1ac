/**
 * The cluster registry contract on the in-memory registry, with leases on the TestClock.
 */
import { describe, it } from "@effect/vitest"
import { Duration, TestClock } from "effect"
import * as MemoryClusterRegistry from "../../src/Cluster/MemoryClusterRegistry.js"
import { registrySuite } from "./RegistrySuite.js"

describe("MemoryClusterRegistry", () => {
  registrySuite((name, body) => it.scoped(name, body), {
    registry: MemoryClusterRegistry.makeMemory,
    elapse: (ms) => TestClock.adjust(Duration.millis(ms)),
    leaseMs: 3_000
  })
})
