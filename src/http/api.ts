/**
 * The public surface as an HttpApi description, built from the wire schemas in ./schemas.ts.
 * It is the source of the OpenAPI 3.1 document served at /openapi.json and of the /docs page
 * (./docs.ts). Requests are served by the HttpRouter in ./app.ts and the fast path (./fast.ts), whose
 * outputs are typed by the same schemas (test/http/contract.test.ts decodes the fast path's).
 */
import { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Context, Schema } from "effect"
import type { Principal } from "../services/KeyRegistry.ts"
import * as S from "./schemas.ts"
import { adminGroups } from "./adminApi.ts"
import { receiptEndpoints } from "./receiptsApi.ts"

/** The caller a project key authenticated, for the governed group's handlers (src/http/apiRoutes.ts). */
export class CurrentPrincipal extends Context.Tag("tollgate/CurrentPrincipal")<CurrentPrincipal, Principal>() {}

export class ProjectKey extends HttpApiMiddleware.Tag<ProjectKey>()("ProjectKey", {
  failure: S.Errors.invalidApiKey,
  provides: CurrentPrincipal,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

/** Every error a governed call can answer (besides 401, which the security middleware adds). */
const withGovernedCallErrors = <E extends HttpApiEndpoint.HttpApiEndpoint.Any>(endpoint: E) =>
  (endpoint as unknown as HttpApiEndpoint.HttpApiEndpoint<string, "POST">)
    .addError(S.Errors.invalidRequest)
    .addError(S.Errors.budgetExceeded)
    .addError(S.Errors.idempotencyConflict)
    .addError(S.Errors.tooLarge)
    .addError(S.Errors.unsupportedWorkflow)
    .addError(S.Errors.rateLimited)
    .addError(S.Errors.routeUnavailable)
    .addError(S.Errors.serverOverloaded) as unknown as E

const IdPath = Schema.Struct({ id: Schema.String.annotations({ description: "A request id, req_…" }) })

const governed = HttpApiGroup.make("governed")
  .add(
    HttpApiEndpoint.post("createChatCompletion", "/v1/chat/completions")
      .setPayload(S.ChatCompletionRequest)
      .addSuccess(S.ChatCompletion.annotations({ description: "JSON, or with stream: true an SSE stream of chat.completion.chunk events; governance rides on the last chunk before [DONE]." }))
      .pipe(withGovernedCallErrors)
  )
  .add(
    HttpApiEndpoint.post("createResponse", "/v1/responses")
      .setPayload(S.ResponsesRequest)
      .addSuccess(S.ResponseObject.annotations({ description: "JSON, or with stream: true the Responses SSE event sequence ending in response.completed." }))
      .pipe(withGovernedCallErrors)
  )
  .add(HttpApiEndpoint.get("listModels", "/v1/models").addSuccess(S.ModelList))
  .add(HttpApiEndpoint.get("listRateCards", "/v1/rate_cards").addSuccess(S.RateCards))
  .add(HttpApiEndpoint.get("getRequest", "/v1/requests/:id").setPath(IdPath).addSuccess(S.RequestStatus).addError(S.Errors.requestNotFound))
  .add(HttpApiEndpoint.get("getReceipt", "/v1/requests/:id/receipt").setPath(IdPath).addSuccess(S.Receipt).addError(S.Errors.requestNotFound))
  .add(
    HttpApiEndpoint.get("getUsage", "/v1/usage")
      .setUrlParams(Schema.Struct({
        period: Schema.optional(Schema.String.annotations({ description: "YYYY-MM; default: the current window" })),
        group_by: Schema.optional(Schema.String.annotations({ description: "`model`, `key` or `end_user`: adds `groups`, the window's sums per model, per key or per end user" }))
      }))
      .addSuccess(S.Usage)
      .addError(S.Errors.invalidRequest)
  )
  .add(
    HttpApiEndpoint.post("evaluateRouting", "/v1/routing/evaluate")
      .setPayload(S.ChatCompletionRequest)
      .addSuccess(S.Evaluation)
      .addError(S.Errors.invalidRequest)
      .addError(S.Errors.tooLarge)
      .addError(S.Errors.unsupportedWorkflow)
      .addError(S.Errors.rateLimited)
      .addError(S.Errors.routeUnavailable)
  )
  .add(receiptEndpoints.exportReceipts)
  .add(receiptEndpoints.getCheckpoint)
  .add(receiptEndpoints.getConsistencyProof)
  .add(receiptEndpoints.getInclusionProof)
  .add(receiptEndpoints.getStatement)
  .middleware(ProjectKey)

const open = HttpApiGroup.make("public")
  .add(HttpApiEndpoint.get("receiptKeys", "/v1/receipts/keys").addSuccess(S.ReceiptKeys))
  .add(HttpApiEndpoint.get("health", "/healthz").addSuccess(Schema.Struct({ status: Schema.Literal("ok") })))

export const PublicApi = HttpApi.make("tollgate")
  .add(governed)
  .add(open)
  .add(adminGroups.admin)
  .add(adminGroups.signIn)
  .add(adminGroups.webhooks)
  .add(adminGroups.scopeBudgets)
  .annotate(HttpApi.AdditionalSchemas, [S.ChatCompletionChunk, S.ResponseCompletedEvent])
  .annotate(OpenApi.Title, "Tollgate")
  .annotate(OpenApi.Version, "1.0.0")
  .annotate(
    OpenApi.Description,
    "Governed, OpenAI-compatible AI gateway. Every governed call carries `Authorization: Bearer <project key>` and returns evidence (`governance`, `x-request-id`) and rate-limit headers. The admin API (`/admin/v1`) takes `Authorization: Bearer <admin token>` or the dashboard's session cookie (writes then need `X-CSRF-Token`)."
  )

/** The OpenAPI 3.1 document of the public surface (served at /openapi.json, rendered at /docs). */
export const openApiDocument = OpenApi.fromApi(PublicApi)
