/**
 * Wire schemas of the public surface. The handlers' outputs are typed by these (`typeof X.Type`),
 * the OpenAPI document is generated from them (src/http/api.ts), and tests decode real responses
 * with them — one definition for the code, the document and the checks.
 */
import { HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"
import {
  BudgetExceeded,
  IdempotencyConflict,
  InvalidApiKey,
  InvalidRequest,
  PayloadTooLarge,
  RateLimited,
  RequestNotFound,
  RouteUnavailable,
  ServerOverloaded,
  statusOf,
  UnsupportedWorkflow,
  wireCodeOf
} from "../domain/errors.ts"
import { Extra } from "../domain/wire/chat.ts"
import { TokenCounts, Verification } from "../domain/wire/records.ts"

export { ChatCompletionRequest, ChatMessage } from "../domain/wire/chat.ts"
export { ResponsesRequest } from "../domain/wire/responses.ts"

export { Attempt, Receipt, ReceiptKeys, RequestStatus, TokenCounts, Verification } from "../domain/wire/records.ts"


export const ErrorBody = Schema.Struct({
  error: Schema.Struct({
    message: Schema.String,
    type: Schema.String,
    code: Schema.NullOr(Schema.String),
    param: Schema.NullOr(Schema.String)
  })
}).annotations({ identifier: "Error", description: "OpenAI-shaped error body." })

/**
 * The documented error body of an error class: its status and code come from the class
 * (src/domain/errors.ts), so the document and the wire say the same.
 */
export const errorBodyOf = (errorClass: Schema.Schema.All, description: string, prefix = "Error") => {
  const status = statusOf(errorClass)
  const { code } = wireCodeOf(errorClass)
  return ErrorBody.annotations({ identifier: `${prefix}${status}_${code}`, description: `${code}: ${description}`, ...HttpApiSchema.annotations({ status }) })
}

export const Errors = {
  invalidRequest: errorBodyOf(InvalidRequest, "malformed JSON or fields, or an upstream 4xx caused by the request"),
  invalidApiKey: errorBodyOf(InvalidApiKey, "key missing, revoked, expired, or scoped to another project"),
  budgetExceeded: errorBodyOf(BudgetExceeded, "the worst case does not fit the remaining budget or max_credits"),
  requestNotFound: errorBodyOf(RequestNotFound, "no governed request with that id in the caller's tenant scope"),
  idempotencyConflict: errorBodyOf(
    IdempotencyConflict,
    "the idempotency key was used with a different payload (x-should-retry: false), or its original is still in flight after the bounded wait (Retry-After, x-should-retry: true: a retry then gets its result)"
  ),
  tooLarge: errorBodyOf(PayloadTooLarge, "the body exceeds the configured limit"),
  unsupportedWorkflow: errorBodyOf(UnsupportedWorkflow, "outside the text-only scope of the connected beta"),
  rateLimited: errorBodyOf(RateLimited, "the project's rate check rejected the burst, or an upstream limit refused the call (param names it: project.rate_limit.tokens_per_minute, key.rate_limit.max_concurrent, route.rate_limit.requests_per_minute, …; a tokens refusal carries x-ratelimit-*-tokens); see Retry-After"),
  routeUnavailable: errorBodyOf(RouteUnavailable, "no available route for the model (retry with model auto), or the gateway shut down before the call finished (nothing charged)"),
  serverOverloaded: errorBodyOf(ServerOverloaded, "the store's wait (a lane, a connection, a hot row) would pass its bound: refused before anything was held; retry after Retry-After with the same idempotency key")
}

export const Governance = Schema.Struct({
  request_id: Schema.String.pipe(Schema.pattern(/^req_/)),
  status: Schema.Literal("completed"),
  verification: Verification,
  credits_charged: Schema.Int,
  rate_card_version: Schema.String.pipe(Schema.pattern(/^rc_/)),
  receipt_id: Schema.String.pipe(Schema.pattern(/^rcpt_/))
}).annotations({ identifier: "Governance", description: "Evidence of a governed request." })

export const ChatCompletion = Schema.Struct(
  {
    id: Schema.String,
    object: Schema.Literal("chat.completion"),
    created: Schema.Number,
    model: Schema.String,
    choices: Schema.Array(Extra),
    usage: Schema.optional(Schema.NullOr(Extra)),
    governance: Governance
  },
  Extra
).annotations({ identifier: "ChatCompletion" })

/** One event of a streamed chat completion (`stream: true`); the last before `[DONE]` carries `governance`. */
export const ChatCompletionChunk = Schema.Struct(
  {
    id: Schema.String,
    object: Schema.Literal("chat.completion.chunk"),
    created: Schema.Number,
    model: Schema.String,
    choices: Schema.Array(Extra),
    usage: Schema.optional(Schema.NullOr(Extra)),
    governance: Schema.optional(Governance)
  },
  Extra
).annotations({ identifier: "ChatCompletionChunk", description: "An SSE data frame of a streamed chat completion; the stream ends with data: [DONE]." })

export const ResponseObject = Schema.Struct(
  {
    id: Schema.String,
    object: Schema.Literal("response"),
    created_at: Schema.Number,
    status: Schema.Literal("completed", "incomplete", "in_progress", "failed"),
    model: Schema.String,
    output: Schema.Array(Extra),
    usage: Schema.NullOr(Extra),
    governance: Governance
  },
  Extra
).annotations({ identifier: "Response" })

/** The last event of a streamed response: the whole Response object, with `governance`. */
export const ResponseCompletedEvent = Schema.Struct(
  { type: Schema.Literal("response.completed"), response: ResponseObject },
  Extra
).annotations({ identifier: "ResponseCompletedEvent", description: "The last SSE event of a streamed response." })

export const ModelList = Schema.Struct({
  object: Schema.Literal("list"),
  data: Schema.Array(Schema.Struct({ id: Schema.String, object: Schema.Literal("model"), created: Schema.Number, owned_by: Schema.String }))
}).annotations({ identifier: "ModelList" })

export const Usage = Schema.Struct({
  object: Schema.Literal("usage"),
  project_id: Schema.String,
  environment: Schema.String,
  period: Schema.String,
  budget: Schema.Struct({ budget_credits: Schema.Int, spent: Schema.Int, reserved: Schema.Int, remaining: Schema.Int }),
  requests: Schema.Int,
  credits: Schema.Int,
  tokens: TokenCounts,
  by_model: Schema.Array(Schema.Struct({ model: Schema.String, requests: Schema.Int, credits: Schema.Int, tokens: TokenCounts })),
  group_by: Schema.optional(Schema.Literal("model", "key", "end_user")),
  groups: Schema.optional(Schema.Array(Schema.Struct({
    model: Schema.optional(Schema.String),
    key_id: Schema.optional(Schema.String),
    end_user: Schema.optional(Schema.String),
    requests: Schema.Int,
    credits: Schema.Int,
    tokens: TokenCounts
  })).annotations({ description: "with `group_by`: one entry per model, key or end user (calls that named no end user are not in the end_user groups), each naming its group in the field of that name" }))
}).annotations({
  identifier: "Usage",
  description: "requests, credits and tokens are sums over the window's receipts of the caller's environment; budget is the project's (all environments)."
})

export const Evaluation = Schema.Struct({
  object: Schema.Literal("routing.evaluation"),
  model: Schema.String,
  route: Schema.String,
  candidates: Schema.Array(Schema.String),
  upstream_model: Schema.String,
  rate_card_version: Schema.String,
  estimated_input_tokens: Schema.Int,
  output_cap: Schema.NullOr(Schema.Int),
  estimated_credits: Schema.Struct({ input: Schema.Int, worst_case: Schema.NullOr(Schema.Int) }),
  budget: Schema.Struct({
    would_pass: Schema.Boolean,
    period: Schema.String,
    budget_credits: Schema.Int,
    remaining: Schema.Int,
    reason: Schema.NullOr(Schema.String),
    refused_by: Schema.NullOr(Schema.Literal("project", "key", "end_user")).annotations({ description: "The scope whose budget would refuse the call (the 402's param); null when it fits, or when the caller's own X-Max-Credits refuses it." }),
    scopes: Schema.Array(
      Schema.Struct({
        scope: Schema.Literal("project", "key", "end_user"),
        budget_credits: Schema.NullOr(Schema.Int),
        spent: Schema.Int,
        reserved: Schema.Int,
        remaining: Schema.NullOr(Schema.Int)
      })
    ).annotations({ description: "Every scope the call would be held in, the project's first; an uncapped scope's budget_credits and remaining are null." })
  }),
  rate_limit: Schema.Struct({
    would_pass: Schema.Boolean,
    requests_per_minute: Schema.Int,
    burst: Schema.Int,
    limits: Schema.Array(
      Schema.Struct({ scope: Schema.Literal("project", "key", "end_user"), tokens_per_minute: Schema.NullOr(Schema.Int), max_concurrent: Schema.NullOr(Schema.Int) })
    ).annotations({ description: "The project's, the key's and the end user's tokens-per-minute and in-flight limits, where set (would_pass covers requests_per_minute only)." })
  }),
  executed: Schema.Literal(false)
}).annotations({ identifier: "RoutingEvaluation" })

const Prices = Schema.Struct({
  input: Schema.Int,
  cached_input: Schema.optional(Schema.Int),
  output: Schema.Int,
  reasoning: Schema.optional(Schema.Int)
}).annotations({ identifier: "Prices", description: "Integer Credits per 1,000,000 tokens of each class." })

export const RateCards = Schema.Struct({
  object: Schema.Literal("list"),
  data: Schema.Array(
    Schema.Struct({
      version: Schema.String,
      effective_from: Schema.String,
      prices: Schema.Record({ key: Schema.String, value: Prices })
    })
  )
}).annotations({ identifier: "RateCards", description: "Every rate card version ever stored; versions are immutable." })
