/**
 * The durable queue conformance suites (vitest + @effect/vitest), for checking your own queue
 * implementation the way this library checks its own:
 *
 *   import { producerQueueConformance } from "effect-reliable/conformance"
 *   producerQueueConformance("my queue", myQueueLayer) // a fresh queue per layer build
 */
export { producerQueueConformance } from "./DurableQueue/ProducerQueueConformance.js"
export type { ConformanceOptions } from "./DurableQueue/ProducerQueueConformance.js"
export { workQueueConformance } from "./DurableQueue/WorkQueueConformance.js"
