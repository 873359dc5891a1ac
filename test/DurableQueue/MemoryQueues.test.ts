import * as MemoryProducerQueue from "../../src/DurableQueue/MemoryProducerQueue.js"
import * as MemoryWorkQueue from "../../src/DurableQueue/MemoryWorkQueue.js"
import { producerQueueConformance } from "../../src/DurableQueue/ProducerQueueConformance.js"
import { workQueueConformance } from "../../src/DurableQueue/WorkQueueConformance.js"

producerQueueConformance("memory", MemoryProducerQueue.layerMemory)
workQueueConformance("memory", MemoryWorkQueue.layerWorkMemory)
