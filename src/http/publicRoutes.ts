/**
 * The public routes besides the two governed calls (docs/contract.md): the project-key reads (models,
 * rate cards, a request, its receipt, usage), routing evaluation, readiness, and the API's own
 * description (/openapi.json, /docs). Outputs are typed by the wire schemas (src/http/schemas.ts) the
 * document is generated from. The receipt keys and health are served by the HttpApi (./apiRoutes.ts).
 */
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Clock, Effect } from "effect"
import { InvalidRequest } from "../domain/errors.ts"
import { Gateway } from "../services/Gateway.ts"
import { Ledger } from "../services/Ledger.ts"
import { Pricing } from "../services/Pricing.ts"
import { RateLimiter } from "../services/RateLimiter.ts"
import { Requests } from "../services/Requests.ts"
import { Router } from "../services/Router.ts"
import { ChatStore } from "../store/ChatStore.ts"
import { openApiDocument } from "./api.ts"
import { authenticated, authenticatedPost, json, respondErrors } from "./caller.ts"
import { docsPage } from "./docs.ts"
import { header } from "./request.ts"
import type * as S from "./schemas.ts"

const routingEvaluate = authenticatedPost((principal, req, body, headers) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway
    const evaluation: typeof S.Evaluation.Type = yield* gateway.evaluate(principal, body, header(req, "x-max-credits"), headers)
    return HttpServerResponse.unsafeJson(evaluation, { headers })
  })
)

const STARTED = Math.floor(Date.now() / 1000)

const models = respondErrors(
  authenticated((principal) =>
    Effect.gen(function* () {
      const router = yield* Router
      const routes = yield* router.available(principal.projectId)
      const entry = (id: string, owner: string) => ({ id, object: "model" as const, created: STARTED, owned_by: owner })
      const data = routes.map((r) => entry(r.name, r.provider))
      if (routes.some((r) => r.auto)) data.unshift(entry("auto", "tollgate"))
      return json({ object: "list", data } satisfies typeof S.ModelList.Type)
    })
  )
)

const usage = respondErrors(
  authenticated((principal) =>
    Effect.gen(function* () {
      const ledger = yield* Ledger
      const query = yield* HttpServerRequest.ParsedSearchParams
      const requested = query.period
      const now = yield* Clock.currentTimeMillis
      const period = typeof requested === "string" ? requested : ledger.periodOf(now)
      if (!/^\d{4}-(0[1-9]|1[0-2])$/.test(period)) {
        return yield* new InvalidRequest({ message: "period must be a month written YYYY-MM.", param: "period" })
      }
      const window = yield* ledger.window(principal.projectId, period)
      const byModel = yield* ledger.usage({ projectId: principal.projectId, environment: principal.environment }, period)
      const sum = (f: (m: (typeof byModel)[number]) => number) => byModel.reduce((n, m) => n + f(m), 0)
      return json({
        object: "usage" as const,
        project_id: principal.projectId,
        environment: principal.environment,
        period,
        budget: {
          budget_credits: window.cap,
          spent: window.spent,
          reserved: window.reserved,
          remaining: Math.max(0, window.cap - window.spent - window.reserved)
        },
        requests: sum((m) => m.requests),
        credits: sum((m) => m.credits),
        tokens: {
          input: sum((m) => m.tokens.input),
          cached_input: sum((m) => m.tokens.cached_input),
          output: sum((m) => m.tokens.output),
          reasoning: sum((m) => m.tokens.reasoning)
        },
        by_model: byModel
      } satisfies typeof S.Usage.Type)
    })
  )
)

const requestParam = Effect.map(HttpRouter.params, (p) => p.id ?? "")

const getRequest = respondErrors(
  authenticated((principal) =>
    Effect.gen(function* () {
      const requests = yield* Requests
      const id = yield* requestParam
      const view: typeof S.RequestStatus.Type = yield* requests.find(id, { projectId: principal.projectId, environment: principal.environment })
      return json(view)
    })
  )
)

const getReceipt = respondErrors(
  authenticated((principal) =>
    Effect.gen(function* () {
      const ledger = yield* Ledger
      const id = yield* requestParam
      const receipt: typeof S.Receipt.Type = yield* ledger.receipt(id, { projectId: principal.projectId, environment: principal.environment })
      return json(receipt)
    })
  )
)

const rateCards = respondErrors(
  authenticated(() =>
    Effect.gen(function* () {
      const pricing = yield* Pricing
      const data = yield* pricing.published
      return json({ object: "list", data } satisfies typeof S.RateCards.Type)
    })
  )
)

/** Ready when the store can run the governed call's transactions (the store worker is up). */
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
  return health.ok ? json({ status: "ready", rate_limit: limit }) : json({ status: "unavailable", reason: health.reason, rate_limit: limit }, 503)
})

export const publicRoutes = HttpRouter.empty.pipe(
  HttpRouter.post("/v1/routing/evaluate", routingEvaluate),
  HttpRouter.get("/v1/models", models),
  HttpRouter.get("/v1/usage", usage),
  HttpRouter.get("/v1/requests/:id", getRequest),
  HttpRouter.get("/v1/requests/:id/receipt", getReceipt),
  HttpRouter.get("/v1/rate_cards", rateCards),
  HttpRouter.get("/openapi.json", Effect.succeed(json(openApiDocument))),
  HttpRouter.get("/docs", docsPage),
  HttpRouter.get("/readyz", readiness)
)
