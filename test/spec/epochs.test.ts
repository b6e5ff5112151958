/**
 * spec/epochs.ts (which epochs are alive, which are known dead) and spec/pricing.ts `orphanCharge`
 * (what a dead process's hold is charged): the rules the recovery and the shared limiter's fallback
 * call, on both engines.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { isDeadEpoch, isLiveEpoch, oldestLiveHeartbeat, staleAfterMs } from "../../spec/epochs.ts"
import { chargeFor, orphanCharge, type Prices, type TokenCounts } from "../../spec/pricing.ts"
import { numRuns } from "./runs.ts"

const NOW = 1_800_000_000_000
const epochs = fc.record({
  epoch: fc.integer({ min: 1, max: 6 }),
  instanceId: fc.constantFrom("a", "b"),
  heartbeatAt: fc.integer({ min: NOW - 40_000, max: NOW }),
  stoppedAt: fc.option(fc.integer({ min: NOW - 40_000, max: NOW }), { nil: null })
})
const me = fc.record({ epoch: fc.integer({ min: 1, max: 6 }), instanceId: fc.constantFrom("a", "b") })
const heartbeatMs = fc.integer({ min: 1, max: 3_000 })

describe("spec/epochs", () => {
  it("staleness: ten beats, never under 10 s; a heartbeat exactly at the bound is alive, one ms older is not", () => {
    expect(staleAfterMs(1_000)).toBe(10_000)
    expect(staleAfterMs(100)).toBe(10_000)
    expect(staleAfterMs(2_000)).toBe(20_000)
    expect(isLiveEpoch({ heartbeatAt: oldestLiveHeartbeat(NOW, 10_000), stoppedAt: null }, NOW, 10_000)).toBe(true)
    expect(isLiveEpoch({ heartbeatAt: oldestLiveHeartbeat(NOW, 10_000) - 1, stoppedAt: null }, NOW, 10_000)).toBe(false)
    expect(isLiveEpoch({ heartbeatAt: NOW, stoppedAt: NOW }, NOW, 10_000)).toBe(false)
  })

  it("invariant: never my own epoch; another instance's epoch is dead exactly when it is not alive; my earlier epochs are dead", () => {
    fc.assert(
      fc.property(epochs, me, heartbeatMs, (other, self, beat) => {
        const stale = staleAfterMs(beat)
        const dead = isDeadEpoch(other, self, NOW, stale)
        if (other.epoch === self.epoch) expect(dead).toBe(false)
        else if (other.instanceId !== self.instanceId) expect(dead).toBe(!isLiveEpoch(other, NOW, stale))
        else if (other.epoch < self.epoch) expect(dead).toBe(true)
        else expect(dead).toBe(!isLiveEpoch(other, NOW, stale))
      }),
      { numRuns }
    )
  })
})

const prices: fc.Arbitrary<Prices> = fc.record({ input: fc.integer({ min: 0, max: 10_000_000 }), output: fc.integer({ min: 0, max: 10_000_000 }) })
const tokens: fc.Arbitrary<TokenCounts> = fc.record({
  input: fc.nat({ max: 100_000 }),
  cached_input: fc.constant(0),
  output: fc.oneof(fc.constant(0), fc.nat({ max: 100_000 })),
  reasoning: fc.oneof(fc.constant(0), fc.nat({ max: 10_000 }))
})

describe("spec/pricing orphanCharge", () => {
  it("invariant: voided unless output was delivered and its prices are known; else charged as settled — never above the hold", () => {
    fc.assert(
      fc.property(fc.option(tokens, { nil: undefined }), fc.option(prices, { nil: undefined }), fc.nat({ max: 10_000_000 }), (delivered, p, reserved) => {
        const d = orphanCharge(delivered, p, reserved)
        if (delivered === undefined || p === undefined || delivered.output + delivered.reasoning === 0) {
          expect(d).toEqual({ _tag: "Void" })
        } else {
          const full = chargeFor(delivered, p)
          expect(d).toEqual({ _tag: "Charge", charge: Math.min(full, reserved), withinReservation: full <= reserved })
        }
      }),
      { numRuns }
    )
  })
})
