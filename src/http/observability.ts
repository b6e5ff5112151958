/**
 * What operators see of the HTTP surface: GET /metrics, the bounded endpoint label, and per request
 * one metric update and one access log line (`observed`). The fast path (src/http/fast.ts) writes
 * the same metric and log line with `endpointLabel` and `logAccess`.
 */
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, Either, FiberRef, Option, Redacted } from "effect"
import { hashSecret, sameHash } from "../domain/apiKey.ts"
import { Settings } from "../domain/config.ts"
import { AuthThrottle } from "../services/AuthThrottle.ts"
import { Bootstrap } from "../services/Bootstrap.ts"
import { Metrics } from "../services/Metrics.ts"
import { CurrentCaller } from "./caller.ts"
import { errorResponse, wireError } from "./errors.ts"
import { pathOf } from "./path.ts"
import { header } from "./request.ts"
import { clientOf } from "./session.ts"

/**
 * GET /metrics carries every project's id and spend: it answers only `Authorization: Bearer` with
 * TOLLGATE_METRICS_TOKEN (for the scraper) or the admin token, compared in constant time; a wrong
 * token is throttled with the admin token's other guesses (../services/AuthThrottle.ts).
 */
const metrics = Effect.gen(function* () {
  const settings = yield* Settings
  const bootstrap = yield* Bootstrap
  const req = yield* HttpServerRequest.HttpServerRequest
  const authorization = header(req, "authorization")
  const token = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? "")?.[1]
  const scraper = Option.isSome(settings.metricsToken) && token !== undefined && sameHash(hashSecret(token), hashSecret(Redacted.value(settings.metricsToken.value)))
  if (scraper) return yield* metricsText
  // Any other token is a guess at the admin token: throttled as the admin API's bearer is (429 before the check).
  const admin = yield* Effect.either(
    authorization === undefined
      ? bootstrap.authorizeAdmin(authorization)
      : (yield* AuthThrottle).guard({ surface: "admin_token", address: (yield* clientOf(req)).address, credential: { kind: "admin_token" } }, bootstrap.authorizeAdmin(authorization))
  )
  if (Either.isLeft(admin) && admin.left._tag === "RateLimited") return errorResponse(wireError(admin.left))
  if (Either.isLeft(admin)) {
    return errorResponse({
      status: 401,
      type: "invalid_request_error",
      code: "invalid_metrics_token",
      message: "GET /metrics needs 'Authorization: Bearer <token>' with TOLLGATE_METRICS_TOKEN or the admin token.",
      param: null,
      headers: { "www-authenticate": "Bearer" }
    })
  }
  return yield* metricsText
})

const metricsText = Effect.map(Metrics, (m) => HttpServerResponse.text(m.render(), { contentType: "text/plain; version=0.0.4" }))

export const metricsRoutes = HttpRouter.empty.pipe(HttpRouter.get("/metrics", metrics))

/** A bounded label for a request path (ids folded), for metrics and logs. */
export const endpointLabel = (url: string): string => {
  const path = pathOf(url)
  if (path.startsWith("/v1/requests/")) return path.endsWith("/receipt") ? "/v1/requests/{id}/receipt" : "/v1/requests/{id}"
  if (path.startsWith("/admin/v1/")) return path.replace(/\/(prj|key|req)_[a-z2-7]+/g, "/{id}")
  if (path === "/dashboard" || path.startsWith("/dashboard/")) return "/dashboard"
  return KNOWN_PATHS.has(path) ? path : "other"
}
const KNOWN_PATHS = new Set([
  "/v1/chat/completions", "/v1/responses", "/v1/models", "/v1/usage", "/v1/routing/evaluate", "/v1/receipts/keys",
  "/v1/rate_cards", "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"
])

/**
 * One access log line, written directly in Logger.json's shape: the Effect logger costs ≈ 140 µs a
 * line (bench/README.md). The caller is a key id and project, never the secret.
 */
export const logAccess = (
  method: string,
  endpoint: string,
  status: number,
  seconds: number,
  requestId: string | undefined,
  caller: { readonly keyId: string; readonly projectId: string } | undefined
): void =>
  console.log(
    JSON.stringify({
      message: "request",
      logLevel: "INFO",
      timestamp: new Date().toISOString(),
      annotations: {
        method,
        endpoint,
        status,
        duration_ms: Math.round(seconds * 10_000) / 10,
        request_id: requestId ?? null,
        key_id: caller?.keyId ?? null,
        project_id: caller?.projectId ?? null
      }
    })
  )

/** An app observed: per request one metric update and, when enabled, one access log line. */
export const observed = <E, R>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
  Effect.gen(function* () {
    const settings = yield* Settings
    const metrics = yield* Metrics
    const req = yield* HttpServerRequest.HttpServerRequest
    const start = performance.now()
    const response = yield* app
    const seconds = (performance.now() - start) / 1000
    const endpoint = endpointLabel(req.url)
    metrics.request(endpoint, response.status, seconds)
    if (settings.accessLog) {
      const caller = yield* FiberRef.get(CurrentCaller)
      logAccess(req.method, endpoint, response.status, seconds, response.headers["x-request-id"], caller)
    }
    return response
  })
