/**
 * `Either.isEither` for the hot path, where a value is known to be an `Either` or an `Effect`
 * (or a `Deferred`). `Either.isEither` is a `dual`-wrapped `in` check that several call sites
 * share, so it is slow there; an `Either`'s `_tag` ("Right" or "Left") is its public
 * discriminant, and no effect or `Deferred` carries either tag.
 */
import type { Either } from "effect"

export const isEitherOf = <R, L>(value: Either.Either<R, L> | object): value is Either.Either<R, L> => {
  const tag = (value as { readonly _tag?: unknown })._tag
  return tag === "Right" || tag === "Left"
}
