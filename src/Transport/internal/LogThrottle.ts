/**
 * One log line per key per window: a flood of refused connections logs a line per source
 * address, not one per connection. Remembers a bounded number of keys.
 */
export class LogThrottle {
  private readonly last = new Map<string, number>()

  constructor(private readonly windowMs: number, private readonly capacity = 1024) {}

  /** True when a line for `key` may be logged at `now` (milliseconds). */
  allow(key: string, now: number): boolean {
    const at = this.last.get(key)
    if (at !== undefined && now - at < this.windowMs) return false
    if (this.last.size >= this.capacity) this.last.clear()
    this.last.set(key, now)
    return true
  }
}
