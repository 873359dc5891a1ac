/**
 * The delivery guarantees every multi-node test checks: all of 0..total-1 delivered, and each
 * consumer incarnation saw a contiguous, increasing run that starts no later than one past what
 * earlier incarnations reached (redelivery after a restart is allowed, a gap never is).
 */
export interface Received {
  readonly incarnation: number
  readonly index: number
}

/** The first broken guarantee, or undefined. `exactlyOnce` when no side ever restarted. */
export const deliveryViolation = (
  received: ReadonlyArray<Received>,
  total: number,
  exactlyOnce = false
): string | undefined => {
  const seen = new Set(received.map((entry) => entry.index))
  for (let index = 0; index < total; index++) {
    if (!seen.has(index)) return `message ${index} never delivered (${seen.size} of ${total} distinct)`
  }
  if (exactlyOnce && received.length !== total) return `${received.length} deliveries for ${total} messages`
  const incarnations = [...new Set(received.map((entry) => entry.incarnation))].sort((a, b) => a - b)
  let reached = -1
  for (const incarnation of incarnations) {
    const mine = received.filter((entry) => entry.incarnation === incarnation).map((entry) => entry.index)
    if (mine[0] > reached + 1) return `incarnation ${incarnation} started at ${mine[0]}, after ${reached}: a gap`
    for (let position = 1; position < mine.length; position++) {
      if (mine[position] !== mine[position - 1] + 1) {
        return `incarnation ${incarnation} jumped from ${mine[position - 1]} to ${mine[position]}`
      }
    }
    reached = Math.max(reached, mine[mine.length - 1])
  }
  return undefined
}
