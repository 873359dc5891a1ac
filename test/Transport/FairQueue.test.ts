import { describe, expect, it } from "@effect/vitest"
import { BulkFrameBytes, BulkSenders } from "../../src/Transport/internal/BulkSenders.js"
import { FairQueue } from "../../src/Transport/internal/FairQueue.js"

const drain = <A>(queue: FairQueue<A>): Array<A> => {
  const out: Array<A> = []
  for (let next = queue.peek(); next !== undefined; next = queue.peek()) {
    const taken = queue.take()
    expect(taken).toBe(next)
    out.push(taken!)
  }
  return out
}

describe("FairQueue", () => {
  it("serves lanes in turn, one item each, FIFO within a lane", () => {
    const queue = new FairQueue<string>()
    for (let index = 0; index < 50; index++) queue.push("big", `b${index}`)
    queue.push("small", "s0")
    queue.push("small", "s1")
    queue.push("other", "o0")
    expect(queue.size).toBe(53)
    expect(drain(queue).slice(0, 8)).toEqual(["b0", "s0", "o0", "b1", "s1", "b2", "b3", "b4"])
    expect(queue.isEmpty).toBe(true)
  })

  it("a lane that arrives while others are queued waits for at most one item of each", () => {
    const queue = new FairQueue<string>()
    for (let index = 0; index < 10; index++) queue.push("a", `a${index}`)
    for (let index = 0; index < 10; index++) queue.push("b", `b${index}`)
    expect([queue.take(), queue.take(), queue.take()]).toEqual(["a0", "b0", "a1"])
    queue.push("late", "x")
    expect([queue.take(), queue.take(), queue.take()]).toEqual(["b1", "x", "a2"])
  })

  it("keeps no lane once it is empty; a returning sender queues at the end of the turn", () => {
    const queue = new FairQueue<number>()
    queue.push("a", 1)
    queue.push("b", 2)
    expect(queue.take()).toBe(1)
    queue.push("a", 3)
    expect(drain(queue)).toEqual([2, 3])
    expect(queue.take()).toBeUndefined()
  })

  it("keeps order within a long lane across many takes", () => {
    const queue = new FairQueue<readonly [string, number]>()
    for (let index = 0; index < 10_000; index++) queue.push("a", ["a", index])
    for (let index = 0; index < 5_000; index++) queue.push("b", ["b", index])
    const out = drain(queue)
    const of = (lane: string) => out.filter(([name]) => name === lane).map(([, index]) => index)
    expect(of("a")).toEqual(Array.from({ length: 10_000 }, (_, index) => index))
    expect(of("b")).toEqual(Array.from({ length: 5_000 }, (_, index) => index))
    // Interleaved while both lanes had items.
    expect(out.slice(0, 4).map(([name]) => name)).toEqual(["a", "b", "a", "b"])
  })

  it("clear empties every lane and says how many items it dropped", () => {
    const queue = new FairQueue<number>()
    queue.push("a", 1)
    queue.push("b", 2)
    queue.push("b", 3)
    expect(queue.clear()).toBe(3)
    expect([queue.isEmpty, queue.peek()]).toEqual([true, undefined])
    queue.push("c", 4)
    expect(drain(queue)).toEqual([4])
  })
})

describe("BulkSenders", () => {
  it("a sender moves to the bulk connection with its first large frame and stays there", () => {
    const senders = new BulkSenders()
    expect(senders.classify("p#1", 100)).toBe(false)
    expect(senders.classify("p#1", BulkFrameBytes)).toBe(false)
    expect(senders.classify("p#1", BulkFrameBytes + 1)).toBe(true)
    expect(senders.classify("p#1", 10)).toBe(true)
    expect(senders.classify("q#1", 10)).toBe(false)
  })

  it("forgets the oldest senders beyond its capacity", () => {
    const senders = new BulkSenders()
    for (let index = 0; index <= 4096; index++) senders.classify(`s#${index}`, BulkFrameBytes + 1)
    expect(senders.classify("s#0", 10)).toBe(false)
    expect(senders.classify("s#4096", 10)).toBe(true)
  })
})
