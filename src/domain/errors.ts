/**
 * One TaggedError per stable error code (docs/contract.md §9, §6). Each class carries what it is on
 * the wire — its HTTP status (the platform's `HttpApiSchema` status annotation, which the OpenAPI
 * document reads too) and its OpenAI `type` and `code` — so one place says "402".
 * `src/http/errors.ts` derives the wire body from it; `src/http/schemas.ts` the documented errors.
 */
import { HttpApiSchema } from "@effect/platform"
import { Schema, SchemaAST } from "effect"

/** The OpenAI `type` and stable `code` of an error class (its status is the platform's annotation). */
export interface WireCode {
  readonly type: "invalid_request_error" | "budget_error" | "rate_limit_error" | "server_error"
  readonly code: string
}

const WireCodeId: unique symbol = Symbol.for("tollgate/domain/errors/WireCode")

/** The annotations of an error class: its status, type and code. */
const wire = <A>(status: number, type: WireCode["type"], code: string): Schema.Annotations.Schema<A> => ({
  [HttpApiSchema.AnnotationStatus]: status,
  [WireCodeId]: { type, code } satisfies WireCode
})

/** 401 invalid_api_key: key missing, malformed, unknown, revoked, expired, or scoped to another project. */
export class InvalidApiKey extends Schema.TaggedError<InvalidApiKey>()("InvalidApiKey", {
  message: Schema.String
}, wire(401, "invalid_request_error", "invalid_api_key")) {}

/** 402 budget_exceeded: the worst case does not fit the project's remaining budget or the client's max_credits. */
export class BudgetExceeded extends Schema.TaggedError<BudgetExceeded>()("BudgetExceeded", {
  message: Schema.String,
  param: Schema.NullOr(Schema.String)
}, wire(402, "budget_error", "budget_exceeded")) {}

/** 404 request_not_found: no governed request with that ID in the caller's tenant scope. */
export class RequestNotFound extends Schema.TaggedError<RequestNotFound>()("RequestNotFound", {
  message: Schema.String
}, wire(404, "invalid_request_error", "request_not_found")) {}

/** 409 idempotency_conflict: the key was used with another payload (or is still in flight past the wait bound). */
export class IdempotencyConflict extends Schema.TaggedError<IdempotencyConflict>()("IdempotencyConflict", {
  message: Schema.String,
  /**
   * Set when the key's original is still in flight (the wait for it ran out): retrying later will
   * get its result, so the answer says when (Retry-After) and that a retry helps. Absent for a key
   * reused with another body, which no retry can fix.
   */
  retryAfterMs: Schema.optional(Schema.Number)
}, wire(409, "invalid_request_error", "idempotency_conflict")) {}

/** 422 unsupported_workflow: outside the text-only scope of the connected beta. */
export class UnsupportedWorkflow extends Schema.TaggedError<UnsupportedWorkflow>()("UnsupportedWorkflow", {
  message: Schema.String,
  param: Schema.NullOr(Schema.String)
}, wire(422, "invalid_request_error", "unsupported_workflow")) {}

/** 429 rate_limited: the project's rate check rejected the burst. */
export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", {
  message: Schema.String,
  retryAfterMs: Schema.Number,
  /**
   * The limit that refused (issue 41 item 3): its scope and field, `project.rate_limit.requests_per_minute`,
   * `project.rate_limit.tokens_per_minute`, `key.rate_limit.max_concurrent`,
   * `route.rate_limit.requests_per_minute`…; the wire's `param` (none: the admin sign-in throttle).
   */
  param: Schema.optional(Schema.String),
  /** That limit's own x-ratelimit-* headers (the tokens' ones), sent instead of the requests' remaining 0. */
  limitHeaders: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String })),
  /** false: waiting cannot help (an estimate larger than the whole limit): answered with x-should-retry: false, no Retry-After. */
  retryable: Schema.optional(Schema.Boolean)
}, wire(429, "rate_limit_error", "rate_limited")) {}

/** 503 route_unavailable: no available route for the requested model (unknown, failing, or open breaker). */
export class RouteUnavailable extends Schema.TaggedError<RouteUnavailable>()("RouteUnavailable", {
  message: Schema.String,
  /** false when retrying cannot help (an unknown route name). */
  retryable: Schema.Boolean
}, wire(503, "server_error", "route_unavailable")) {}

/** 400 invalid_request_error: malformed JSON or fields, or an upstream 4xx caused by the client's request. */
export class InvalidRequest extends Schema.TaggedError<InvalidRequest>()("InvalidRequest", {
  message: Schema.String,
  param: Schema.NullOr(Schema.String)
}, wire(400, "invalid_request_error", "invalid_request_error")) {}

/** 413: the request body is larger than the configured limit. */
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", {
  message: Schema.String
}, wire(413, "invalid_request_error", "request_too_large")) {}

/** 404 not_found on the admin API (project or key id unknown). */
export class AdminNotFound extends Schema.TaggedError<AdminNotFound>()("AdminNotFound", {
  message: Schema.String
}, wire(404, "invalid_request_error", "not_found")) {}

/** 401 on the admin API: missing or wrong admin token. */
export class AdminUnauthorized extends Schema.TaggedError<AdminUnauthorized>()("AdminUnauthorized", {
  message: Schema.String
}, wire(401, "invalid_request_error", "invalid_admin_token")) {}

/** 409 on the admin API: the key cannot be rotated/revoked in its current state. */
export class AdminConflict extends Schema.TaggedError<AdminConflict>()("AdminConflict", {
  message: Schema.String
}, wire(409, "invalid_request_error", "conflict")) {}

/**
 * 503 store_unavailable: the gateway's database refused or dropped its connections, or no connection
 * came free within the bound (TOLLGATE_PG_ACQUIRE_TIMEOUT_MS). Nothing is held for the call when it is
 * answered; a retry with the same idempotency key runs again, or replays a call that did complete.
 * The store raises it as a defect (src/store/storeFaults.ts): the catch-alls answer it as this error.
 */
export class StoreUnavailable extends Schema.TaggedError<StoreUnavailable>()("StoreUnavailable", {
  message: Schema.String,
  retryAfterMs: Schema.Number
}, wire(503, "server_error", "store_unavailable")) {}

/**
 * 503 server_overloaded (DESIGN §12): the wait for the store — a lane's queue, a connection of the
 * pool, a hot row's lock — would pass its bound (TOLLGATE_PG_MAX_WAIT_MS, TOLLGATE_PG_MAX_QUEUED), so
 * the call is refused before any money moved: no hold, no idempotency claim, no request row (the
 * rate-limit token the call took stays taken). A retry after Retry-After, with the same idempotency
 * key, runs the call afresh. The store raises it as a defect (src/store/pgChatStore.ts); the Gateway
 * answers it as this error (docs/decisions/0046).
 */
export class ServerOverloaded extends Schema.TaggedError<ServerOverloaded>()("ServerOverloaded", {
  message: Schema.String,
  retryAfterMs: Schema.Number
}, wire(503, "server_error", "server_overloaded")) {}

export type GovernanceError =
  | InvalidApiKey
  | BudgetExceeded
  | RequestNotFound
  | IdempotencyConflict
  | UnsupportedWorkflow
  | RateLimited
  | RouteUnavailable
  | ServerOverloaded
  | InvalidRequest
  | PayloadTooLarge

export type AdminError = AdminNotFound | AdminUnauthorized | AdminForbidden | AdminConflict | InvalidRequest | PayloadTooLarge

/** 403 on the admin API: a signed-in session may not do this (a team's read-only session, a missing or forged CSRF token). */
export class AdminForbidden extends Schema.TaggedError<AdminForbidden>()("AdminForbidden", {
  message: Schema.String,
  code: Schema.Literal("forbidden", "invalid_csrf_token")
}, wire(403, "invalid_request_error", "forbidden")) {}

/** Every error an HTTP answer can carry. */
export type TollgateError = GovernanceError | AdminError | StoreUnavailable

/** Every error class by tag: the wire mapping reads a failure's class here. */
export const errorClasses = {
  InvalidApiKey,
  BudgetExceeded,
  RequestNotFound,
  IdempotencyConflict,
  UnsupportedWorkflow,
  RateLimited,
  RouteUnavailable,
  ServerOverloaded,
  InvalidRequest,
  PayloadTooLarge,
  AdminNotFound,
  AdminUnauthorized,
  AdminForbidden,
  AdminConflict,
  StoreUnavailable
} as const satisfies { readonly [Tag in TollgateError["_tag"]]: Schema.Schema.All }

/** A failure that is one of the classes above (an HTTP answer may carry it). */
export const isTollgateError = (u: unknown): u is TollgateError => {
  if (typeof u !== "object" || u === null) return false
  // Its class by its tag, one lookup (own keys only: a `_tag` of "constructor" names no class here).
  const tag = (u as { readonly _tag?: unknown })._tag
  return typeof tag === "string" && Object.hasOwn(errorClasses, tag) && u instanceof (errorClasses as Record<string, new (...args: never) => unknown>)[tag]!
}

/** An error class's status, from its annotation (src/http/errors.ts, src/http/schemas.ts). */
export const statusOf = (errorClass: Schema.Schema.All): number => HttpApiSchema.getStatusError(errorClass)

/** An error class's OpenAI type and code, from its annotation. */
export const wireCodeOf = (errorClass: Schema.Schema.All): WireCode => {
  const ast = errorClass.ast
  const found = SchemaAST.getAnnotation<WireCode>(ast._tag === "Transformation" ? ast.to : ast, WireCodeId)
  if (found._tag === "None") throw new Error(`${String(ast)} carries no wire code`)
  return found.value
}
