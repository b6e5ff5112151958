/**
 * spec/events.ts's `wholePercentPassed` against `crossedThresholds`: a move of spent passes a whole
 * percent of the cap exactly when some whole-percent threshold is crossed by it — so a store that
 * skips the thresholds when no whole percent passed (PostgreSQL's triggers, migration 0027) emits
 * exactly what the rule does. The SQL spelling is checked against the rule on PostgreSQL in
 * test/webhooks/thresholds.test.ts.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { crossedThresholds, wholePercentPassed } from "../../spec/events.ts"

/** A move of spent (never negative, growing or not) under a cap of 0 to 100,000, spent up to 3 caps. */
const moves = fc
  .record({ cap: fc.integer({ min: 0, max: 100_000 }), a: fc.nat(), b: fc.nat() })
  .map(({ cap, a, b }) => {
    const top = Math.max(1, cap * 3)
    return { cap, before: Math.min(a, b) % (top + 1), after: Math.max(a, b) % (top + 1) }
  })
  .filter(({ before, after }) => before <= after)

describe("wholePercentPassed (spec/events.ts)", () => {
  it("holds exactly when some whole-percent threshold is crossed by the move", () => {
    fc.assert(
      fc.property(moves, ({ cap, before, after }) => {
        // Every whole percent the move could reach: 1 .. ⌈after·100/cap⌉ + 1.
        const every = Array.from({ length: cap > 0 ? Math.ceil((after * 100) / cap) + 1 : 1 }, (_, i) => i + 1)
        expect(wholePercentPassed(before, after, cap)).toBe(crossedThresholds(before, after, cap, every).length > 0)
      }),
      { numRuns: 2000, examples: [[{ cap: 200, before: 99, after: 100 }], [{ cap: 200, before: 100, after: 101 }], [{ cap: 3, before: 1, after: 2 }], [{ cap: 0, before: 0, after: 5 }]] }
    )
  })

  it("never skips a crossing of the thresholds an admin may set", () => {
    const thresholds = fc.uniqueArray(fc.integer({ min: 1, max: 100 }), { minLength: 1, maxLength: 10 })
    fc.assert(
      fc.property(moves, thresholds, ({ cap, before, after }, ts) => {
        if (crossedThresholds(before, after, cap, ts).length > 0) expect(wholePercentPassed(before, after, cap)).toBe(true)
      }),
      { numRuns: 2000 }
    )
  })
})
