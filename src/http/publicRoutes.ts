/**
 * The public routes outside the HttpApi's groups: readiness and the API's own description
 * (/openapi.json, /docs); and routing evaluation's handler, which the HttpApi's governed group serves
 * raw (./apiRoutes.ts). The project-key reads, receipt keys and health are served by the HttpApi.
 */
import { HttpRouter, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { Gateway } from "../services/Gateway.ts"
import { RateLimiter } from "../services/RateLimiter.ts"
import { ChatStore } from "../store/ChatStore.ts"
import { openApiDocument } from "./api.ts"
import { authenticatedPost, json } from "./caller.ts"
import { docsPage } from "./docs.ts"
import { header } from "./request.ts"
import type * as S from "./schemas.ts"

export const routingEvaluate = authenticatedPost((principal, req, body, headers) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway
    const evaluation: typeof S.Evaluation.Type = yield* gateway.evaluate(principal, body, header(req, "x-max-credits"), headers)
    return HttpServerResponse.unsafeJson(evaluation, { headers })
  })
)

/**
 * Ready when the store can run the governed call's transactions (the store worker is up; PostgreSQL
 * served the latest ones, src/store/pgPool.ts).
 */
// A rate limit kept by the fallback (Redis unreachable) is still served, conservatively: ready, and said.
const readiness = Effect.map(Effect.zip(ChatStore, RateLimiter), ([store, limiter]) => {
  const health = store.health()
  const rateLimit = limiter.health()
  const limit =
    rateLimit.mode === "local"
      ? { mode: "local" }
      : rateLimit.degraded
        ? { mode: "shared", status: "degraded", reason: rateLimit.reason, fallback: `each instance admits 1/${rateLimit.share} of the limit` }
        : { mode: "shared", status: "ok" }
  if (!health.ok) return json({ status: "unavailable", reason: health.reason, rate_limit: limit }, 503)
  // A store serving with trouble (PostgreSQL refusing some connections) stays ready, and says so.
  return json({ status: "ready", store: health.degraded === undefined ? { status: "ok" } : { status: "degraded", reason: health.degraded }, rate_limit: limit })
})

export const publicRoutes = HttpRouter.empty.pipe(
  HttpRouter.get("/openapi.json", Effect.succeed(json(openApiDocument))),
  HttpRouter.get("/docs", docsPage),
  HttpRouter.get("/readyz", readiness)
)
