/**
 * How every admin list is paged (docs/contract.md §8, issue 38): `limit` items a page (1 to 100,
 * default 25) and `cursor`, the previous page's `next_cursor`; the answer is
 * `{object: "list", data, has_more, next_cursor}`. A cursor is the id of the item the next page starts
 * after (Stripe's `starting_after`, under the name the request log already used), so any id of the
 * list works as one. The stores read one row more than the page (LIMIT limit + 1) by keyset on an
 * index: a page costs its own size, never the table's.
 */
import { Effect, Schema } from "effect"
import { InvalidRequest } from "./errors.ts"

export const DEFAULT_PAGE_SIZE = 25
export const MAX_PAGE_SIZE = 100

/** `limit` as a query parameter: digits only, 1 to 100. */
export const PageLimit = Schema.compose(
  Schema.String.pipe(Schema.pattern(/^\d{1,3}$/, { message: () => `Expected an integer from 1 to ${MAX_PAGE_SIZE}` })),
  Schema.NumberFromString
).pipe(
  Schema.filter((n) => n >= 1 && n <= MAX_PAGE_SIZE, { message: (n) => `Expected an integer from 1 to ${MAX_PAGE_SIZE}, actual ${String(n)}` })
).annotations({ description: `Items a page: 1 to ${MAX_PAGE_SIZE}, default ${DEFAULT_PAGE_SIZE}.` })

/** `cursor` as a query parameter: an id (empty reads as none). */
export const PageCursor = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9_-]{0,64}$/, { message: () => "Expected the next_cursor of a page of this list (an id)" })
).annotations({ description: "The previous page's next_cursor: the id of the item this page starts after." })

/** What a caller asked of a list. */
export interface PageRequest {
  readonly cursor: string | undefined
  readonly limit: number
}

export const pageRequest = (params: { readonly limit?: number | undefined; readonly cursor?: string | undefined }): PageRequest => ({
  limit: params.limit ?? DEFAULT_PAGE_SIZE,
  cursor: params.cursor === "" ? undefined : params.cursor
})

export interface Page<A> {
  readonly data: ReadonlyArray<A>
  readonly has_more: boolean
  readonly next_cursor: string | null
}

/** A page from the rows a store read with LIMIT `limit + 1`: the extra row only says that more follow. */
export const pageOf = <R extends { readonly id: string }, A>(rows: ReadonlyArray<R>, limit: number, view: (row: R) => A): Page<A> => {
  const page = rows.slice(0, limit)
  const hasMore = rows.length > limit
  return { data: page.map(view), has_more: hasMore, next_cursor: hasMore ? page[page.length - 1]!.id : null }
}

/**
 * Where the page a request asks for starts: undefined for the first page, else the position of the
 * cursor's item, the one row `lookup` reads — and a 400 naming `cursor` when the list has no such item
 * (another list's id, another environment's key).
 */
export const cursorPosition = <P, R>(request: PageRequest, lookup: (cursor: string) => Effect.Effect<ReadonlyArray<P>, never, R>): Effect.Effect<P | undefined, InvalidRequest, R> => {
  const cursor = request.cursor
  if (cursor === undefined) return Effect.succeed(undefined)
  return Effect.flatMap(lookup(cursor), ([position]) =>
    position === undefined
      ? Effect.fail(new InvalidRequest({ message: `cursor ${cursor} is not an item of this list; pass a page's next_cursor.`, param: "cursor" }))
      : Effect.succeed(position))
}
