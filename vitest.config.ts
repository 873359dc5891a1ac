import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

const source = (path: string) => fileURLToPath(new URL(path, import.meta.url))

export default defineConfig({
  resolve: {
    // Tests import the package's entry points by name, as an app does (tsconfig.json's paths).
    alias: [
      { find: /^effect-reliable\/conformance$/, replacement: source("./src/Conformance.ts") },
      { find: /^effect-reliable\/testing$/, replacement: source("./src/Testing.ts") },
      { find: /^effect-reliable\/ops$/, replacement: source("./src/Ops.ts") },
      { find: /^effect-reliable$/, replacement: source("./src/index.ts") }
    ]
  },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Two test files at a time on the 2-core machines: the longest files (outages, cluster and
    // process tests) spend most of their time waiting on real time, not on the CPU.
    maxWorkers: 2,
    minWorkers: 1
  }
})
