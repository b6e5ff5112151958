/**
 * RateLimiter: per-project GCRA (spec/rateLimit.ts) on Effect's Clock. TestClock drives refill.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { checkGcra } from "../../spec/rateLimit.ts"
import { formatDuration, RateLimiter, rateLimitHeaders } from "../../src/services/RateLimiter.ts"
import { localLimiter } from "../support/runtime.ts"

/** 60 rpm = one request per second; a quiet project may send 3 at once. */
const LIMIT = { requestsPerMinute: 60, burst: 3 }

const limited = (projectId: string) =>
  Effect.flatMap(RateLimiter, (rl) => Effect.flip(rl.admit(projectId, LIMIT)))

describe("RateLimiter.admit", () => {
  it.effect("admits a burst, then refuses with Retry-After until one interval has passed", () =>
    Effect.gen(function* () {
      const rl = yield* RateLimiter
      const remaining: Array<number> = []
      for (let i = 0; i < 3; i++) remaining.push((yield* rl.admit("prj_a", LIMIT)).remaining)
      expect(remaining).toEqual([2, 1, 0])

      const refused = yield* limited("prj_a")
      expect(refused._tag).toBe("RateLimited")
      expect(refused.retryAfterMs).toBe(1000)
      expect(refused.message).toContain("retry after 1s")
      expect(refused.message).toContain("60 requests per minute (burst 3)")

      yield* TestClock.adjust(999)
      expect((yield* limited("prj_a")).retryAfterMs).toBe(1)
      yield* TestClock.adjust(1)
      const v = yield* rl.admit("prj_a", LIMIT)
      expect(v).toEqual({ limit: 60, remaining: 0, resetMs: 3000 })
      // A refusal consumes nothing: the next request is still exactly one interval away.
      expect((yield* limited("prj_a")).retryAfterMs).toBe(1000)
    }).pipe(Effect.provide(RateLimiter.Default)))

  it.effect("refills one request per interval up to the burst, never beyond", () =>
    Effect.gen(function* () {
      const rl = yield* localLimiter
      for (let i = 0; i < 3; i++) yield* rl.admit("prj_a", LIMIT)
      yield* TestClock.adjust(2000)
      expect((yield* rl.admit("prj_a", LIMIT)).remaining).toBe(1)
      yield* TestClock.adjust(60_000)
      // Quiet for a minute: the full burst is back, not 60 requests.
      const after = [] as Array<number>
      for (let i = 0; i < 3; i++) after.push((yield* rl.admit("prj_a", LIMIT)).remaining)
      expect(after).toEqual([2, 1, 0])
      expect(yield* rl.peek("prj_a", LIMIT)).toBe(false)
    }).pipe(Effect.provide(RateLimiter.Default)))

  it.effect("projects are isolated: one project's burst does not touch another's", () =>
    Effect.gen(function* () {
      const rl = yield* localLimiter
      for (let i = 0; i < 3; i++) yield* rl.admit("prj_a", LIMIT)
      expect((yield* limited("prj_a"))._tag).toBe("RateLimited")
      expect((yield* rl.admit("prj_b", LIMIT)).remaining).toBe(2)
      expect(yield* rl.peek("prj_b", LIMIT)).toBe(true)
      expect(yield* rl.peek("prj_a", LIMIT)).toBe(false)
    }).pipe(Effect.provide(RateLimiter.Default)))

  it.effect("peek never consumes", () =>
    Effect.gen(function* () {
      const rl = yield* localLimiter
      for (let i = 0; i < 10; i++) expect(yield* rl.peek("prj_a", LIMIT)).toBe(true)
      expect((yield* rl.admit("prj_a", LIMIT)).remaining).toBe(2)
    }).pipe(Effect.provide(RateLimiter.Default)))

  it.effect("follows the spec's GCRA step by step over an irregular arrival pattern", () =>
    Effect.gen(function* () {
      const rl = yield* RateLimiter
      const limit = { requestsPerMinute: 7, burst: 2 } // interval 8571429 µs, rounded up
      const gaps = [0, 0, 0, 100, 8_000, 600, 20_000, 0, 0, 1, 8_571, 9_000]
      let tat = 0
      for (const gap of gaps) {
        yield* TestClock.adjust(gap)
        const now = yield* TestClock.currentTimeMillis
        const model = checkGcra(tat, limit, now * 1000)
        const got = yield* Effect.either(rl.admit("prj_m", limit))
        if (model._tag === "Allowed") {
          tat = model.state
          expect(got._tag).toBe("Right")
          if (got._tag === "Right") expect(got.right.remaining).toBe(model.remaining)
        } else {
          expect(got._tag).toBe("Left")
          if (got._tag === "Left") expect(got.left.retryAfterMs).toBe(Math.ceil(model.retryAfterMicros / 1000))
        }
      }
    }).pipe(Effect.provide(RateLimiter.Default)))
})

describe("rate limit headers", () => {
  it("formats OpenAI's x-ratelimit-* headers", () => {
    expect(rateLimitHeaders({ limit: 60, remaining: 2, resetMs: 1000 })).toEqual({
      "x-ratelimit-limit-requests": "60",
      "x-ratelimit-remaining-requests": "2",
      "x-ratelimit-reset-requests": "1s"
    })
  })

  it("formats durations as ms below a second, seconds rounded up, then minutes", () => {
    expect(formatDuration(-5)).toBe("0ms")
    expect(formatDuration(0)).toBe("0ms")
    expect(formatDuration(0.2)).toBe("1ms")
    expect(formatDuration(250)).toBe("250ms")
    expect(formatDuration(1000)).toBe("1s")
    expect(formatDuration(1001)).toBe("2s")
    expect(formatDuration(59_000)).toBe("59s")
    expect(formatDuration(60_000)).toBe("1m0s")
    expect(formatDuration(61_000)).toBe("1m1s")
    expect(formatDuration(360_000)).toBe("6m0s")
  })

  it.effect("the verdict of an admission renders to the headers a client sees", () =>
    Effect.gen(function* () {
      const rl = yield* RateLimiter
      const v = yield* rl.admit("prj_h", { requestsPerMinute: 600, burst: 5 })
      expect(rateLimitHeaders(v)).toEqual({
        "x-ratelimit-limit-requests": "600",
        "x-ratelimit-remaining-requests": "4",
        "x-ratelimit-reset-requests": "100ms"
      })
    }).pipe(Effect.provide(RateLimiter.Default)))
})
