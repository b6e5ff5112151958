/**
 * How much a call may generate and how much to hold for it, against the budget left in its window
 * (docs/contract.md §4). Pure: the reservation transaction runs it on the window it reads inside that
 * transaction (src/store/chatTransactions.ts), so the cap and the hold are decided on the same
 * snapshot the guarded UPDATE then applies; POST /v1/routing/evaluate runs it on a plain read.
 * The rule is the rulebook's (`decideChainCap` in spec/pricing.ts); this adds the error messages.
 * It lives in domain/ because both the services (evaluate) and the store's reservation body use it.
 */
import { decideChainCap, type Prices } from "../../spec/pricing.ts"

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

/** Size the call against `remaining` of a window capped at `cap` (the rule: `decideChainCap`). */
export const sizeReservation = (r: SizingRequest, cap: number, remaining: number): Sizing => {
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
        message: `The worst-case cost of this request (${decision.worstCase} Credits) exceeds the project's remaining budget for ${r.period} (${remaining} of ${cap} Credits). Raise the budget cap, or wait for the next settlement window.`,
        param: null
      }
}

/** Why the guarded UPDATE refused a hold the sizing let through (a bug or a cap lowered meanwhile). */
export const holdRefusedMessage = (amount: number, period: string): string =>
  `This request needs up to ${amount} Credits but the project's remaining budget for ${period} is smaller. Raise the budget cap or wait for the next settlement window.`
