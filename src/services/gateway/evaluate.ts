/**
 * POST /v1/routing/evaluate: what a governed call would do, executing, reserving and charging nothing.
 */
import { Clock, Effect } from "effect"
import { available } from "../../../spec/ledger.ts"
import { chargeFor } from "../../../spec/pricing.ts"
import { type ScopeKind, UNLIMITED } from "../../../spec/scopes.ts"
import type { InvalidApiKey, InvalidRequest, RateLimited, RouteUnavailable, UnsupportedWorkflow } from "../../domain/errors.ts"
import { callLimits, type Principal } from "../KeyRegistry.ts"
import { countChatInput } from "../Tokenizer.ts"
import { admitRequest, type makePlanning } from "./plan.ts"
import type { ReplyHeaders } from "./types.ts"

/** The scope a sizing refusal names in its param; null when the caller's own limit (X-Max-Credits) refused. */
const refusedBy = (param: string | null): ScopeKind | null => (param === "project" || param === "key" || param === "end_user" ? param : null)

export const makeEvaluate = (planning: Pick<ReturnType<typeof makePlanning>, "quote" | "admitRate">) => {
  const { quote } = planning

  /**
   * POST /v1/routing/evaluate: what a call would do — route, rate card, estimated and worst-case
   * Credits, whether the budget (in every scope the call would be held in: project, key, end user) and
   * the request-rate check would pass, the token and in-flight limits that apply — executing,
   * reserving and charging nothing.
   */
  const evaluate = (
    principal: Principal,
    body: unknown,
    maxCreditsHeader: string | undefined,
    headers: ReplyHeaders
  ): Effect.Effect<Evaluation, InvalidApiKey | InvalidRequest | UnsupportedWorkflow | RouteUnavailable | RateLimited> =>
    Effect.gen(function* () {
      const { request, maxCredits, maxCreditsParam } = yield* admitRequest(principal, body, maxCreditsHeader)
      const now = yield* Clock.currentTimeMillis
      // An evaluation is counted against the project's rate limit like the call it previews: it
      // costs the gateway the same parsing and tokenizing, and must not be a free way to spend CPU.
      const verdict = yield* planning.admitRate(principal, now, headers, Effect.succeed)
      const inputTokens = yield* countChatInput(request.messages, request.tools)
      const q = yield* quote(principal, request, maxCredits, maxCreditsParam, now, inputTokens)
      // Would the call it previews, sent next, pass the rate check? Read from this evaluation's own
      // verdict (what the limiter that admitted it, local or shared, left), not from a local estimate.
      const rateOk = verdict.remaining > 0
      const route = q.chain[0]!
      const priced = q.prices.get(route.name)!
      const inputCredits = chargeFor({ input: q.inputTokens, cached_input: 0, output: 0, reasoning: 0 }, priced.prices)
      return {
        object: "routing.evaluation",
        model: request.model,
        route: route.name,
        candidates: q.chain.map((r) => r.name),
        upstream_model: route.upstream_model,
        rate_card_version: priced.version,
        estimated_input_tokens: q.inputTokens,
        output_cap: q.decision._tag === "Fits" ? q.decision.outputCap : null,
        estimated_credits: {
          input: inputCredits,
          worst_case: q.decision._tag === "Fits" ? q.decision.reservation : null
        },
        budget: {
          would_pass: q.decision._tag === "Fits",
          period: q.period,
          budget_credits: q.cap,
          remaining: q.remaining,
          reason: q.decision._tag === "OverBudget" ? q.decision.error.message : null,
          refused_by: q.decision._tag === "OverBudget" ? refusedBy(q.decision.error.param) : null,
          scopes: q.scopes.map((w) => {
            const capped = w.cap !== UNLIMITED
            return { scope: w.scope, budget_credits: capped ? w.cap : null, spent: w.spent, reserved: w.reserved, remaining: capped ? available(w) : null }
          })
        },
        rate_limit: {
          would_pass: rateOk,
          requests_per_minute: principal.rateLimit.requestsPerMinute,
          burst: principal.rateLimit.burst,
          limits: (callLimits(principal, request.endUser) ?? []).flatMap((l) =>
            l.scope === "route" ? [] : [{ scope: l.scope, tokens_per_minute: l.tokensPerMinute ?? null, max_concurrent: l.maxConcurrent ?? null }]
          )
        },
        executed: false
      } satisfies Evaluation
    })
  return evaluate
}

export interface Evaluation {
  readonly object: "routing.evaluation"
  readonly model: string
  readonly route: string
  readonly candidates: ReadonlyArray<string>
  readonly upstream_model: string
  readonly rate_card_version: string
  readonly estimated_input_tokens: number
  readonly output_cap: number | null
  readonly estimated_credits: { readonly input: number; readonly worst_case: number | null }
  readonly budget: {
    readonly would_pass: boolean
    readonly period: string
    readonly budget_credits: number
    readonly remaining: number
    readonly reason: string | null
    readonly refused_by: ScopeKind | null
    readonly scopes: ReadonlyArray<{ readonly scope: ScopeKind; readonly budget_credits: number | null; readonly spent: number; readonly reserved: number; readonly remaining: number | null }>
  }
  readonly rate_limit: {
    readonly would_pass: boolean
    readonly requests_per_minute: number
    readonly burst: number
    readonly limits: ReadonlyArray<{ readonly scope: "project" | "key" | "end_user"; readonly tokens_per_minute: number | null; readonly max_concurrent: number | null }>
  }
  readonly executed: false
}
