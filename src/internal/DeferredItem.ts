/**
 * A message of a `sendAll` whose payload was checked when the call began and is encoded only
 * when a grant takes it.
 *
 * Why: a call's messages go out over many grants (a window of 50 takes a call of 1,000 in 20).
 * Encoded up front, all of a call's payloads lived until its last grant, outlived young-generation
 * collections, and V8 then allocated every encoded payload of that site straight into the old
 * generation: garbage collection took twice as long. Encoded per grant, a payload lives from its
 * grant to its confirmation, as a `send`'s does.
 */
import type { ProduceError } from "../Controller/internal/ProducerCalls.js"
import type { ProduceItem } from "../Controller/internal/ProducerHandshake.js"

/** Encodes a checked payload as the item a grant takes, or says why it no longer encodes. */
export type EncodeLater = (payload: unknown, messageId: string, trace: string | undefined) => ProduceItem | ProduceError

export class DeferredItem {
  constructor(
    readonly messageId: string,
    private readonly payload: unknown,
    private readonly trace: string | undefined,
    private readonly encode: EncodeLater
  ) {}

  /**
   * The encoded item. It fails only when the caller changed the payload after the check (a value
   * still being sent is the library's until its call returns).
   */
  take(): ProduceItem | ProduceError {
    return this.encode(this.payload, this.messageId, this.trace)
  }
}

/** What a sender hands the ingress: items encoded already, or checked and encoded when taken. */
export type OutgoingItem = ProduceItem | DeferredItem

/** True when taking failed (a `ProduceError`), for one item or for many. */
export const isTakeError = (taken: ProduceItem | ReadonlyArray<ProduceItem> | ProduceError): taken is ProduceError => "_tag" in taken

const isDeferred = (item: OutgoingItem): boolean => item instanceof DeferredItem

/** The item, encoded if it was deferred, or why it no longer encodes. */
const take = (item: OutgoingItem): ProduceItem | ProduceError => item instanceof DeferredItem ? item.take() : item

/**
 * The items from `from`, `count` of them, encoded; `items` itself when it holds them all and
 * none was deferred (the everyday `send` of one), else a new array. An error when one no longer
 * encodes.
 */
export const takeAll = (
  items: ReadonlyArray<OutgoingItem>,
  from = 0,
  count = items.length - from
): ReadonlyArray<ProduceItem> | ProduceError => {
  if (from === 0 && count === items.length && !items.some(isDeferred)) return items as ReadonlyArray<ProduceItem>
  const taken = new Array<ProduceItem>(count)
  for (let index = 0; index < count; index++) {
    const item = take(items[from + index])
    if (isTakeError(item)) return item
    taken[index] = item
  }
  return taken
}
