/**
 * The limits that protect the upstream (issue 41 item 3): per project and per key,
 * `rate_limit.tokens_per_minute` (a token bucket, src/domain/tokenBucket.ts, taken at admission on the
 * call's estimate and corrected at its end with the real count) and `rate_limit.max_concurrent` (calls
 * in flight: a slot taken at admission, given back when the call ends however it ends). A call whose
 * key and project set neither never comes here (its Principal's `limits` is undefined): it costs what
 * it cost before.
 *
 * Kept in this instance's memory (SQLite, tests: one instance; synchronous, no Effect step), or shared
 * by every instance through Redis (REDIS_URL): one script takes every scope's tokens and slots, all or
 * none, on Redis's clock. A shared slot is a lease that expires unless its instance renews it: each
 * instance pushes its live calls' leases ahead every heartbeat, so a killed instance's slots come back
 * once their lease — the epoch recovery's staleness bound (spec/epochs.ts `staleAfterMs`) — runs out,
 * with no recovery step to run. When Redis cannot answer, this instance's own memory decides (the
 * fallback's limits are not divided among instances, unlike the request limit's).
 */
import { Clock, Effect, Either } from "effect"
import { RateLimited } from "../domain/errors.ts"
import { type Bucket, correct, take } from "../domain/tokenBucket.ts"
import type { RedisGcra, SharedLimitsCall } from "../store/sharedGcra.ts"

/** One scope's upstream limits: a project's or a key's (undefined: no such limit). */
export interface ScopeLimits {
  readonly scope: "project" | "key" | "end_user" | "route"
  readonly id: string
  readonly tokensPerMinute: number | undefined
  readonly maxConcurrent: number | undefined
  /** A route's requests_per_minute: a bucket of `tokensPerMinute` requests, one taken a call, never corrected. */
  readonly countsRequests?: true
}

/** A call's limits, its scopes in order (project, key, end user, then its route's). */
export type CallLimits = ReadonlyArray<ScopeLimits>

/** What a call took: the token headers of its tightest bucket, and its end. */
export interface LimitsTaken {
  readonly headers: Record<string, string> | undefined
  /**
   * The call ended, once: its buckets corrected to `used` tokens (undefined: the estimate stays
   * taken — a voided call's upstream may have worked), its slots given back.
   */
  readonly end: (used: number | undefined, now: number) => void
}

export interface UpstreamLimiter {
  /** The in-memory decision at `now`; undefined when the limits are shared (one round trip: `take`). */
  readonly takeNow: ((limits: CallLimits, callId: string, tokens: number, now: number) => Either.Either<LimitsTaken, RateLimited>) | undefined
  readonly take: (limits: CallLimits, callId: string, tokens: number) => Effect.Effect<LimitsTaken, RateLimited>
}

/** OpenAI's token headers for a bucket of `limit` tokens a minute. */
export const tokenHeaders = (limit: number, remaining: number, resetMs: number): Record<string, string> => ({
  "x-ratelimit-limit-tokens": String(limit),
  "x-ratelimit-remaining-tokens": String(Math.max(0, remaining)),
  "x-ratelimit-reset-tokens": formatReset(resetMs)
})

/** OpenAI's reset format ("1s", "250ms", "6m0s"); RateLimiter.ts's, here to keep the import one way. */
const formatReset = (ms: number): string => {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`
  const s = Math.ceil(ms / 1000)
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${s % 60}s`
}

const owner: Record<ScopeLimits["scope"], string> = { project: "this project", key: "this API key", end_user: "this end user", route: "route" }

/** The 429 of a tokens-per-minute refusal, naming the scope and field. */
export const tokensRefused = (s: ScopeLimits, tokens: number, remaining: number, resetMs: number, retryAfterMs: number): RateLimited => {
  const tpm = s.tokensPerMinute!
  const never = !Number.isFinite(retryAfterMs)
  const who = s.scope === "route" ? `route '${s.id.slice(2)}'` : owner[s.scope]
  return new RateLimited({
    message: never
      ? `This request's estimated ${tokens} tokens (prompt and max_tokens) exceed the ${tpm} tokens per minute of ${who}; lower max_tokens or shorten the prompt.`
      : `Rate limit of ${tpm} tokens per minute reached for ${who} (${remaining} left, the request needs up to ${tokens}); retry after ${formatReset(retryAfterMs)}.`,
    retryAfterMs: never ? resetMs : retryAfterMs,
    param: `${s.scope}.rate_limit.tokens_per_minute`,
    limitHeaders: tokenHeaders(tpm, remaining, resetMs),
    // It never fits: an SDK must not retry it (x-should-retry: false), the caller must shrink it.
    ...(never ? { retryable: false } : {})
  })
}

/** The 429 of a route's requests_per_minute refusal. */
const requestsRefused = (s: ScopeLimits, remaining: number, resetMs: number, retryAfterMs: number): RateLimited =>
  new RateLimited({
    message: `Route '${s.id.slice(2)}' is at its provider quota of ${s.tokensPerMinute} requests per minute; retry after ${formatReset(retryAfterMs)}, or use model 'auto'.`,
    retryAfterMs,
    param: "route.rate_limit.requests_per_minute",
    limitHeaders: {
      "x-ratelimit-limit-requests": String(s.tokensPerMinute),
      "x-ratelimit-remaining-requests": String(Math.max(0, remaining)),
      "x-ratelimit-reset-requests": formatReset(resetMs)
    }
  })

/** A bucket's refusal: a route's requests, or tokens. */
const refusedBy = (s: ScopeLimits, amount: number, remaining: number, resetMs: number, retryAfterMs: number): RateLimited =>
  s.countsRequests ? requestsRefused(s, remaining, resetMs, retryAfterMs) : tokensRefused(s, amount, remaining, resetMs, retryAfterMs)

/** The 429 of a max_concurrent refusal. */
export const slotsRefused = (s: ScopeLimits): RateLimited =>
  new RateLimited({
    message: `Limit of ${s.maxConcurrent} calls in flight reached for ${owner[s.scope]}; retry once one of them ends.`,
    retryAfterMs: 1000,
    param: `${s.scope}.rate_limit.max_concurrent`
  })

/** This instance's own limits: buckets and counts of calls in flight, by scope id. */
export const localLimiter = (): UpstreamLimiter & { readonly inFlight: (id: string) => number; readonly bucket: (id: string) => Bucket | undefined } => {
  const buckets = new Map<string, Bucket>()
  const flying = new Map<string, number>()
  const takeNow = (limits: CallLimits, _callId: string, tokens: number, now: number): Either.Either<LimitsTaken, RateLimited> => {
    // Decide every scope first, then apply: all or none.
    const next: Array<[ScopeLimits, Bucket]> = []
    let headers: Record<string, string> | undefined
    let tightest = Number.POSITIVE_INFINITY
    for (const s of limits) {
      if (s.tokensPerMinute !== undefined) {
        const amount = s.countsRequests ? 1 : tokens
        const d = take(buckets.get(s.id), s.tokensPerMinute, amount, now)
        if (d._tag === "Limited") return Either.left(refusedBy(s, amount, d.remaining, d.resetMs, d.retryAfterMs))
        next.push([s, d.bucket])
        if (!s.countsRequests && d.remaining < tightest) {
          tightest = d.remaining
          headers = tokenHeaders(s.tokensPerMinute, d.remaining, d.resetMs)
        }
      }
      if (s.maxConcurrent !== undefined && (flying.get(s.id) ?? 0) >= s.maxConcurrent) return Either.left(slotsRefused(s))
    }
    for (const [s, b] of next) buckets.set(s.id, b)
    for (const s of limits) if (s.maxConcurrent !== undefined) flying.set(s.id, (flying.get(s.id) ?? 0) + 1)
    let ended = false
    return Either.right({
      headers,
      end: (used, at) => {
        if (ended) return
        ended = true
        for (const s of limits) {
          if (s.tokensPerMinute !== undefined && used !== undefined && !s.countsRequests) {
            buckets.set(s.id, correct(buckets.get(s.id), s.tokensPerMinute, tokens, used, at))
          }
          if (s.maxConcurrent !== undefined) {
            const n = (flying.get(s.id) ?? 1) - 1
            if (n <= 0) flying.delete(s.id)
            else flying.set(s.id, n)
          }
        }
      }
    })
  }
  return {
    takeNow,
    take: (limits, callId, tokens) => Effect.flatMap(Clock.currentTimeMillis, (now) => takeNow(limits, callId, tokens, now)),
    inFlight: (id) => flying.get(id) ?? 0,
    bucket: (id) => buckets.get(id)
  }
}

/** A call's limits as the Redis scripts read them. */
const sharedCall = (limits: CallLimits, callId: string, tokens: number): SharedLimitsCall => ({
  buckets: limits.flatMap((s) =>
    s.tokensPerMinute === undefined ? [] : [{ id: s.id, tpm: s.tokensPerMinute, amount: s.countsRequests ? 1 : tokens, corrected: !s.countsRequests }]
  ),
  slots: limits.flatMap((s) => (s.maxConcurrent === undefined ? [] : [{ id: s.id, max: s.maxConcurrent }])),
  callId
})

/**
 * The limits shared through Redis (or PostgreSQL without it: src/store/sharedGcra.ts `pgLimits`, the
 * same three steps as transactions). `leaseMs`: how long a slot outlives its instance's last renewal;
 * `live` lists the leases to renew (`renew`, every heartbeat). Redis unreachable: `fallback` decides.
 */
export const sharedLimiter = (redis: Pick<RedisGcra, "takeLimits" | "endLimits" | "renewLeases">, leaseMs: number, fallback: UpstreamLimiter, onFallback: (e: unknown) => void) => {
  const live = new Map<string, SharedLimitsCall>()
  const take = (limits: CallLimits, callId: string, tokens: number): Effect.Effect<LimitsTaken, RateLimited> => {
    const call = sharedCall(limits, callId, tokens)
    return Effect.flatMap(
      Effect.either(Effect.tryPromise(() => redis.takeLimits(call, leaseMs))),
      (answer): Effect.Effect<LimitsTaken, RateLimited> => {
        if (Either.isLeft(answer)) {
          onFallback(answer.left)
          return fallback.take(limits, callId, tokens)
        }
        const d = answer.right
        if (d._tag === "Limited") {
          const all = [...limits.filter((s) => s.tokensPerMinute !== undefined), ...limits.filter((s) => s.maxConcurrent !== undefined)]
          const s = all[d.scope]!
          return Effect.fail(d.scope < call.buckets.length ? refusedBy(s, call.buckets[d.scope]!.amount, d.remaining, d.resetMs, d.retryAfterMs) : slotsRefused(s))
        }
        if (call.slots.length > 0) live.set(callId, call)
        const tight = call.buckets[d.tightest]?.corrected === true ? call.buckets[d.tightest] : undefined
        let ended = false
        return Effect.succeed({
          headers: tight === undefined ? undefined : tokenHeaders(tight.tpm, d.remaining, d.resetMs),
          end: (used) => {
            if (ended) return
            ended = true
            live.delete(callId)
            // Not awaited: a lost end is a slot back at its lease's expiry, a bucket refilled in time.
            redis.endLimits(call, used === undefined ? 0 : tokens - used).catch(onFallback)
          }
        })
      }
    )
  }
  /** Push every live call's leases ahead (one script). */
  const renew = (): Promise<void> => {
    const leases: Array<{ slot: string; callId: string }> = []
    for (const c of live.values()) for (const s of c.slots) leases.push({ slot: s.id, callId: c.callId })
    return redis.renewLeases(leases, leaseMs)
  }
  const limiter: UpstreamLimiter = { takeNow: undefined, take }
  return { limiter, renew }
}
