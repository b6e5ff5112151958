/**
 * What every admin API group (src/http/adminApi.ts, src/http/webhooksApi.ts) declares alike: an id in
 * a path, the page query of a list, and an error body in the `AdminError` family.
 */
import { Schema } from "effect"
import { PageCursor, PageLimit } from "../domain/paging.ts"
import { errorBodyOf } from "./schemas.ts"

/** An id in a path: letters, digits, `_` and `-`, at most 64 (anything else, a NUL say, is a 400 naming it, never a store error). */
export const PathId = (description: string) => Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9_-]{1,64}$/)).annotations({ description })

/** The query of every admin list: `limit` and `cursor` (src/domain/paging.ts). */
export const PageParams = { limit: Schema.optional(PageLimit), cursor: Schema.optional(PageCursor) }

/** An admin error's body, named in the OpenAPI document with the admin family. */
export const adminErrorAt = (errorClass: Schema.Schema.All, description: string) => errorBodyOf(errorClass, description, "AdminError")
