import fc from "fast-check"
import { describe, expect, it } from "vitest"
import * as Pricing from "../../spec/pricing.ts"
import { numRuns } from "./runs.ts"

// Zero and tiny prices are edge cases (free output, sub-micro charges), so they are drawn often.
const price = fc.oneof(fc.constantFrom(0, 1), fc.integer({ min: 0, max: 1_000 }), fc.integer({ min: 0, max: 1_000_000 }))
const prices: fc.Arbitrary<Pricing.Prices> = fc.record(
  { input: price, cached_input: price, output: price, reasoning: price },
  { requiredKeys: ["input", "output"] }
)
const count = fc.integer({ min: 0, max: 1_000_000_000 })
const tokens: fc.Arbitrary<Pricing.TokenCounts> = fc.record({ input: count, cached_input: count, output: count, reasoning: count })

/** Independent reference: exact rational Σ tokens·price / 10^6, rounded up by quotient and remainder. */
const referenceCharge = (t: Pricing.TokenCounts, p: Pricing.Prices): bigint => {
  const n =
    BigInt(t.input) * BigInt(p.input) +
    BigInt(t.cached_input) * BigInt(p.cached_input ?? p.input) +
    BigInt(t.output) * BigInt(p.output) +
    BigInt(t.reasoning) * BigInt(p.reasoning ?? p.output)
  const q = n / 1_000_000n
  return n % 1_000_000n === 0n ? q : q + 1n
}

describe("pricing examples", () => {
  const card = { input: 150, cached_input: 75, output: 600 }
  it("charges whole Credits, rounding up", () => {
    expect(Pricing.chargeFor(Pricing.zeroTokens, card)).toBe(0)
    expect(Pricing.chargeFor({ ...Pricing.zeroTokens, input: 1 }, card)).toBe(1)
    expect(Pricing.chargeFor({ ...Pricing.zeroTokens, input: 1_000_000 }, card)).toBe(150)
    // 1000·150 + 2000·75 + 500·600 = 600 000 micro → 1 Credit; reasoning priced as output.
    expect(Pricing.chargeFor({ input: 1000, cached_input: 2000, output: 500, reasoning: 0 }, card)).toBe(1)
    expect(Pricing.chargeFor({ input: 0, cached_input: 0, output: 0, reasoning: 2_000_000 }, card)).toBe(1200)
  })
  it("sizes the output cap to the budget when the client sends no max_tokens", () => {
    // 1000 input at 150 = 0.15 Credits; 10 Credits leave 9.85 Credits = 16 416 output tokens at 600.
    const d = Pricing.decideOutputCap({ inputTokens: 1000, prices: card, routeLimit: 100_000, remainingBudget: 10 })
    expect(d).toEqual({ _tag: "Capped", outputCap: 16_416, reservation: 10 })
    const limited = Pricing.decideOutputCap({ inputTokens: 1000, prices: card, routeLimit: 4096, remainingBudget: 10 })
    expect(limited).toEqual({ _tag: "Capped", outputCap: 4096, reservation: Pricing.worstCase(1000, 4096, card) })
  })
  it("names max_credits when it is the tighter limit", () => {
    const d = Pricing.decideOutputCap({ inputTokens: 10_000_000, prices: card, routeLimit: 10, remainingBudget: 1000, maxCredits: 1 })
    expect(d).toMatchObject({ _tag: "OverBudget", limitedBy: "max_credits" })
  })
  it("refuses when the input alone does not fit, even if output is free", () => {
    const free = { input: 1_000_000, output: 0 }
    const d = Pricing.decideOutputCap({ inputTokens: 5, prices: free, routeLimit: 100, remainingBudget: 4 })
    expect(d).toMatchObject({ _tag: "OverBudget" })
  })
  it("treats a fractional allowance as its whole Credits", () => {
    const d = Pricing.decideOutputCap({ inputTokens: 0, prices: card, routeLimit: 1_000_000, remainingBudget: 10, maxCredits: 1.5 })
    expect(d).toEqual({ _tag: "Capped", outputCap: 1666, reservation: 1 })
  })
  it("picks the latest rate card in force", () => {
    const cards = [
      { version: "rc_2026-10", effective_from: "2026-10-01T00:00:00Z", prices: {} },
      { version: "rc_2026-11", effective_from: "2026-11-01T00:00:00Z", prices: {} }
    ]
    expect(Pricing.rateCardAt(cards, Date.parse("2026-09-30T23:59:59Z"))).toBeUndefined()
    expect(Pricing.rateCardAt(cards, Date.parse("2026-10-31T23:59:59.999Z"))?.version).toBe("rc_2026-10")
    expect(Pricing.rateCardAt(cards, Date.parse("2026-11-01T00:00:00Z"))?.version).toBe("rc_2026-11")
  })
  it("splits OpenAI usage into disjoint classes", () => {
    expect(
      Pricing.tokensFromUsage({
        prompt_tokens: 100,
        completion_tokens: 50,
        prompt_tokens_details: { cached_tokens: 30 },
        completion_tokens_details: { reasoning_tokens: 20 }
      })
    ).toEqual({ input: 70, cached_input: 30, output: 30, reasoning: 20 })
  })
  it("charges by the reported usage when there is one, else by Tollgate's own count (counted only then)", () => {
    let counted = 0
    const countOutput = () => (counted++, 7)
    expect(Pricing.chargedTokens({ prompt_tokens: 10, completion_tokens: 4 }, 99, countOutput)).toEqual({
      tokens: { input: 10, cached_input: 0, output: 4, reasoning: 0 },
      source: "reported"
    })
    expect(counted).toBe(0)
    // No usage, a usage without a numeric prompt_tokens, or not an object at all: counted.
    for (const usage of [undefined, null, {}, { completion_tokens: 4 }, { prompt_tokens: "10" }, 10, "usage", [10]]) {
      expect(Pricing.chargedTokens(usage, 99, countOutput)).toEqual({ tokens: { input: 99, cached_input: 0, output: 7, reasoning: 0 }, source: "counted" })
    }
    expect(counted).toBe(8)
  })
})

describe("pricing properties", () => {
  it("pricing: charge is ceil of exact rational (compare to BigInt reference independent computation)", () => {
    fc.assert(
      fc.property(tokens, prices, (t, p) => {
        expect(BigInt(Pricing.chargeFor(t, p))).toBe(referenceCharge(t, p))
      }),
      { numRuns }
    )
  })

  const capArgs = fc.record(
    {
      inputTokens: fc.integer({ min: 0, max: 2_000_000 }),
      prices,
      routeLimit: fc.integer({ min: 0, max: 200_000 }),
      requested: fc.integer({ min: 0, max: 300_000 }),
      remainingBudget: fc.integer({ min: 0, max: 100_000 }),
      maxCredits: fc.integer({ min: 0, max: 100_000 })
    },
    { requiredKeys: ["inputTokens", "prices", "routeLimit", "remainingBudget"] }
  )

  it("pricing: decideOutputCap reservation never exceeds remaining budget nor max_credits, and the cap is maximal (cap+1 would not fit)", () => {
    fc.assert(
      fc.property(capArgs, (args) => {
        const d = Pricing.decideOutputCap(args)
        const available = Math.min(args.remainingBudget, args.maxCredits ?? Infinity)
        if (d._tag === "Capped") {
          expect(d.reservation).toBe(Pricing.worstCase(args.inputTokens, d.outputCap, args.prices))
          expect(d.reservation).toBeLessThanOrEqual(args.remainingBudget)
          if (args.maxCredits !== undefined) expect(d.reservation).toBeLessThanOrEqual(args.maxCredits)
          expect(d.outputCap).toBeLessThanOrEqual(args.routeLimit)
          if (args.requested !== undefined) {
            expect(d.outputCap).toBe(Math.min(args.requested, args.routeLimit))
          } else {
            expect(d.outputCap).toBeGreaterThanOrEqual(1)
            // Maximal: the route limit stops it, or one more token would not fit.
            const stoppedByRoute = d.outputCap === args.routeLimit
            const nextDoesNotFit = Pricing.worstCase(args.inputTokens, d.outputCap + 1, args.prices) > available
            expect(stoppedByRoute || nextDoesNotFit).toBe(true)
          }
        } else if (args.requested !== undefined) {
          const cap = Math.min(args.requested, args.routeLimit)
          expect(Pricing.worstCase(args.inputTokens, cap, args.prices)).toBeGreaterThan(available)
        } else {
          // Over budget only if not even one output token fits (or the route allows none).
          const oneFits = Pricing.worstCase(args.inputTokens, 1, args.prices) <= available
          expect(oneFits && args.routeLimit >= 1).toBe(false)
        }
      }),
      { numRuns }
    )
  })

  it("pricing: decideChainCap holds enough for whichever candidate serves, within what is available, at the largest cap every candidate allows", () => {
    const chainArgs = fc.record(
      {
        inputTokens: fc.integer({ min: 0, max: 2_000_000 }),
        chain: fc.array(fc.record({ prices, routeLimit: fc.integer({ min: 0, max: 200_000 }) }), { minLength: 1, maxLength: 4 }),
        requested: fc.integer({ min: 0, max: 300_000 }),
        remainingBudget: fc.integer({ min: 0, max: 100_000 }),
        maxCredits: fc.integer({ min: 0, max: 100_000 })
      },
      { requiredKeys: ["inputTokens", "chain", "remainingBudget"] }
    )
    fc.assert(
      fc.property(chainArgs, (args) => {
        const d = Pricing.decideChainCap(args)
        const alone = args.chain.map((r) => Pricing.decideOutputCap({ ...args, prices: r.prices, routeLimit: r.routeLimit }))
        const available = Math.min(args.remainingBudget, args.maxCredits ?? Infinity)
        if (d._tag === "OverBudget") {
          // Refused only when some candidate alone is refused.
          expect(alone.some((a) => a._tag === "OverBudget")).toBe(true)
          return
        }
        expect(alone.every((a) => a._tag === "Capped")).toBe(true)
        // The cap is the smallest any candidate allows alone...
        expect(d.outputCap).toBe(Math.min(...alone.map((a) => (a._tag === "Capped" ? a.outputCap : Infinity))))
        // ...the hold covers every candidate's worst case at that cap, and no more than the dearest...
        const worst = args.chain.map((r) => Pricing.worstCase(args.inputTokens, d.outputCap, r.prices))
        expect(d.reservation).toBe(Math.max(...worst))
        // ...and fits what is available.
        expect(d.reservation).toBeLessThanOrEqual(available)
      }),
      { numRuns }
    )
  })

  it("pricing: any usage within the estimated input and the output cap is charged at most the reservation", () => {
    fc.assert(
      fc.property(capArgs, fc.nat(), fc.nat(), fc.nat(), (args, a, b, c) => {
        const d = Pricing.decideOutputCap(args)
        fc.pre(d._tag === "Capped")
        if (d._tag !== "Capped") return
        const cached = a % (args.inputTokens + 1)
        const reasoning = b % (d.outputCap + 1)
        const output = c % (d.outputCap - reasoning + 1)
        const used = { input: args.inputTokens - cached, cached_input: cached, output, reasoning }
        expect(Pricing.chargeFor(used, args.prices)).toBeLessThanOrEqual(d.reservation)
        expect(Pricing.settledCharge(used, args.prices, d.reservation)).toBe(Pricing.chargeFor(used, args.prices))
      }),
      { numRuns }
    )
  })

  it("pricing: settled charge never exceeds the reservation, whatever the upstream reports", () => {
    fc.assert(
      fc.property(tokens, prices, fc.integer({ min: 0, max: 1_000_000 }), (t, p, reserved) => {
        const charge = Pricing.settledCharge(t, p, reserved)
        expect(charge).toBeLessThanOrEqual(reserved)
        expect(charge === Pricing.chargeFor(t, p)).toBe(Pricing.chargeWithinReservation(t, p, reserved))
        // The settlement's one pricing, held to the price itself (settledCharge and chargeWithinReservation are read from it).
        const full = Pricing.chargeFor(t, p)
        expect(Pricing.settlementCharge(t, p, reserved)).toEqual({ charge: Math.min(full, reserved), withinReservation: full <= reserved })
      }),
      { numRuns }
    )
  })

  it("pricing: rateCardAt picks the latest card effective at or before the instant", () => {
    const day = 86_400_000
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: 0, max: 1000 }), { maxLength: 8 }), fc.integer({ min: -10, max: 1010 }), (days, at) => {
        const cards = days.map((d) => ({ version: `v${d}`, effective_from: new Date(d * day).toISOString(), prices: {} }))
        const inForce = days.filter((d) => d * day <= at * day)
        const expected = inForce.length === 0 ? undefined : `v${Math.max(...inForce)}`
        expect(Pricing.rateCardAt(cards, at * day)?.version).toBe(expected)
      }),
      { numRuns }
    )
  })

  it("pricing: usage classes are disjoint, non-negative and add up to the reported totals", () => {
    const n = fc.option(fc.integer({ min: 0, max: 1_000_000 }), { nil: undefined })
    fc.assert(
      fc.property(n, n, n, n, (prompt, completion, cached, reasoning) => {
        const t = Pricing.tokensFromUsage({
          prompt_tokens: prompt,
          completion_tokens: completion,
          prompt_tokens_details: { cached_tokens: cached },
          completion_tokens_details: { reasoning_tokens: reasoning }
        })
        for (const v of Object.values(t)) expect(v).toBeGreaterThanOrEqual(0)
        expect(t.input + t.cached_input).toBe(prompt ?? 0)
        expect(t.output + t.reasoning).toBe(completion ?? 0)
        expect(Pricing.totalTokens(t)).toBe((prompt ?? 0) + (completion ?? 0))
      }),
      { numRuns }
    )
  })

  it("pricing: a call is charged by the upstream's usage exactly when it reports prompt_tokens as a number, and by its own count otherwise", () => {
    const usage = fc.oneof(
      fc.anything(),
      fc.record({ prompt_tokens: fc.oneof(fc.integer({ min: -5, max: 1_000_000 }), fc.double(), fc.string()), completion_tokens: fc.option(fc.integer({ min: 0, max: 1_000_000 }), { nil: undefined }) }, { requiredKeys: [] })
    )
    fc.assert(
      fc.property(usage, fc.nat(1_000_000), fc.nat(1_000_000), (u, input, output) => {
        const charged = Pricing.chargedTokens(u, input, () => output)
        const reports = u !== null && typeof u === "object" && typeof (u as { prompt_tokens?: unknown }).prompt_tokens === "number"
        expect(charged.source).toBe(reports ? "reported" : "counted")
        expect(charged.tokens).toEqual(reports ? Pricing.tokensFromUsage(u as Pricing.UsageReport) : { input, cached_input: 0, output, reasoning: 0 })
        for (const v of Object.values(charged.tokens)) expect(v).toBeGreaterThanOrEqual(0)
      }),
      { numRuns }
    )
  })
})
