/**
 * The pack check runs the package's durable queue conformance suites (`effect-reliable/conformance`,
 * for vitest and @effect/vitest) against its in-memory queues, as a user checks their own queue.
 */
import { DurableQueue } from "effect-reliable"
import { producerQueueConformance, workQueueConformance } from "effect-reliable/conformance"

producerQueueConformance("memory", DurableQueue.layerMemory)
workQueueConformance("memory", DurableQueue.layerWorkMemory)
