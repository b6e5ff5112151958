/**
 * The wire mapping of every error class (docs/contract.md §9): the status, OpenAI `type` and `code`
 * each class carries (src/domain/errors.ts) and what src/http/errors.ts makes of an instance —
 * body fields and the retry headers. The expected table is the contract's, written out here once.
 */
import { HttpApiSchema } from "@effect/platform"
import { describe, expect, it } from "vitest"
import * as E from "../../src/domain/errors.ts"
import { wireError } from "../../src/http/errors.ts"
import * as S from "../../src/http/schemas.ts"

const noRetry = { "x-should-retry": "false" }

/** One instance of every class, and what the contract says a client gets for it. */
const cases: ReadonlyArray<readonly [E.TollgateError, { status: number; type: string; code: string; param: string | null; headers: Record<string, string> }]> = [
  [new E.InvalidApiKey({ message: "m" }), { status: 401, type: "invalid_request_error", code: "invalid_api_key", param: null, headers: noRetry }],
  [new E.BudgetExceeded({ message: "m", param: "max_credits" }), { status: 402, type: "budget_error", code: "budget_exceeded", param: "max_credits", headers: noRetry }],
  [new E.RequestNotFound({ message: "m" }), { status: 404, type: "invalid_request_error", code: "request_not_found", param: null, headers: noRetry }],
  [new E.IdempotencyConflict({ message: "m" }), { status: 409, type: "invalid_request_error", code: "idempotency_conflict", param: null, headers: noRetry }],
  [
    new E.IdempotencyConflict({ message: "m", retryAfterMs: 1_200 }),
    { status: 409, type: "invalid_request_error", code: "idempotency_conflict", param: null, headers: { "retry-after": "2", "retry-after-ms": "1200", "x-should-retry": "true" } }
  ],
  [new E.UnsupportedWorkflow({ message: "m", param: "audio" }), { status: 422, type: "invalid_request_error", code: "unsupported_workflow", param: "audio", headers: noRetry }],
  [
    new E.RateLimited({ message: "m", retryAfterMs: 250 }),
    { status: 429, type: "rate_limit_error", code: "rate_limited", param: null, headers: { "retry-after": "1", "retry-after-ms": "250", "x-ratelimit-remaining-requests": "0" } }
  ],
  [new E.RouteUnavailable({ message: "m", retryable: true }), { status: 503, type: "server_error", code: "route_unavailable", param: null, headers: {} }],
  [new E.RouteUnavailable({ message: "m", retryable: false }), { status: 503, type: "server_error", code: "route_unavailable", param: null, headers: noRetry }],
  [new E.InvalidRequest({ message: "m", param: "model" }), { status: 400, type: "invalid_request_error", code: "invalid_request_error", param: "model", headers: noRetry }],
  [new E.PayloadTooLarge({ message: "m" }), { status: 413, type: "invalid_request_error", code: "request_too_large", param: null, headers: noRetry }],
  [new E.AdminNotFound({ message: "m" }), { status: 404, type: "invalid_request_error", code: "not_found", param: null, headers: noRetry }],
  [new E.AdminUnauthorized({ message: "m" }), { status: 401, type: "invalid_request_error", code: "invalid_admin_token", param: null, headers: noRetry }],
  [new E.AdminForbidden({ message: "m", code: "forbidden" }), { status: 403, type: "invalid_request_error", code: "forbidden", param: null, headers: noRetry }],
  [new E.AdminForbidden({ message: "m", code: "invalid_csrf_token" }), { status: 403, type: "invalid_request_error", code: "invalid_csrf_token", param: null, headers: noRetry }],
  [new E.AdminConflict({ message: "m" }), { status: 409, type: "invalid_request_error", code: "conflict", param: null, headers: noRetry }],
  [
    new E.ServerOverloaded({ message: "m", retryAfterMs: 1000 }),
    { status: 503, type: "server_error", code: "server_overloaded", param: null, headers: { "retry-after": "1", "retry-after-ms": "1000", "x-should-retry": "true" } }
  ],
  [
    new E.StoreUnavailable({ message: "m", retryAfterMs: 1000 }),
    { status: 503, type: "server_error", code: "store_unavailable", param: null, headers: { "retry-after": "1", "retry-after-ms": "1000", "x-should-retry": "true" } }
  ]
]

describe("error classes carry their wire form", () => {
  it("every class has a case here", () => {
    expect(new Set(cases.map(([e]) => e._tag))).toEqual(new Set(Object.keys(E.errorClasses)))
  })

  it.each(cases.map(([e, want]) => [`${e._tag} ${JSON.stringify(want.headers)}`, e, want] as const))("%s", (_name, error, want) => {
    expect(wireError(error)).toEqual({ ...want, message: "m" })
  })

  it("the class's status is the platform's annotation, which the OpenAPI document reads", () => {
    for (const [tag, errorClass] of Object.entries(E.errorClasses)) {
      const [, want] = cases.find(([e]) => e._tag === tag)!
      expect(HttpApiSchema.getStatusError(errorClass), tag).toBe(want.status)
    }
  })

  it("the documented error bodies take status and code from the class", () => {
    const documented = [
      [S.Errors.budgetExceeded, 402, "Error402_budget_exceeded"],
      [S.Errors.rateLimited, 429, "Error429_rate_limited"],
      [S.Errors.invalidApiKey, 401, "Error401_invalid_api_key"],
      [S.Errors.tooLarge, 413, "Error413_request_too_large"]
    ] as const
    for (const [schema, status, identifier] of documented) {
      expect(HttpApiSchema.getStatusError(schema)).toBe(status)
      expect(schema.ast.annotations[Symbol.for("effect/annotation/Identifier")]).toBe(identifier)
    }
  })
})
