/**
 * Pricing rules (docs/contract.md §4): the one place where Credits are computed.
 *
 * Prices are integer Credits per 1,000,000 tokens of a token class. A charge is
 *   ceil( Σ tokens[class] × price[class] / 1,000,000 )
 * computed with BigInt so no product ever loses precision. Nothing here uses floats.
 *
 * Pure functions, no I/O: the gateway, the tests and `tollgate audit` all call these.
 */

export const PER_TOKENS = 1_000_000n

/** Integer Credits per 1,000,000 tokens. Missing classes fall back as documented in `effectivePrices`. */
export interface Prices {
  readonly input: number
  readonly cached_input?: number | undefined
  readonly output: number
  readonly reasoning?: number | undefined
}

export interface RateCard {
  /** `rc_<period>`, e.g. `rc_2026-11`. */
  readonly version: string
  /** ISO-8601 instant from which the card applies. */
  readonly effective_from: string
  /** Prices per route name. */
  readonly prices: Readonly<Record<string, Prices>>
}

/** Token counts by class. Classes are disjoint: `input` excludes cached input, `output` excludes reasoning. */
export interface TokenCounts {
  readonly input: number
  readonly cached_input: number
  readonly output: number
  readonly reasoning: number
}

export const zeroTokens: TokenCounts = { input: 0, cached_input: 0, output: 0, reasoning: 0 }

/** cached_input defaults to the input price, reasoning to the output price. */
export const effectivePrices = (p: Prices): Required<{ [K in keyof Prices]: number }> => ({
  input: p.input,
  cached_input: p.cached_input ?? p.input,
  output: p.output,
  reasoning: p.reasoning ?? p.output
})

const ceilDiv = (n: bigint, d: bigint): bigint => (n + d - 1n) / d

const big = (n: number): bigint => BigInt(n)

/** The exact charge in Credits for the given tokens under the given prices. */
export const chargeFor = (tokens: TokenCounts, prices: Prices): number => {
  const p = effectivePrices(prices)
  const micro =
    big(tokens.input) * big(p.input) +
    big(tokens.cached_input) * big(p.cached_input) +
    big(tokens.output) * big(p.output) +
    big(tokens.reasoning) * big(p.reasoning)
  return Number(ceilDiv(micro, PER_TOKENS))
}

/** The most expensive price an input token / an output token can be charged at. */
const worstInputPrice = (prices: Prices): number => {
  const p = effectivePrices(prices)
  return Math.max(p.input, p.cached_input)
}
const worstOutputPrice = (prices: Prices): number => {
  const p = effectivePrices(prices)
  return Math.max(p.output, p.reasoning)
}

/** Worst-case charge of a request: every input token at the highest input price, the whole output cap at the highest output price. */
export const worstCase = (inputTokens: number, outputCap: number, prices: Prices): number => {
  const micro = big(inputTokens) * big(worstInputPrice(prices)) + big(outputCap) * big(worstOutputPrice(prices))
  return Number(ceilDiv(micro, PER_TOKENS))
}

export type OutputCapDecision =
  | { readonly _tag: "Capped"; readonly outputCap: number; readonly reservation: number }
  | { readonly _tag: "OverBudget"; readonly worstCase: number; readonly limitedBy: "budget" | "max_credits" }

/**
 * Decide the output cap and the reservation of a request (docs/contract.md §4).
 *
 * - `requested` is the client's own max_tokens, if any; it is honoured (clamped to the route limit),
 *   and if its worst case does not fit, the request is over budget.
 * - Without `requested`, the cap is the largest value that fits the remaining budget, `max_credits`
 *   and the route limit; if not even one output token fits, the request is over budget.
 *
 * The returned reservation is `worstCase(inputTokens, outputCap)`, so a settled charge can never exceed it.
 */
export const decideOutputCap = (args: {
  readonly inputTokens: number
  readonly prices: Prices
  readonly routeLimit: number
  readonly requested?: number | undefined
  readonly remainingBudget: number
  readonly maxCredits?: number | undefined
}): OutputCapDecision => {
  const available = args.maxCredits === undefined ? args.remainingBudget : Math.min(args.remainingBudget, args.maxCredits)
  const limitedBy: "budget" | "max_credits" =
    args.maxCredits !== undefined && args.maxCredits < args.remainingBudget ? "max_credits" : "budget"
  if (args.requested !== undefined) {
    const outputCap = Math.min(args.requested, args.routeLimit)
    const reservation = worstCase(args.inputTokens, outputCap, args.prices)
    return reservation <= available
      ? { _tag: "Capped", outputCap, reservation }
      : { _tag: "OverBudget", worstCase: reservation, limitedBy }
  }
  const outPrice = big(worstOutputPrice(args.prices))
  const inputMicro = big(args.inputTokens) * big(worstInputPrice(args.prices))
  // Charges are whole Credits, so a fractional allowance is worth its floor (and BigInt needs an integer).
  const room = big(Math.max(0, Math.floor(available))) * PER_TOKENS - inputMicro
  // Check the input first: even free output cannot rescue a request whose input alone does not fit.
  const fits = room < 0n ? -1n : outPrice === 0n ? big(args.routeLimit) : room / outPrice
  const outputCap = Number(fits > big(args.routeLimit) ? big(args.routeLimit) : fits)
  if (outputCap < 1) {
    return { _tag: "OverBudget", worstCase: worstCase(args.inputTokens, 1, args.prices), limitedBy }
  }
  return { _tag: "Capped", outputCap, reservation: worstCase(args.inputTokens, outputCap, args.prices) }
}

/**
 * A call with fallback may be served by any of its candidate routes: the output cap must fit every
 * one of them, and the hold covers the most expensive, so whichever route answers,
 * charge ≤ reservation ≤ available. Over budget as soon as one candidate cannot fit a single token
 * (or the requested cap). `chain` is not empty (a call with no priced route never gets here).
 */
export const decideChainCap = (args: {
  readonly inputTokens: number
  readonly chain: ReadonlyArray<{ readonly prices: Prices; readonly routeLimit: number }>
  readonly requested?: number | undefined
  readonly remainingBudget: number
  readonly maxCredits?: number | undefined
}): OutputCapDecision => {
  let outputCap = Infinity
  for (const route of args.chain) {
    const decision = decideOutputCap({ ...args, prices: route.prices, routeLimit: route.routeLimit })
    if (decision._tag === "OverBudget") return decision
    outputCap = Math.min(outputCap, decision.outputCap)
  }
  let reservation = 0
  for (const route of args.chain) reservation = Math.max(reservation, worstCase(args.inputTokens, outputCap, route.prices))
  return { _tag: "Capped", outputCap, reservation }
}

/**
 * What settlement posts, from one pricing of the tokens: the exact charge, never more than was
 * reserved, and whether the whole charge fitted (the receipt's `budget` check). When the upstream
 * reports more input tokens than were estimated the excess is not charged (the `budget` check then
 * fails), so spent + reserved ≤ cap holds whatever the upstream says. The gateway's settlement takes
 * both; the audit and the verifier recompute the charge (`settledCharge`).
 */
export const settlementCharge = (tokens: TokenCounts, prices: Prices, reserved: number): { readonly charge: number; readonly withinReservation: boolean } => {
  const full = chargeFor(tokens, prices)
  return { charge: Math.min(full, reserved), withinReservation: full <= reserved }
}

export const settledCharge = (tokens: TokenCounts, prices: Prices, reserved: number): number => settlementCharge(tokens, prices, reserved).charge

export const chargeWithinReservation = (tokens: TokenCounts, prices: Prices, reserved: number): boolean =>
  settlementCharge(tokens, prices, reserved).withinReservation

/** What the recovery does with a hold whose process died (`orphanCharge`). */
export type OrphanCharge =
  | { readonly _tag: "Charge"; readonly charge: number; readonly withinReservation: boolean }
  | { readonly _tag: "Void" }

/**
 * A hold of a dead process (docs/contract.md §4): a stream that delivered output before it died is
 * charged from its last durable progress mark, priced like any settlement (`settledCharge`, within
 * the hold); anything else — no mark, no output delivered, prices unknown — is voided, charging
 * nothing, so a retry runs again.
 */
export const orphanCharge = (delivered: TokenCounts | undefined, prices: Prices | undefined, reserved: number): OrphanCharge =>
  delivered === undefined || prices === undefined || delivered.output + delivered.reasoning <= 0
    ? { _tag: "Void" }
    : { _tag: "Charge", charge: settledCharge(delivered, prices, reserved), withinReservation: chargeWithinReservation(delivered, prices, reserved) }

/** The card in force at `atMillis`: the latest whose effective_from ≤ atMillis. */
export const rateCardAt = <C extends RateCard>(cards: ReadonlyArray<C>, atMillis: number): C | undefined => {
  let best: C | undefined
  let bestFrom = -Infinity
  for (const card of cards) {
    const from = Date.parse(card.effective_from)
    if (from <= atMillis && from >= bestFrom) {
      best = card
      bestFrom = from
    }
  }
  return best
}

/** An upstream's OpenAI-style usage object (every field optional: an upstream may send any subset). */
export interface UsageReport {
  readonly prompt_tokens?: number | undefined
  readonly completion_tokens?: number | undefined
  readonly prompt_tokens_details?: { readonly cached_tokens?: number | undefined } | null | undefined
  readonly completion_tokens_details?: { readonly reasoning_tokens?: number | undefined } | null | undefined
}

/** OpenAI-style usage → disjoint token classes. Cached tokens are part of prompt_tokens, reasoning part of completion_tokens. */
export const tokensFromUsage = (usage: UsageReport): TokenCounts => {
  const prompt = nonNegativeInt(usage.prompt_tokens)
  const completion = nonNegativeInt(usage.completion_tokens)
  const cached = Math.min(prompt, nonNegativeInt(usage.prompt_tokens_details?.cached_tokens))
  const reasoning = Math.min(completion, nonNegativeInt(usage.completion_tokens_details?.reasoning_tokens))
  return { input: prompt - cached, cached_input: cached, output: completion - reasoning, reasoning }
}

/**
 * Tokens Tollgate counted itself: the input counted at admission and the output counted from what was
 * delivered. No cached or reasoning tokens are claimed: only an upstream's report can say there were any.
 */
export const countedTokens = (input: number, output: number): TokenCounts => ({ input, cached_input: 0, output, reasoning: 0 })

/** A usage the upstream reported and a call is charged by: an object whose `prompt_tokens` is a number. */
export const isReportedUsage = (usage: unknown): usage is UsageReport =>
  usage !== null && typeof usage === "object" && typeof (usage as { readonly prompt_tokens?: unknown }).prompt_tokens === "number"

/**
 * The tokens a call is charged for, and where they came from: the upstream's usage when it reported
 * one (`isReportedUsage`), else Tollgate's own count (`countedTokens`). `countOutput` runs only then:
 * counting the delivered text is the costly part. A stream that did not complete passes no usage: it
 * is charged for what was delivered, whatever the upstream would have reported.
 */
export const chargedTokens = (
  usage: unknown,
  countedInput: number,
  countOutput: () => number
): { readonly tokens: TokenCounts; readonly source: "reported" | "counted" } =>
  isReportedUsage(usage) ? { tokens: tokensFromUsage(usage), source: "reported" } : { tokens: countedTokens(countedInput, countOutput()), source: "counted" }

const nonNegativeInt = (n: number | undefined): number =>
  typeof n === "number" && Number.isFinite(n) && n > 0 ? Math.floor(n) : 0

export const totalTokens = (t: TokenCounts): number => t.input + t.cached_input + t.output + t.reasoning
