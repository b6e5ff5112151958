/**
 * The routes served by `HttpApiBuilder` from the same HttpApi as /openapi.json (src/http/api.ts):
 * path, query and payload decoded by the endpoints' schemas, successes encoded by them. So far the
 * `governed` group's reads (models, rate cards, a request, its receipt, usage) behind the project-key
 * middleware, the `public` group (receipt keys, health), and the admin groups (./adminRoutes.ts)
 * behind the admin middleware (docs/decisions/0018). Endpoints of these groups served elsewhere are `handleRaw`: the two
 * governed POSTs (the fast path takes them first) and routing evaluation (its body is a chat request,
 * read within the body limits and parsed by the governed calls' own parser).
 * Failures leave through the app's catch-all (./app.ts): a domain error as its wire answer, a decode
 * failure as an OpenAI-shaped 400 (`decodeFailure`).
 */
import { HttpApiBuilder, HttpRouter, HttpServerRequest } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Clock, Effect, FiberRef, Layer } from "effect"
import { InvalidRequest } from "../domain/errors.ts"
import { available } from "../../spec/ledger.ts"
import { KeyRegistry } from "../services/KeyRegistry.ts"
import { Ledger, windowOfCall, windowParam } from "../services/Ledger.ts"
import type { UsageGroup } from "../store/ledgerRepo.ts"
import { Pricing } from "../services/Pricing.ts"
import { ReceiptSigner } from "../services/ReceiptSigner.ts"
import { Requests } from "../services/Requests.ts"
import { Router } from "../services/Router.ts"
import { adminGroups } from "./adminRoutes.ts"
import { CurrentPrincipal, ProjectKey, PublicApi } from "./api.ts"
import { CurrentCaller, respondErrors } from "./caller.ts"
import { routingEvaluate } from "./publicRoutes.ts"
import { receiptHandlers } from "./receiptsRoutes.ts"
import { header } from "./request.ts"
import type * as S from "./schemas.ts"

const publicGroup = HttpApiBuilder.group(PublicApi, "public", (handlers) =>
  handlers
    .handle("receiptKeys", () => Effect.flatMap(ReceiptSigner, (signer) => Effect.map(signer.publicKeys, (data) => ({ object: "list" as const, data }))))
    .handle("health", () => Effect.succeed({ status: "ok" as const }))
)

/**
 * The project-key check of the governed group. It reads the raw Authorization header (not the
 * platform's decoded token) so that a missing and a malformed key keep their own 401 messages; the
 * failure is the domain's InvalidApiKey, answered by the app's catch-all with its wire form.
 */
const ProjectKeyLive = Layer.effect(
  ProjectKey,
  Effect.map(KeyRegistry, (keys) =>
    ProjectKey.of({
      bearer: () =>
        Effect.gen(function* () {
          const req = yield* HttpServerRequest.HttpServerRequest
          const principal = yield* keys.authenticate(header(req, "authorization"))
          yield* FiberRef.set(CurrentCaller, { keyId: principal.keyId, projectId: principal.projectId })
          return principal
          // The platform types a middleware's failure by the documented body; the domain error is what
          // fails here, and the catch-all answers it with that body (and its headers).
        }) as unknown as Effect.Effect<typeof CurrentPrincipal.Service, typeof S.Errors.invalidApiKey.Type>
    })
  )
)

const STARTED = Math.floor(Date.now() / 1000)

/** The project and environment the caller's key is scoped to. */
const scope = Effect.map(CurrentPrincipal, (p) => ({ projectId: p.projectId, environment: p.environment }))

/** Served on the fast path (src/http/fast.ts), which takes these requests before the Effect app. */
/** `/v1/usage?group_by=`: the groups, and the field that names each group in the answer. */
const groupFields = { model: "model", key: "key_id", end_user: "end_user" } as const
const isUsageGroup = (s: string): s is UsageGroup => Object.hasOwn(groupFields, s)

const fastPathOnly = Effect.dieMessage("the governed POSTs are served by src/http/fast.ts, before this router")

const governedGroup = HttpApiBuilder.group(PublicApi, "governed", (handlers) =>
  handlers
    .handleRaw("createChatCompletion", () => fastPathOnly)
    .handleRaw("createResponse", () => fastPathOnly)
    .handleRaw("evaluateRouting", () => routingEvaluate)
    .handle("listModels", () =>
      Effect.gen(function* () {
        const principal = yield* CurrentPrincipal
        const routes = yield* (yield* Router).available(principal.projectId)
        const entry = (id: string, owner: string) => ({ id, object: "model" as const, created: STARTED, owned_by: owner })
        const data = routes.map((r) => entry(r.name, r.provider))
        if (routes.some((r) => r.auto)) data.unshift(entry("auto", "tollgate"))
        return { object: "list" as const, data }
      })
    )
    .handle("listRateCards", () => Effect.map(Effect.flatMap(Pricing, (pricing) => pricing.published), (data) => ({ object: "list" as const, data })))
    .handle("getRequest", ({ path }) => respondErrors(Effect.flatMap(Effect.zip(Requests, scope), ([requests, s]) => requests.find(path.id, s))))
    .handleRaw("exportReceipts", receiptHandlers.exportReceipts)
    .handle("getCheckpoint", receiptHandlers.getCheckpoint)
    .handle("getInclusionProof", receiptHandlers.getInclusionProof)
    .handle("getConsistencyProof", receiptHandlers.getConsistencyProof)
    .handle("getStatement", receiptHandlers.getStatement)
    .handle("getReceipt", ({ path }) => respondErrors(Effect.flatMap(Effect.zip(Ledger, scope), ([ledger, s]) => ledger.receipt(path.id, s))))
    .handle("getUsage", ({ urlParams }) =>
      respondErrors(Effect.gen(function* () {
        const ledger = yield* Ledger
        const principal = yield* CurrentPrincipal
        // A window of the project's budget period (spec/periods.ts); by default the one its calls fall in now.
        const period = urlParams.period === undefined ? windowOfCall(principal, yield* Clock.currentTimeMillis) : yield* windowParam(principal, urlParams.period)
        const groupBy = urlParams.group_by
        if (groupBy !== undefined && !isUsageGroup(groupBy)) {
          return yield* new InvalidRequest({ message: "group_by must be one of model, key, end_user.", param: "group_by" })
        }
        const tenant = { projectId: principal.projectId, environment: principal.environment }
        const window = yield* ledger.window(principal.projectId, period)
        const byModel = (yield* ledger.usage(tenant, period)).map(({ group, ...sums }) => ({ model: group, ...sums }))
        const sum = (f: (m: (typeof byModel)[number]) => number) => byModel.reduce((n, m) => n + f(m), 0)
        const groups = groupBy === undefined
          ? {}
          : { group_by: groupBy, groups: (yield* ledger.usage(tenant, period, groupBy)).map(({ group, ...sums }) => ({ [groupFields[groupBy]]: group, ...sums })) }
        return {
          object: "usage" as const,
          project_id: principal.projectId,
          environment: principal.environment,
          period,
          budget: {
            budget_credits: window.cap,
            spent: window.spent,
            reserved: window.reserved,
            remaining: available(window)
          },
          requests: sum((m) => m.requests),
          credits: sum((m) => m.credits),
          tokens: {
            input: sum((m) => m.tokens.input),
            cached_input: sum((m) => m.tokens.cached_input),
            output: sum((m) => m.tokens.output),
            reasoning: sum((m) => m.tokens.reasoning)
          },
          by_model: byModel,
          ...groups
        }
      }))
    )
)

/**
 * The HttpApi's routes as an HttpRouter, built once in the services' context (handlers read the
 * services captured here). The platform types its routes as needing its default services (a route
 * may answer a file); they are provided from Node's. Nothing built here holds a resource, so the
 * build's scope may end with it.
 */
export const apiRouter = Effect.scoped(
  Effect.gen(function* () {
    const groups = Layer.mergeAll(publicGroup, governedGroup.pipe(Layer.provide(ProjectKeyLive)), adminGroups)
    const context = yield* Layer.build(Layer.merge(Layer.provideMerge(groups, HttpApiBuilder.Router.Live), NodeHttpServer.layerContext))
    const router = yield* Effect.provide(HttpApiBuilder.Router.router, context)
    return router.pipe(HttpRouter.use(Effect.provide(context)))
  })
)
