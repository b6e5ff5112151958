/**
 * HTTP surface on @effect/platform's HttpRouter (HttpRouter costs less per request than HttpApi
 * decoding). Handlers are thin: read, call a service, write. Every failure, including unknown routes
 * and defects, leaves through src/http/errors.ts as an OpenAI error body. In the running server the
 * two governed endpoints are served by src/http/fast.ts from the same `governedCalls`; their routes
 * here stay for the OpenAPI document, router tests and as the reference the fast path is tested against.
 */
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Cause, Clock, Effect, FiberRef, Option, Redacted, Stream } from "effect"
import { hashSecret, sameHash } from "../domain/apiKey.ts"
import { Settings } from "../domain/config.ts"
import { type AdminError, type GovernanceError, InvalidRequest, PayloadTooLarge } from "../domain/errors.ts"
import { Bootstrap } from "../services/Bootstrap.ts"
import { Gateway, type GatewayReply } from "../services/Gateway.ts"
import { KeyRegistry, type Principal } from "../services/KeyRegistry.ts"
import { Ledger } from "../services/Ledger.ts"
import { Metrics } from "../services/Metrics.ts"
import { Pricing } from "../services/Pricing.ts"
import { Projects } from "../services/Projects.ts"
import { ReceiptSigner } from "../services/ReceiptSigner.ts"
import { Requests } from "../services/Requests.ts"
import { Router } from "../services/Router.ts"
import { ChatStore } from "../store/ChatStore.ts"
import { chatCompletionsSurface } from "../services/surfaces/chatCompletions.ts"
import { responsesSurface, responsesToChat } from "../services/surfaces/responses.ts"
import type { Surface } from "../services/surfaces/Surface.ts"
import { openApiDocument } from "./api.ts"
import { docsPage } from "./docs.ts"
import { type BodyLimits, readJsonBody } from "./body.ts"
import * as S from "./schemas.ts"
import { errorResponse, internalError, logDefect, unknownRoute, wireError } from "./errors.ts"
import { dashboardRoutes, keysWithLastUse } from "./dashboard.ts"
import { type Access, adminRoute, visibleProject } from "./session.ts"
import type { Viewer } from "../services/Sessions.ts"

const header = (req: HttpServerRequest.HttpServerRequest, name: string): string | undefined => {
  const v = req.headers[name]
  return typeof v === "string" ? v : undefined
}

/** Read and parse a JSON body within the size and depth limits: 413 when larger, 400 when too deep or not JSON (src/http/body.ts). */
export const readJson = (limits: BodyLimits) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (req) =>
    Effect.async<unknown, PayloadTooLarge | InvalidRequest>((resume) =>
      readJsonBody(NodeHttpServerRequest.toIncomingMessage(req), limits, (r) => resume(r.ok ? Effect.succeed(r.value) : Effect.fail(r.error)))
    )
  )

const toResponse = (reply: GatewayReply, headers: Record<string, string>): HttpServerResponse.HttpServerResponse =>
  reply._tag === "Sse"
    ? HttpServerResponse.stream(Stream.fromAsyncIterable(reply.frames, (e: unknown) => e).pipe(Stream.ensuring(Effect.sync(reply.cancel))), {
        contentType: "text/event-stream",
        headers: { ...headers, "cache-control": "no-cache", "x-accel-buffering": "no" }
      })
    : typeof reply.body === "string"
      ? HttpServerResponse.text(reply.body, { status: reply.status, contentType: reply.contentType, headers })
      : HttpServerResponse.uint8Array(reply.body, { status: reply.status, contentType: reply.contentType, headers })

const json = (body: unknown, status = 200) => HttpServerResponse.unsafeJson(body, { status })

/** Map typed failures to wire errors, keeping the headers gathered so far (request id, rate limit). */
const respondErrors = <R>(
  effect: Effect.Effect<HttpServerResponse.HttpServerResponse, GovernanceError | AdminError, R>,
  headers: Record<string, string> = {}
) => Effect.catchAll(effect, (e) => Effect.succeed(errorResponse(wireError(e), headers)))

/** The caller's key id and project, for the access log line (never the secret). */
const CurrentCaller = FiberRef.unsafeMake<{ readonly keyId: string; readonly projectId: string } | undefined>(undefined)

const authenticated = <A, E, R>(f: (principal: Principal, req: HttpServerRequest.HttpServerRequest) => Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const req = yield* HttpServerRequest.HttpServerRequest
    const keys = yield* KeyRegistry
    const principal = yield* keys.authenticate(header(req, "authorization"))
    yield* FiberRef.set(CurrentCaller, { keyId: principal.keyId, projectId: principal.projectId })
    return yield* f(principal, req)
  })

/** What a governed endpoint hands the Gateway: the surface that renders, and the chat body to govern. */
export type GovernedCall = (body: unknown) => Effect.Effect<{ readonly surface: Surface; readonly body: unknown }, GovernanceError>

/** The governed endpoints by path; the fast path (src/http/fast.ts) serves the same table. */
export const governedCalls: Readonly<Record<"/v1/chat/completions" | "/v1/responses", GovernedCall>> = {
  "/v1/chat/completions": (body) => Effect.succeed({ surface: chatCompletionsSurface, body }),
  "/v1/responses": (body) =>
    Effect.map(responsesToChat(body), (chat) => ({ surface: responsesSurface(body as Record<string, unknown>), body: chat }))
}

/**
 * Hand an authenticated caller's body to the Gateway on the endpoint's surface, with the request's
 * Idempotency-Key and X-Max-Credits headers: the one place both HTTP paths build a governed call.
 */
export const handleGoverned = (
  gateway: Gateway,
  toCall: GovernedCall,
  principal: Principal,
  clientBody: unknown,
  requestHeaders: Readonly<Record<string, unknown>>,
  headers: Record<string, string>
) =>
  Effect.flatMap(toCall(clientBody), ({ body, surface }) => {
    const text = (name: string) => (typeof requestHeaders[name] === "string" ? (requestHeaders[name] as string) : undefined)
    return gateway.handle({
      principal,
      surface,
      body,
      clientBody,
      idempotencyKeyHeader: text("idempotency-key"),
      maxCreditsHeader: text("x-max-credits"),
      headers
    })
  })

/** A governed endpoint: authenticate, read the body, hand it to the Gateway on `surface`. */
const governed = (toCall: GovernedCall) =>
  Effect.gen(function* () {
    const settings = yield* Settings
    const gateway = yield* Gateway
    const headers: Record<string, string> = {}
    return yield* respondErrors(
      authenticated((principal, req) =>
        Effect.gen(function* () {
          const clientBody = yield* readJson(settings)
          const reply = yield* handleGoverned(gateway, toCall, principal, clientBody, req.headers, headers)
          return toResponse(reply, headers)
        })
      ),
      headers
    )
  })

const chatCompletions = governed(governedCalls["/v1/chat/completions"])

const responses = governed(governedCalls["/v1/responses"])

const routingEvaluate = Effect.gen(function* () {
  const settings = yield* Settings
  const gateway = yield* Gateway
  const headers: Record<string, string> = {}
  return yield* respondErrors(
    authenticated((principal, req) =>
      Effect.gen(function* () {
        const body = yield* readJson(settings)
        const evaluation: typeof S.Evaluation.Type = yield* gateway.evaluate(principal, body, header(req, "x-max-credits"), headers)
        return HttpServerResponse.unsafeJson(evaluation, { headers })
      })
    ),
    headers
  )
})

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

const receiptKeys = Effect.gen(function* () {
  const signer = yield* ReceiptSigner
  const keys = yield* signer.publicKeys
  return json({ object: "list", data: keys } satisfies typeof S.ReceiptKeys.Type)
})

// ---- Admin API (docs/contract.md §8) ----

/** An admin route: the admin token, or a dashboard session (src/http/session.ts); `reader` lets a team read its own project. */
const admin = <R>(
  f: (req: HttpServerRequest.HttpServerRequest, viewer: Viewer) => Effect.Effect<HttpServerResponse.HttpServerResponse, AdminError, R>,
  access: Access = "operator"
) => adminRoute(f, access)

const adminBody = Effect.gen(function* () {
  const settings = yield* Settings
  const body = yield* readJson(settings)
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    return yield* new InvalidRequest({ message: "The request body must be a JSON object.", param: null })
  }
  return body as Record<string, unknown>
})

const optionalBody = Effect.gen(function* () {
  const req = yield* HttpServerRequest.HttpServerRequest
  const length = Number(header(req, "content-length") ?? "0")
  return length > 0 || header(req, "transfer-encoding") !== undefined ? yield* adminBody : {}
})

const projectId = Effect.map(HttpRouter.params, (p) => p.id ?? "")

const projectView = (id: string, viewer: Viewer = { role: "operator" }) =>
  Effect.gen(function* () {
    const projects = yield* Projects
    const ledger = yield* Ledger
    const keys = yield* KeyRegistry
    const project = yield* projects.get(id)
    const now = yield* Clock.currentTimeMillis
    const window = yield* ledger.window(id, ledger.periodOf(now))
    return {
      ...project,
      object: "project",
      current_window: { period: window.period, budget_credits: window.cap, spent: window.spent, reserved: window.reserved, remaining: Math.max(0, window.cap - window.spent - window.reserved) },
      keys: yield* keysWithLastUse(id, yield* keys.list(id), viewer)
    }
  })

const adminRoutes = HttpRouter.empty.pipe(
  HttpRouter.post(
    "/admin/v1/projects",
    admin(() =>
      Effect.gen(function* () {
        const projects = yield* Projects
        const body = yield* adminBody
        const created = yield* projects.create(body as never)
        return json(yield* projectView(created.id), 201)
      })
    )
  ),
  HttpRouter.get(
    "/admin/v1/projects/:id",
    admin((_req, viewer) => Effect.flatMap(projectId, (id) => Effect.zipRight(visibleProject(viewer, id), Effect.map(projectView(id, viewer), (v) => json(v)))), "reader")
  ),
  HttpRouter.patch(
    "/admin/v1/projects/:id",
    admin(() =>
      Effect.gen(function* () {
        const projects = yield* Projects
        const keys = yield* KeyRegistry
        const id = yield* projectId
        const body = yield* adminBody
        yield* projects.update(id, body as never)
        yield* keys.forgetProject(id)
        return json(yield* projectView(id))
      })
    )
  ),
  HttpRouter.post(
    "/admin/v1/projects/:id/keys",
    admin(() =>
      Effect.gen(function* () {
        const keys = yield* KeyRegistry
        const id = yield* projectId
        const body = yield* adminBody
        return json(yield* keys.create(id, body.environment), 201)
      })
    )
  ),
  HttpRouter.get(
    "/admin/v1/projects/:id/keys",
    admin((_req, viewer) => Effect.gen(function* () {
      const keys = yield* KeyRegistry
      const id = yield* projectId
      yield* visibleProject(viewer, id)
      return json({ object: "list", data: yield* keysWithLastUse(id, yield* keys.list(id), viewer) })
    }), "reader")
  ),
  HttpRouter.post(
    "/admin/v1/keys/:id/rotate",
    admin(() =>
      Effect.gen(function* () {
        const keys = yield* KeyRegistry
        const id = yield* projectId
        const body = yield* optionalBody
        const grace = body.grace_seconds === undefined ? 86_400 : body.grace_seconds
        return json(yield* keys.rotate(id, grace as number), 201)
      })
    )
  ),
  HttpRouter.post(
    "/admin/v1/keys/:id/revoke",
    admin(() => Effect.gen(function* () {
      const keys = yield* KeyRegistry
      return json(yield* keys.revoke(yield* projectId))
    }))
  )
)

/**
 * GET /metrics carries every project's id and spend: it answers only `Authorization: Bearer` with
 * TOLLGATE_METRICS_TOKEN (for the scraper) or the admin token, compared in constant time.
 */
const metrics = Effect.gen(function* () {
  const settings = yield* Settings
  const bootstrap = yield* Bootstrap
  const req = yield* HttpServerRequest.HttpServerRequest
  const authorization = header(req, "authorization")
  const token = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? "")?.[1]
  const scraper = Option.isSome(settings.metricsToken) && token !== undefined && sameHash(hashSecret(token), hashSecret(Redacted.value(settings.metricsToken.value)))
  const allowed = scraper || Option.isSome(yield* Effect.option(bootstrap.authorizeAdmin(authorization)))
  if (!allowed) {
    return errorResponse({
      status: 401,
      type: "invalid_request_error",
      code: "invalid_metrics_token",
      message: "GET /metrics needs 'Authorization: Bearer <token>' with TOLLGATE_METRICS_TOKEN or the admin token.",
      param: null,
      headers: { "www-authenticate": "Bearer" }
    })
  }
  const m = yield* Metrics
  return HttpServerResponse.text(m.render(), { contentType: "text/plain; version=0.0.4" })
})

/** Ready when the store can run the governed call's transactions (the store worker is up). */
const readiness = Effect.map(ChatStore, (store) => {
  const health = store.health()
  return health.ok ? json({ status: "ready" }) : json({ status: "unavailable", reason: health.reason }, 503)
})

export const router = HttpRouter.empty.pipe(
  HttpRouter.post("/v1/chat/completions", chatCompletions),
  HttpRouter.post("/v1/responses", responses),
  HttpRouter.post("/v1/routing/evaluate", routingEvaluate),
  HttpRouter.get("/v1/models", models),
  HttpRouter.get("/v1/usage", usage),
  HttpRouter.get("/v1/requests/:id", getRequest),
  HttpRouter.get("/v1/requests/:id/receipt", getReceipt),
  HttpRouter.get("/v1/receipts/keys", receiptKeys),
  HttpRouter.get("/v1/rate_cards", rateCards),
  HttpRouter.get("/healthz", Effect.succeed(json({ status: "ok" }))),
  HttpRouter.get("/openapi.json", Effect.succeed(json(openApiDocument))),
  HttpRouter.get("/docs", Effect.succeed(HttpServerResponse.html(docsPage))),
  HttpRouter.get("/readyz", readiness),
  HttpRouter.get("/metrics", metrics),
  HttpRouter.concat(adminRoutes),
  HttpRouter.concat(dashboardRoutes)
)

/** A bounded label for a request path (ids folded), for metrics and logs. */
export const endpointLabel = (url: string): string => {
  const path = url.split("?")[0] ?? ""
  if (path.startsWith("/v1/requests/")) return path.endsWith("/receipt") ? "/v1/requests/{id}/receipt" : "/v1/requests/{id}"
  if (path.startsWith("/admin/v1/")) return path.replace(/\/(prj|key|req)_[a-z2-7]+/g, "/{id}")
  if (path === "/dashboard" || path.startsWith("/dashboard/")) return "/dashboard"
  return KNOWN_PATHS.has(path) ? path : "other"
}
const KNOWN_PATHS = new Set([
  "/v1/chat/completions", "/v1/responses", "/v1/models", "/v1/usage", "/v1/routing/evaluate", "/v1/receipts/keys",
  "/v1/rate_cards", "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"
])

const withCatchAll = router.pipe(
  Effect.catchAllCause((cause) =>
    Effect.gen(function* () {
      const req = yield* HttpServerRequest.HttpServerRequest
      const failure = Cause.failureOption(cause)
      if (Option.isSome(failure) && (failure.value as { _tag?: string })._tag === "RouteNotFound") return unknownRoute(req.method, req.url)
      if (Cause.isInterruptedOnly(cause)) return yield* Effect.failCause(cause)
      yield* logDefect(cause)
      return internalError
    })
  )
)

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

/** The whole app: the router, the catch-all, and per request one metric update and one access log line. */
export const app = Effect.gen(function* () {
  const settings = yield* Settings
  const metrics = yield* Metrics
  const req = yield* HttpServerRequest.HttpServerRequest
  const start = performance.now()
  const response = yield* withCatchAll
  const seconds = (performance.now() - start) / 1000
  const endpoint = endpointLabel(req.url)
  metrics.request(endpoint, response.status, seconds)
  if (settings.accessLog) {
    const caller = yield* FiberRef.get(CurrentCaller)
    logAccess(req.method, endpoint, response.status, seconds, response.headers["x-request-id"], caller)
  }
  return response
})
