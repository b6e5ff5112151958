/**
 * How much a call may generate and how much to hold for it, against the budget left in its window
 * (docs/contract.md §4). Pure: the reservation transaction runs it on the window it reads inside that
 * transaction (src/store/chatTransactions.ts), so the cap and the hold are decided on the same
 * snapshot the guarded UPDATE then applies; POST /v1/routing/evaluate runs it on a plain read.
 * The rule is the rulebook's (`decideChainCap` in spec/pricing.ts); this adds the error messages.
 * It lives in domain/ because both the services (evaluate) and the store's reservation body use it.
 */
import { available } from "../../spec/ledger.ts"
import { decideChainCap, type Prices } from "../../spec/pricing.ts"
import type { ScopeKind } from "../../spec/scopes.ts"

export interface PricedRoute {
  readonly name: string
  readonly prices: Prices
  readonly routeLimit: number
}

/** Everything but the window: plain data, so it can cross to the store worker. */
export interface SizingRequest {
  readonly chain: ReadonlyArray<PricedRoute>
  readonly inputTokens: number
  /** The client's max_tokens, if any. */
  readonly requested: number | undefined
  readonly maxCredits: number | undefined
  /** Where the client's cap came from, for the error: `metadata.max_credits` or `X-Max-Credits`. */
  readonly maxCreditsParam: string
  readonly period: string
}

export type Sizing =
  | { readonly _tag: "Fits"; readonly outputCap: number; readonly reservation: number }
  | { readonly _tag: "OverBudget"; readonly message: string; readonly param: string | null }

/** How a refusal's message names a scope (spec/scopes.ts). */
const scopeWords: Record<ScopeKind, string> = { project: "the project's", key: "the key's", end_user: "the end user's" }

/**
 * Size the call against `remaining` of a window capped at `cap` (the rule: `decideChainCap`); a
 * refusal by the budget names `scope` in its message and as its `param` (a 402's).
 */
export const sizeReservation = (r: SizingRequest, cap: number, remaining: number, scope: ScopeKind = "project"): Sizing => {
  const decision = decideChainCap({
    inputTokens: r.inputTokens,
    chain: r.chain,
    requested: r.requested,
    remainingBudget: remaining,
    maxCredits: r.maxCredits
  })
  if (decision._tag === "Capped") return { _tag: "Fits", outputCap: decision.outputCap, reservation: decision.reservation }
  return decision.limitedBy === "max_credits"
    ? {
        _tag: "OverBudget",
        message: `The worst-case cost of this request (${decision.worstCase} Credits) exceeds ${r.maxCreditsParam} (${r.maxCredits}). Lower max_tokens or raise the limit.`,
        param: r.maxCreditsParam
      }
    : {
        _tag: "OverBudget",
        message: `The worst-case cost of this request (${decision.worstCase} Credits) exceeds ${scopeWords[scope]} remaining budget for ${r.period} (${remaining} of ${cap} Credits). Raise the budget cap, or wait for the next settlement window.`,
        param: scope
      }
}

/** One scope's window as a reservation reads it (spec/scopes.ts; an uncapped scope's cap is UNLIMITED). */
export interface ScopeWindow {
  readonly scope: ScopeKind
  readonly cap: number
  readonly spent: number
  readonly reserved: number
}

/**
 * Size the call against every scope it holds in (spec/scopes.ts: all or none), `windows` in
 * SCOPE_ORDER. The hold is sized on the smallest room — which then fits every scope, so one sizing
 * answers the common case; a refusal by the budget names the first scope, in order, that has no room
 * for the call.
 */
export const sizeInScopes = (r: SizingRequest, windows: ReadonlyArray<ScopeWindow>): Sizing => {
  let tightest = windows[0]!
  for (const w of windows) if (available(w) < available(tightest)) tightest = w
  const sized = sizeReservation(r, tightest.cap, available(tightest), tightest.scope)
  if (sized._tag === "Fits" || sized.param !== tightest.scope) return sized
  for (const w of windows) {
    if (w === tightest) break
    const first = sizeReservation(r, w.cap, available(w), w.scope)
    if (first._tag === "OverBudget") return first
  }
  return sized
}

/** Why the guarded UPDATE refused a hold the sizing let through (a bug or a cap lowered meanwhile). */
export const holdRefusedMessage = (amount: number, period: string, scope: ScopeKind = "project"): string =>
  `This request needs up to ${amount} Credits but ${scopeWords[scope]} remaining budget for ${period} is smaller. Raise the budget cap or wait for the next settlement window.`
