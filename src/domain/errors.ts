/**
 * One TaggedError per stable error code (docs/contract.md §9, §6).
 * The tag names the failure; `src/http/errors.ts` is the one place that turns them into wire bodies.
 */
import { Schema } from "effect"

/** 401 invalid_api_key: key missing, malformed, unknown, revoked, expired, or scoped to another project. */
export class InvalidApiKey extends Schema.TaggedError<InvalidApiKey>()("InvalidApiKey", {
  message: Schema.String
}) {}

/** 402 budget_exceeded: the worst case does not fit the project's remaining budget or the client's max_credits. */
export class BudgetExceeded extends Schema.TaggedError<BudgetExceeded>()("BudgetExceeded", {
  message: Schema.String,
  param: Schema.NullOr(Schema.String)
}) {}

/** 404 request_not_found: no governed request with that ID in the caller's tenant scope. */
export class RequestNotFound extends Schema.TaggedError<RequestNotFound>()("RequestNotFound", {
  message: Schema.String
}) {}

/** 409 idempotency_conflict: the key was used with another payload (or is still in flight past the wait bound). */
export class IdempotencyConflict extends Schema.TaggedError<IdempotencyConflict>()("IdempotencyConflict", {
  message: Schema.String,
  /**
   * Set when the key's original is still in flight (the wait for it ran out): retrying later will
   * get its result, so the answer says when (Retry-After) and that a retry helps. Absent for a key
   * reused with another body, which no retry can fix.
   */
  retryAfterMs: Schema.optional(Schema.Number)
}) {}

/** 422 unsupported_workflow: outside the text-only scope of the connected beta. */
export class UnsupportedWorkflow extends Schema.TaggedError<UnsupportedWorkflow>()("UnsupportedWorkflow", {
  message: Schema.String,
  param: Schema.NullOr(Schema.String)
}) {}

/** 429 rate_limited: the project's rate check rejected the burst. */
export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", {
  message: Schema.String,
  retryAfterMs: Schema.Number
}) {}

/** 503 route_unavailable: no available route for the requested model (unknown, failing, or open breaker). */
export class RouteUnavailable extends Schema.TaggedError<RouteUnavailable>()("RouteUnavailable", {
  message: Schema.String,
  /** false when retrying cannot help (an unknown route name). */
  retryable: Schema.Boolean
}) {}

/** 400 invalid_request_error: malformed JSON or fields, or an upstream 4xx caused by the client's request. */
export class InvalidRequest extends Schema.TaggedError<InvalidRequest>()("InvalidRequest", {
  message: Schema.String,
  param: Schema.NullOr(Schema.String)
}) {}

/** 413: the request body is larger than the configured limit. */
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", {
  message: Schema.String
}) {}

/** 404 not_found on the admin API (project or key id unknown). */
export class AdminNotFound extends Schema.TaggedError<AdminNotFound>()("AdminNotFound", {
  message: Schema.String
}) {}

/** 401 on the admin API: missing or wrong admin token. */
export class AdminUnauthorized extends Schema.TaggedError<AdminUnauthorized>()("AdminUnauthorized", {
  message: Schema.String
}) {}

/** 409 on the admin API: the key cannot be rotated/revoked in its current state. */
export class AdminConflict extends Schema.TaggedError<AdminConflict>()("AdminConflict", {
  message: Schema.String
}) {}

export type GovernanceError =
  | InvalidApiKey
  | BudgetExceeded
  | RequestNotFound
  | IdempotencyConflict
  | UnsupportedWorkflow
  | RateLimited
  | RouteUnavailable
  | InvalidRequest
  | PayloadTooLarge

export type AdminError = AdminNotFound | AdminUnauthorized | AdminForbidden | AdminConflict | InvalidRequest | PayloadTooLarge

/** 403 on the admin API: a signed-in session may not do this (a team's read-only session, a missing or forged CSRF token). */
export class AdminForbidden extends Schema.TaggedError<AdminForbidden>()("AdminForbidden", {
  message: Schema.String,
  code: Schema.Literal("forbidden", "invalid_csrf_token")
}) {}
