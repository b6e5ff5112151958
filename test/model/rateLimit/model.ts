/**
 * RateLimiter model run: the real limiter (in memory, Effect Clock = TestClock) against the GCRA of
 * spec/rateLimit.ts. Model: each project's theoretical arrival time, and every instant a request was
 * admitted (for the bound burst + rate·t, checked over every pair of admissions after every command).
 */
import type fc from "fast-check"
import { expect } from "vitest"
import { emissionIntervalMicros, type RateLimit } from "../../../spec/rateLimit.ts"
import type { Coverage } from "../support/coverage.ts"
import type { ServicesRuntime } from "../support/runtime.ts"

export interface RateModel {
  readonly tat: Map<number, number>
  readonly admittedAtMicros: Map<number, Array<number>>
}

export interface RateReal {
  readonly rt: ServicesRuntime
  readonly coverage: Coverage
  readonly projects: ReadonlyArray<string>
  readonly limits: ReadonlyArray<RateLimit>
}

export type RateCommand = fc.AsyncCommand<RateModel, RateReal>

/** Admitted requests ≤ burst + floor(t / T) ≤ burst + rate·t over every interval [tᵢ, tⱼ] of admissions. */
export const checkInvariants = (m: RateModel, r: RateReal): void => {
  r.limits.forEach((limit, p) => {
    const times = m.admittedAtMicros.get(p) ?? []
    const interval = emissionIntervalMicros(limit)
    for (let i = 0; i < times.length; i++) {
      for (let j = i; j < times.length; j++) {
        const admitted = j - i + 1
        const micros = times[j]! - times[i]!
        // GCRA's integer bound, and the looser real-valued one DESIGN states (burst + rate·t).
        const gcraBound = Math.max(1, limit.burst) + Math.floor(micros / interval)
        const rateBound = limit.burst + (limit.requestsPerMinute * micros) / 60_000_000
        if (admitted > gcraBound || admitted > rateBound) {
          expect.fail(`p${p}: ${admitted} admitted in ${micros / 1000} ms > burst + rate·t (${gcraBound}, ${rateBound}), limit ${JSON.stringify(limit)}`)
        }
      }
    }
  })
}
