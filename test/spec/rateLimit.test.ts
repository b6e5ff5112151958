import fc from "fast-check"
import { describe, expect, it } from "vitest"
import * as RateLimit from "../../spec/rateLimit.ts"
import { numRuns } from "./runs.ts"

const limits: fc.Arbitrary<RateLimit.RateLimit> = fc.record({
  requestsPerMinute: fc.integer({ min: 1, max: 100_000 }),
  burst: fc.integer({ min: 1, max: 50 })
})

/** Arrival instants in µs, in order, within ten minutes; repeats model simultaneous requests. */
const arrivals = fc
  .array(fc.integer({ min: 0, max: 600_000_000 }), { maxLength: 150 })
  .map((xs) => [...xs].sort((a, b) => a - b))

/** Feed the arrivals to a fresh project; the instants at which requests were admitted. */
const admitted = (limit: RateLimit.RateLimit, times: ReadonlyArray<number>): Array<number> => {
  let state: RateLimit.GcraState = 0
  const out: Array<number> = []
  for (const t of times) {
    const d = RateLimit.checkGcra(state, limit, t)
    state = d.state
    if (d._tag === "Allowed") out.push(t)
  }
  return out
}

describe("rateLimit examples", () => {
  it("60 rpm with burst 2: two at once, then one per second", () => {
    const limit = { requestsPerMinute: 60, burst: 2 }
    const s = 1_000_000
    expect(admitted(limit, [0, 0, 0, s - 1, s, s, 2 * s])).toEqual([0, 0, s, 2 * s])
  })
  it("tells a limited client exactly when to retry", () => {
    const limit = { requestsPerMinute: 60, burst: 1 }
    const first = RateLimit.checkGcra(0, limit, 5_000_000)
    const second = RateLimit.checkGcra(first.state, limit, 5_250_000)
    expect(second).toMatchObject({ _tag: "Limited", retryAfterMicros: 750_000, state: first.state })
  })
  it("defaults the burst to a tenth of a minute's worth, at least 1", () => {
    expect(RateLimit.defaultBurst(1)).toBe(1)
    expect(RateLimit.defaultBurst(600)).toBe(60)
    expect(RateLimit.defaultBurst(601)).toBe(61)
  })
})

describe("rateLimit properties", () => {
  it("rateLimit: admitted requests over [0,t] ≤ burst + rate·t for any arrival sequence", () => {
    fc.assert(
      fc.property(limits, arrivals, (limit, times) => {
        const ok = admitted(limit, times)
        ok.forEach((t, i) => {
          // i + 1 requests admitted in [0, t]; rate·t = rpm·t / 60 000 000 (µs), compared without division.
          expect((i + 1 - limit.burst) * RateLimit.MICROS_PER_MINUTE).toBeLessThanOrEqual(limit.requestsPerMinute * t)
        })
      }),
      { numRuns }
    )
  })

  it("rateLimit: admitted requests in any window [s,t] ≤ burst + rate·(t−s)", () => {
    fc.assert(
      fc.property(limits, arrivals, (limit, times) => {
        const ok = admitted(limit, times)
        for (let i = 0; i < ok.length; i++) {
          for (let j = i; j < ok.length; j++) {
            const span = ok[j]! - ok[i]!
            expect((j - i + 1 - limit.burst) * RateLimit.MICROS_PER_MINUTE).toBeLessThanOrEqual(limit.requestsPerMinute * span)
          }
        }
      }),
      { numRuns }
    )
  })

  it("rateLimit: a greedy client retrying exactly at Retry-After still gets ≤ burst + rate·t over [0,t]", () => {
    fc.assert(
      fc.property(limits, fc.integer({ min: 1, max: 300 }), fc.array(fc.nat({ max: 5_000_000 }), { maxLength: 300 }), (limit, n, pauses) => {
        // Sends as early as the limiter allows; now and then it pauses, so bursts refill and recur.
        let state: RateLimit.GcraState = 0
        let now = 0
        let admittedCount = 0
        for (let i = 0; i < n; i++) {
          const d = RateLimit.checkGcra(state, limit, now)
          state = d.state
          if (d._tag === "Limited") {
            now += d.retryAfterMicros
            continue
          }
          admittedCount++
          expect((admittedCount - limit.burst) * RateLimit.MICROS_PER_MINUTE).toBeLessThanOrEqual(limit.requestsPerMinute * now)
          now += pauses[i] ?? 0
        }
      }),
      { numRuns }
    )
  })

  it("rateLimit: a quiet project admits exactly burst requests at once", () => {
    fc.assert(
      fc.property(limits, fc.integer({ min: 0, max: 1e12 }), fc.integer({ min: 0, max: 1e12 }), (limit, now, lastTat) => {
        // Quiet: its theoretical arrival time is not in the future (never seen = 0).
        const state = Math.min(lastTat, now)
        const burst = Array.from({ length: limit.burst + 1 }, () => now)
        let s = state
        const tags = burst.map((t) => {
          const d = RateLimit.checkGcra(s, limit, t)
          s = d.state
          return d._tag
        })
        expect(tags.filter((t) => t === "Allowed")).toHaveLength(limit.burst)
        expect(tags[limit.burst]).toBe("Limited")
      }),
      { numRuns }
    )
  })

  it("rateLimit: requests spaced by the emission interval are never limited", () => {
    fc.assert(
      fc.property(limits, fc.integer({ min: 0, max: 1e9 }), fc.integer({ min: 1, max: 200 }), (limit, start, n) => {
        const T = RateLimit.emissionIntervalMicros(limit)
        const times = Array.from({ length: n }, (_, i) => start + i * T)
        expect(admitted(limit, times)).toHaveLength(n)
      }),
      { numRuns }
    )
  })

  it("rateLimit: Limited changes nothing and retryAfter is exact (admitted then, not a µs earlier)", () => {
    fc.assert(
      fc.property(limits, arrivals, fc.integer({ min: 0, max: 600_000_000 }), (limit, times, probe) => {
        let state: RateLimit.GcraState = 0
        for (const t of times) state = RateLimit.checkGcra(state, limit, t).state
        const now = Math.max(probe, times.at(-1) ?? 0)
        const d = RateLimit.checkGcra(state, limit, now)
        if (d._tag === "Limited") {
          expect(d.state).toBe(state)
          expect(d.retryAfterMicros).toBeGreaterThan(0)
          expect(RateLimit.checkGcra(state, limit, now + d.retryAfterMicros)._tag).toBe("Allowed")
          expect(RateLimit.checkGcra(state, limit, now + d.retryAfterMicros - 1)._tag).toBe("Limited")
        }
      }),
      { numRuns }
    )
  })

  it("rateLimit: `remaining` is exactly how many more requests are admitted at the same instant", () => {
    fc.assert(
      fc.property(limits, arrivals, (limit, times) => {
        let state: RateLimit.GcraState = 0
        for (const t of times) {
          const d = RateLimit.checkGcra(state, limit, t)
          state = d.state
          if (d._tag !== "Allowed") continue
          let s = d.state
          let more = 0
          for (;;) {
            const next = RateLimit.checkGcra(s, limit, t)
            if (next._tag === "Limited") break
            s = next.state
            more++
          }
          expect(more).toBe(d.remaining)
        }
      }),
      { numRuns }
    )
  })
})
