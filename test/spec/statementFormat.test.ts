/**
 * spec/statement.ts: the totals are sums of the receipts (a property against a plain fold), any
 * figure off by one is named, and the signed bytes are the context line then the canonical JSON.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { type StatementReceipt, statementFromReceipts, statementSignedText, totalsDifferences, type UnsignedStatement } from "../../spec/statement.ts"

const receipt: fc.Arbitrary<StatementReceipt> = fc.record({
  route: fc.constantFrom("gpt-a", "gpt-b", "claude"),
  tokens: fc.record({ input: fc.nat(1e6), cached_input: fc.nat(1e6), output: fc.nat(1e6), reasoning: fc.nat(1e6) }),
  credits_charged: fc.nat(1e6),
  rate_card_version: fc.constantFrom("rc_2026-10", "rc_2026-11")
})

describe("spec/statement.ts", () => {
  it("statement totals = the sums of the receipts (spent, count, per route, versions)", () => {
    fc.assert(
      fc.property(fc.array(receipt, { maxLength: 40 }), (rs) => {
        const t = statementFromReceipts(rs)
        expect(t.spent).toBe(rs.reduce((s, r) => s + r.credits_charged, 0))
        expect(t.receipt_count).toBe(rs.length)
        expect(t.rate_card_versions).toEqual([...new Set(rs.map((r) => r.rate_card_version))].sort())
        for (const route of new Set(rs.map((r) => r.route))) {
          const mine = rs.filter((r) => r.route === route)
          expect(t.by_model[route]!.requests).toBe(mine.length)
          expect(t.by_model[route]!.credits).toBe(mine.reduce((s, r) => s + r.credits_charged, 0))
          expect(t.by_model[route]!.tokens.output).toBe(mine.reduce((s, r) => s + r.tokens.output, 0))
        }
        expect(Object.values(t.by_model).reduce((s, m) => s + m.credits, 0)).toBe(t.spent)
        expect(totalsDifferences(t, statementFromReceipts([...rs].reverse()))).toEqual([])
      })
    )
  })

  it("a statement figure off by one is named, with both values", () => {
    fc.assert(
      fc.property(fc.array(receipt, { minLength: 1, maxLength: 20 }), fc.constantFrom("spent", "count", "credits", "input"), (rs, which) => {
        const t = statementFromReceipts(rs)
        const route = rs[0]!.route
        const m = t.by_model[route]!
        const off =
          which === "spent" ? { ...t, spent: t.spent + 1 }
          : which === "count" ? { ...t, receipt_count: t.receipt_count - 1 }
          : which === "credits" ? { ...t, by_model: { ...t.by_model, [route]: { ...m, credits: m.credits + 1 } } }
          : { ...t, by_model: { ...t.by_model, [route]: { ...m, tokens: { ...m.tokens, input: m.tokens.input + 1 } } } }
        const field = which === "spent" ? "spent" : which === "count" ? "receipt_count" : which === "credits" ? `by_model.${route}.credits` : `by_model.${route}.tokens.input`
        expect(totalsDifferences(off, t)).toEqual([expect.objectContaining({ field })])
      })
    )
  })

  it("a receipt left out or a route missing is named", () => {
    const rs: Array<StatementReceipt> = [
      { route: "a", tokens: { input: 1, cached_input: 0, output: 2, reasoning: 0 }, credits_charged: 3, rate_card_version: "rc_1" },
      { route: "b", tokens: { input: 1, cached_input: 0, output: 2, reasoning: 0 }, credits_charged: 4, rate_card_version: "rc_2" }
    ]
    const fields = totalsDifferences(statementFromReceipts(rs.slice(0, 1)), statementFromReceipts(rs)).map((d) => d.field)
    expect(fields).toEqual(["spent", "receipt_count", "rate_card_versions", "by_model.b.requests", "by_model.b.credits", "by_model.b.tokens.input", "by_model.b.tokens.output"])
  })

  it("the signed text is the context line and the canonical JSON without the signature", () => {
    const s: UnsignedStatement = {
      object: "statement", version: 1, project_id: "prj_a", period: "2026-11", cap: 100, spent: 0, receipt_count: 0, by_model: {},
      rate_card_versions: [], checkpoint: "tollgate/prj_a\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n", closed_at: "2026-12-01T00:05:00.000Z", signing_key_id: "rk_0123456789abcdef"
    }
    expect(statementSignedText({ ...s, signature: "sig" })).toBe(`tollgate statement v1\n${canonicalJson(s)}`)
  })
})
