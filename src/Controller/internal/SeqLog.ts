/**
 * An immutable, contiguous run of entries with O(1) amortized append and drop-front.
 *
 * Views share one backing array. Appending to a view whose end is the end of the backing array
 * writes in place: no older view can see the new slot, because each view only reads its own
 * range. Appending to a view that is no longer the newest (someone already appended past it)
 * copies first, so every view keeps value semantics and a model test may branch from any state.
 */
export class SeqLog<A> {
  private constructor(
    private readonly backing: Array<A>,
    private readonly offset: number,
    readonly length: number
  ) {}

  /** One empty log serves every caller: `append` never writes to an empty log's backing array. */
  private static readonly none = new SeqLog<never>([], 0, 0)

  static empty<A>(): SeqLog<A> {
    return SeqLog.none
  }

  static from<A>(items: ReadonlyArray<A>): SeqLog<A> {
    return new SeqLog<A>(items.slice(), 0, items.length)
  }

  get isEmpty(): boolean {
    return this.length === 0
  }

  /** The entry at position `index` (0 is the front), or undefined. */
  at(index: number): A | undefined {
    return index >= 0 && index < this.length ? this.backing[this.offset + index] : undefined
  }

  get first(): A | undefined {
    return this.at(0)
  }

  get last(): A | undefined {
    return this.at(this.length - 1)
  }

  append(item: A): SeqLog<A> {
    // An empty log starts a backing array of its own, with the one slot it needs: a first push
    // onto an empty array makes room for 17, and a log that empties after every entry (a
    // consumer's, one message at a time) paid that for each.
    if (this.length === 0) return new SeqLog([item], 0, 1)
    const end = this.offset + this.length
    if (this.backing.length === end) {
      this.backing.push(item)
      return new SeqLog(this.backing, this.offset, this.length + 1)
    }
    const copy = this.backing.slice(this.offset, end)
    copy.push(item)
    return new SeqLog(copy, 0, copy.length)
  }

  /**
   * Drops `count` entries from the front; compacts the backing array once the dead front is more
   * half the live part or more (amortized O(1) per entry). Dead slots still reference their entries
   * until then, so a log of large payloads (chunks of big messages) pins at most half again what
   * it holds.
   */
  dropFront(count: number): SeqLog<A> {
    if (count <= 0) return this
    if (count >= this.length) return SeqLog.empty()
    const offset = this.offset + count
    const length = this.length - count
    if (offset > 8 && 2 * offset >= length) {
      return new SeqLog(this.backing.slice(offset, offset + length), 0, length)
    }
    return new SeqLog(this.backing, offset, length)
  }

  /** Entries from position `from` (inclusive) to `to` (exclusive), as a fresh array. */
  slice(from: number, to: number = this.length): Array<A> {
    const start = Math.max(0, from)
    const end = Math.min(this.length, to)
    return end > start ? this.backing.slice(this.offset + start, this.offset + end) : []
  }

  toArray(): Array<A> {
    return this.slice(0)
  }
}
