import { describe, expect, it } from "@effect/vitest"
import { SeqLog } from "../../src/Controller/internal/SeqLog.js"

const range = (from: number, to: number) => Array.from({ length: to - from }, (_, index) => from + index)

describe("SeqLog", () => {
  it("every view keeps its entries whatever later views append or drop (compaction included)", () => {
    let log = SeqLog.empty<number>()
    const views: Array<readonly [SeqLog<number>, ReadonlyArray<number>]> = []
    let next = 0
    for (let round = 0; round < 200; round++) {
      for (let index = 0; index < 1 + (round % 7); index++) log = log.append(next++)
      log = log.dropFront(round % 5)
      views.push([log, log.toArray()])
    }
    for (const [view, entries] of views) expect(view.toArray()).toEqual(entries)
    // A branch from an old view copies rather than writing into a slot a newer view owns.
    const [old, oldEntries] = views[50]
    const branch = old.append(-1)
    expect(branch.toArray()).toEqual([...oldEntries, -1])
    expect(views[51][0].toArray()).toEqual(views[51][1])
  })

  it("empty logs are one shared value that appends never write into; each append to one starts its own entries", () => {
    const first = SeqLog.empty<number>().append(1)
    const second = SeqLog.empty<number>().append(2).append(3)
    const emptied = second.dropFront(2).append(4)
    expect([first.toArray(), second.toArray(), emptied.toArray()]).toEqual([[1], [2, 3], [4]])
    expect(SeqLog.empty<number>().toArray()).toEqual([])
    expect(SeqLog.empty<number>()).toBe(SeqLog.empty<string>())
    // Nothing was ever written into the shared empty log's backing array.
    expect((SeqLog.empty<number>() as unknown as { readonly backing: ReadonlyArray<unknown> }).backing).toEqual([])
  })

  it("a long run of appends and drops reads back exactly what is live", () => {
    let log = SeqLog.empty<number>()
    for (let index = 0; index < 10_000; index++) log = log.append(index)
    log = log.dropFront(9_990)
    expect(log.toArray()).toEqual(range(9_990, 10_000))
    expect([log.first, log.last, log.at(3), log.at(10)]).toEqual([9_990, 9_999, 9_993, undefined])
  })

  it("drops its dead front once it reaches half the live part, so dropped entries are not pinned for long", () => {
    let log = SeqLog.empty<{ readonly big: number }>()
    for (let index = 0; index < 96; index++) log = log.append({ big: index })
    // Dropping a third of the log (32 of 96) leaves 64 live: the dead front is half of it.
    log = log.dropFront(32)
    const internals = log as unknown as { readonly backing: ReadonlyArray<unknown>; readonly offset: number }
    expect([internals.offset, internals.backing.length]).toEqual([0, 64])
    // A small dead front stays until it is worth copying the live part.
    log = log.dropFront(8)
    expect((log as unknown as { readonly offset: number }).offset).toBe(8)
  })
})
