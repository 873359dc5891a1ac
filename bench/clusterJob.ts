/** The job payload of the cluster benchmarks (shared by `cluster.ts` and `clusterNode.ts`). */
import { Schema } from "effect"

export const BenchJob = Schema.Struct({ jobId: Schema.Number, kind: Schema.String })
