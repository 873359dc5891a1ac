/**
 * The baseline every ratio is measured against: a bare Effect `Queue` hop between two fibers,
 * one offer and one take per message, through a bounded queue of 50 (the default window).
 */
import { Effect, Fiber, Queue } from "effect"
import { measure } from "./Row.js"

export const queueHop = (messages: number) =>
  measure(`baseline: bare Effect Queue hop (bounded 50)`, messages, Effect.gen(function*() {
    const queue = yield* Queue.bounded<number>(50)
    const taker = yield* Effect.fork(Effect.gen(function*() {
      for (let index = 0; index < messages; index++) yield* Queue.take(queue)
    }))
    for (let index = 0; index < messages; index++) yield* Queue.offer(queue, index)
    yield* Fiber.join(taker)
  }))
