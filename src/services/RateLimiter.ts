/**
 * Per-project rate limit (GCRA, the rule in spec/rateLimit.ts) held in memory.
 * Time comes from Effect's Clock so tests drive it with TestClock.
 */
import { Clock, Effect, Either, Layer } from "effect"
import { checkGcra, type GcraState, type RateLimit } from "../../spec/rateLimit.ts"
import { RateLimited } from "../domain/errors.ts"

export interface RateVerdict {
  readonly limit: number
  readonly remaining: number
  readonly resetMs: number
}

export const rateLimitHeaders = (v: RateVerdict): Record<string, string> => ({
  "x-ratelimit-limit-requests": String(v.limit),
  "x-ratelimit-remaining-requests": String(v.remaining),
  "x-ratelimit-reset-requests": formatDuration(v.resetMs)
})

/** OpenAI's reset format: "1s", "250ms", "6m0s". */
export const formatDuration = (ms: number): string => {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`
  const s = Math.ceil(ms / 1000)
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${s % 60}s`
}

export class RateLimiter extends Effect.Service<RateLimiter>()("tollgate/RateLimiter", {
  effect: Effect.sync(() => {
    const states = new Map<string, GcraState>()
    /** Admit one request of `projectId` at `now` (ms), or RateLimited carrying Retry-After. */
    const admitAt = (projectId: string, limit: RateLimit, now: number): Either.Either<RateVerdict, RateLimited> => {
      const decision = checkGcra(states.get(projectId) ?? 0, limit, now * 1000)
      if (decision._tag === "Limited") {
        return Either.left(
          new RateLimited({
            message: `Rate limit of ${limit.requestsPerMinute} requests per minute (burst ${limit.burst}) reached for this project; retry after ${formatDuration(decision.retryAfterMicros / 1000)}.`,
            retryAfterMs: Math.ceil(decision.retryAfterMicros / 1000)
          })
        )
      }
      states.set(projectId, decision.state)
      return Either.right({
        limit: limit.requestsPerMinute,
        remaining: decision.remaining,
        resetMs: decision.resetMicros / 1000
      })
    }

    /** Admit one request of `projectId` now, or fail with RateLimited carrying Retry-After. */
    const admit = (projectId: string, limit: RateLimit): Effect.Effect<RateVerdict, RateLimited> =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => admitAt(projectId, limit, now))

    const peek = (projectId: string, limit: RateLimit): Effect.Effect<boolean> =>
      Effect.map(Clock.currentTimeMillis, (now) => checkGcra(states.get(projectId) ?? 0, limit, now * 1000)._tag === "Allowed")
    return { admit, admitAt, peek } as const
  })
}) {}

export const RateLimiterLive: Layer.Layer<RateLimiter> = RateLimiter.Default
