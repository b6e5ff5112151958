/**
 * The tokens-per-minute bucket (src/domain/tokenBucket.ts) and the in-memory upstream limiter
 * (src/services/UpstreamLimits.ts) under random runs of admissions, settlements (the real count
 * above, below or equal to the estimate) and a clock that moves on, stands still or steps back.
 */
import fc from "fast-check"
import { Either } from "effect"
import { describe, expect, it } from "vitest"
import { correct, take, UNIT, type Bucket } from "../../src/domain/tokenBucket.ts"
import { localLimiter, type LimitsTaken } from "../../src/services/UpstreamLimits.ts"
import { numRuns } from "../spec/runs.ts"

type Op =
  | { readonly _tag: "take"; readonly tokens: number; readonly dt: number }
  | { readonly _tag: "settle"; readonly pick: number; readonly usedPercent: number; readonly dt: number }

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ _tag: fc.constant("take" as const), tokens: fc.integer({ min: 1, max: 3000 }), dt: fc.integer({ min: -2000, max: 20_000 }) }),
  fc.record({ _tag: fc.constant("settle" as const), pick: fc.nat(), usedPercent: fc.integer({ min: 0, max: 300 }), dt: fc.integer({ min: -2000, max: 20_000 }) })
)

const run = fc.record({ tpm: fc.integer({ min: 1, max: 10_000 }), ops: fc.array(op, { maxLength: 120 }) })

describe("token bucket", () => {
  it("its level never goes below empty nor over full, whatever is taken, given back or taken more at settlement", () => {
    fc.assert(
      fc.property(run, ({ tpm, ops }) => {
        let b: Bucket | undefined
        let now = 1_000_000
        const open: Array<number> = []
        for (const o of ops) {
          now += o.dt
          if (o._tag === "take") {
            const d = take(b, tpm, o.tokens, now)
            if (d._tag === "Taken") {
              b = d.bucket
              open.push(o.tokens)
              expect(d.remaining).toBeGreaterThanOrEqual(0)
            } else {
              // Refused only when the estimate does not fit what is there.
              expect(d.remaining).toBeLessThan(o.tokens)
            }
          } else if (open.length > 0) {
            const [estimated] = open.splice(o.pick % open.length, 1)
            b = correct(b, tpm, estimated!, Math.floor((estimated! * o.usedPercent) / 100), now)
          }
          if (b !== undefined) {
            expect(b.level).toBeGreaterThanOrEqual(0)
            expect(b.level).toBeLessThanOrEqual(tpm * UNIT)
            expect(Number.isSafeInteger(b.level)).toBe(true)
          }
        }
      }),
      { numRuns }
    )
  })

  it("never over the limit: from a full bucket, what calls used (settled at most their estimate) and hold (in flight) is at most the limit plus a minute's refill pro rata", () => {
    fc.assert(
      fc.property(run, ({ tpm, ops }) => {
        let b: Bucket | undefined
        const start = 1_000_000
        let now = start
        const open: Array<number> = []
        let used = 0
        for (const o of ops) {
          // Forward only here: the bound is over elapsed time.
          now += Math.abs(o.dt)
          if (o._tag === "take") {
            const d = take(b, tpm, o.tokens, now)
            if (d._tag === "Taken") {
              b = d.bucket
              open.push(o.tokens)
            }
          } else if (open.length > 0) {
            const [estimated] = open.splice(o.pick % open.length, 1)
            const actual = Math.floor((estimated! * Math.min(100, o.usedPercent)) / 100)
            used += actual
            b = correct(b, tpm, estimated!, actual, now)
          }
          const holding = open.reduce((a, x) => a + x, 0)
          // In units: the capacity plus tpm units a millisecond since the start.
          expect((used + holding) * UNIT).toBeLessThanOrEqual(tpm * UNIT + (now - start) * tpm)
        }
      }),
      { numRuns }
    )
  })

  it("the in-memory limiter takes a call's scopes all or none: a refusal by the key leaves the project's tokens and slots as they were", () => {
    fc.assert(
      fc.property(
        fc.record({
          projectTpm: fc.integer({ min: 1, max: 5000 }),
          keyTpm: fc.integer({ min: 1, max: 5000 }),
          projectSlots: fc.integer({ min: 1, max: 4 }),
          keySlots: fc.integer({ min: 1, max: 4 }),
          calls: fc.array(fc.record({ tokens: fc.integer({ min: 1, max: 2000 }), end: fc.boolean(), used: fc.nat({ max: 2000 }) }), { maxLength: 60 })
        }),
        ({ projectTpm, keyTpm, projectSlots, keySlots, calls }) => {
          const limiter = localLimiter()
          const limits = [
            { scope: "project" as const, id: "p:1", tokensPerMinute: projectTpm, maxConcurrent: projectSlots },
            { scope: "key" as const, id: "k:1", tokensPerMinute: keyTpm, maxConcurrent: keySlots }
          ]
          const live: Array<LimitsTaken> = []
          const now = 5_000
          calls.forEach((c, i) => {
            const before = [limiter.bucket("p:1"), limiter.bucket("k:1"), limiter.inFlight("p:1"), limiter.inFlight("k:1")]
            const d = limiter.takeNow!(limits, `c${i}`, c.tokens, now)
            if (Either.isLeft(d)) {
              expect([limiter.bucket("p:1"), limiter.bucket("k:1"), limiter.inFlight("p:1"), limiter.inFlight("k:1")]).toEqual(before)
            } else {
              live.push(d.right)
              expect(limiter.inFlight("p:1")).toBeLessThanOrEqual(projectSlots)
              expect(limiter.inFlight("k:1")).toBeLessThanOrEqual(keySlots)
            }
            if (c.end && live.length > 0) live.shift()!.end(c.used, now)
          })
          expect(limiter.inFlight("p:1")).toBe(live.length)
          for (const t of live) t.end(undefined, now)
          expect(limiter.inFlight("p:1")).toBe(0)
          expect(limiter.inFlight("k:1")).toBe(0)
        }
      ),
      { numRuns }
    )
  })
})
