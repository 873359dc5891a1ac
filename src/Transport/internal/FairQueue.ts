/**
 * An outgoing queue shared by several senders, taken in turn: one lane per sender (FIFO inside
 * the lane), and `take` serves the non-empty lanes round-robin. One connection carries every
 * flow between two nodes, so a flow with a window of large chunks queued must not hold back the
 * small messages of another flow behind all of them: here a small message waits for at most one
 * item of each other lane.
 *
 * Lanes exist only while they hold something, so a queue that drains keeps nothing about its
 * past senders.
 */

class Lane<A> {
  private items: Array<A> = []
  private head = 0
  constructor(readonly key: unknown) {}

  get isEmpty(): boolean {
    return this.head === this.items.length
  }

  peek(): A {
    return this.items[this.head]
  }

  push(item: A): void {
    this.items.push(item)
  }

  shift(): A {
    const item = this.items[this.head]
    this.head++
    if (this.head === this.items.length) {
      this.items = []
      this.head = 0
    } else if (this.head > 32 && 2 * this.head >= this.items.length) {
      // Taken slots still reference their items: drop them once they are half the array.
      this.items = this.items.slice(this.head)
      this.head = 0
    }
    return item
  }
}

export class FairQueue<A> {
  private readonly lanes = new Map<unknown, Lane<A>>()
  /** The non-empty lanes, in turn order; `turn` indexes the one served next. */
  private ring: Array<Lane<A>> = []
  private turn = 0
  /** Items queued over all lanes. */
  size = 0

  get isEmpty(): boolean {
    return this.size === 0
  }

  /** Queues `item` at the end of `key`'s lane (keys compare by identity). */
  push(key: unknown, item: A): void {
    let lane = this.lanes.get(key)
    if (lane === undefined) {
      lane = new Lane(key)
      this.lanes.set(key, lane)
      this.ring.push(lane)
    }
    lane.push(item)
    this.size++
  }

  /** The item `take` would return next; undefined when empty. */
  peek(): A | undefined {
    return this.size === 0 ? undefined : this.ring[this.turn].peek()
  }

  /** Takes the head of the lane whose turn it is and passes the turn on. */
  take(): A | undefined {
    if (this.size === 0) return undefined
    const lane = this.ring[this.turn]
    const item = lane.shift()
    this.size--
    if (lane.isEmpty) {
      this.lanes.delete(lane.key)
      this.ring.splice(this.turn, 1)
    } else {
      this.turn++
    }
    if (this.turn >= this.ring.length) this.turn = 0
    return item
  }

  /** Empties the queue; returns how many items it held. */
  clear(): number {
    const dropped = this.size
    this.lanes.clear()
    this.ring = []
    this.turn = 0
    this.size = 0
    return dropped
  }
}
