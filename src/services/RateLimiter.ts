/**
 * Per-project rate limit (GCRA, the rule in spec/rateLimit.ts): held in memory by default (time
 * from Effect's Clock, so tests drive it with TestClock), or shared by every instance through Redis
 * when REDIS_URL is set (`RateLimiterShared`, on Redis's clock).
 */
import { Clock, Context, Duration, Effect, Either, Layer, Option, Redacted, Schedule } from "effect"
import { checkGcra, emissionIntervalMicros, type GcraState, type RateLimit } from "../../spec/rateLimit.ts"
import { Settings } from "../domain/config.ts"
import { RateLimited } from "../domain/errors.ts"
import { isPostgresUrl } from "../domain/databaseUrl.ts"
import { staleAfterMs } from "../../spec/epochs.ts"
import { makeEpochStore } from "../store/epochStore.ts"
import { connectRedisGcra, pgGcra, pgLimits, type RedisGcra, type SharedGcraDecision } from "../store/sharedGcra.ts"
import { localLimiter, sharedLimiter, type UpstreamLimiter } from "./UpstreamLimits.ts"

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

/** How the limit is kept, for GET /readyz and /metrics. */
export type RateLimitHealth =
  | { readonly mode: "local" }
  | { readonly mode: "shared"; readonly degraded: false }
  | { readonly mode: "shared"; readonly degraded: true; readonly reason: string; readonly share: number }

const limitedError = (limit: RateLimit, retryAfterMicros: number) =>
  new RateLimited({
    message: `Rate limit of ${limit.requestsPerMinute} requests per minute (burst ${limit.burst}) reached for this project; retry after ${formatDuration(retryAfterMicros / 1000)}.`,
    retryAfterMs: Math.ceil(retryAfterMicros / 1000),
    // Named like the other limits (issue 41): the wire's `param`.
    param: "project.rate_limit.requests_per_minute"
  })

/** The GCRA of spec/rateLimit.ts over an in-memory map of TATs: one instance's own limiter. */
const makeLocal = () => {
  const states = new Map<string, GcraState>()
  /** Admit one request of `projectId` at `now` (ms), or RateLimited carrying Retry-After. */
  const admitAt = (projectId: string, limit: RateLimit, now: number): Either.Either<RateVerdict, RateLimited> => {
    const decision = checkGcra(states.get(projectId) ?? 0, limit, now * 1000)
    if (decision._tag === "Limited") return Either.left(limitedError(limit, decision.retryAfterMicros))
    states.set(projectId, decision.state)
    return Either.right({
      limit: limit.requestsPerMinute,
      remaining: decision.remaining,
      resetMs: decision.resetMicros / 1000
    })
  }
  const peekAt = (projectId: string, limit: RateLimit, now: number): boolean => checkGcra(states.get(projectId) ?? 0, limit, now * 1000)._tag === "Allowed"
  return { admitAt, peekAt }
}

/**
 * A limiter: `admit` (one admission, or RateLimited) and its health. Only the in-memory one has
 * `admitAt`, synchronous: the hot path's way in (src/services/gateway/plan.ts calls it without an
 * Effect when `mode` is "local"), and `peek` (whether an admission would pass, admitting nothing),
 * which the tests compare with the spec; a shared limiter has no local state to peek at (evaluate
 * reads its own verdict instead).
 */
export type RateLimiterApi =
  | (LimiterCommon & {
      readonly mode: "local"
      readonly admitAt: (projectId: string, limit: RateLimit, now: number) => Either.Either<RateVerdict, RateLimited>
      readonly peek: (projectId: string, limit: RateLimit) => Effect.Effect<boolean>
    })
  | (LimiterCommon & { readonly mode: "shared" })

interface LimiterCommon {
  readonly admit: (projectId: string, limit: RateLimit) => Effect.Effect<RateVerdict, RateLimited>
  readonly health: () => RateLimitHealth
  /** The limits that protect the upstream (tokens per minute, calls in flight): src/services/UpstreamLimits.ts. */
  readonly upstream: UpstreamLimiter
}

/** The in-memory limiter (one instance, or tests). */
const localService = (): RateLimiterApi => {
  const local = makeLocal()
  /** Admit one request of `projectId` now, or fail with RateLimited carrying Retry-After. */
  const admit = (projectId: string, limit: RateLimit): Effect.Effect<RateVerdict, RateLimited> =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => local.admitAt(projectId, limit, now))
  const peek = (projectId: string, limit: RateLimit): Effect.Effect<boolean> => Effect.map(Clock.currentTimeMillis, (now) => local.peekAt(projectId, limit, now))
  return {
    mode: "local",
    admitAt: local.admitAt,
    admit,
    peek,
    health: (): RateLimitHealth => ({ mode: "local" }),
    upstream: localLimiter()
  }
}

/** The limiter; `Default` is the in-memory one (a tag, not an Effect.Service: its shape is a union by mode). */
export class RateLimiter extends Context.Tag("tollgate/RateLimiter")<RateLimiter, RateLimiterApi>() {
  static readonly Default: Layer.Layer<RateLimiter> = Layer.sync(RateLimiter, localService)
}

/**
 * How many instances share the limit while Redis is away: the live epochs of the shared store
 * (migration 0004's `instances`: not stopped, heartbeat fresher than the recovery's staleness bound;
 * at least 1), read again every 5 s. A SIGKILLed instance still counts until its heartbeat is stale,
 * which only makes each share smaller.
 */
const COUNT_EVERY_MS = 5_000

/**
 * The limit shared by every instance: each admission is one atomic step in the shared store — a Lua
 * script in Redis (REDIS_URL) or a guarded upsert in PostgreSQL (no REDIS_URL), on that store's
 * clock (src/store/sharedGcra.ts). When the store cannot answer, the limiter does not open: each
 * instance admits with its own in-memory GCRA at the limit divided by the number of live instances
 * (rate and burst, rounded down, at least 1), so all of them together stay within the limit; it says
 * so in GET /readyz and counts it in /metrics (`tollgate_rate_limit_fallback_total`), and goes back
 * to the shared store with the next admission once it answers.
 */
const makeShared = (
  store: string,
  admitShared: (projectId: string, intervalMicros: number, burst: number) => Effect.Effect<SharedGcraDecision, unknown>,
  upstream: UpstreamLimiter = localLimiter()
) =>
  Effect.gen(function* () {
    const epochs = yield* makeEpochStore
    const staleMs = staleAfterMs((yield* Settings).heartbeatMs)
    const fallback = makeLocal()
    let instances = 1
    let degradedReason: string | undefined
    const count = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      instances = Math.max(1, yield* epochs.liveCount(now, staleMs))
    }).pipe(Effect.catchAllCause((cause) => Effect.logWarning("rate limiter: counting the live instances failed", cause)))
    yield* count
    yield* Effect.forkScoped(Effect.repeat(Effect.delay(count, Duration.millis(COUNT_EVERY_MS)), Schedule.forever))

    const share = (limit: RateLimit): RateLimit => ({
      requestsPerMinute: Math.max(1, Math.floor(limit.requestsPerMinute / instances)),
      burst: Math.max(1, Math.floor(limit.burst / instances))
    })

    const admit = (projectId: string, limit: RateLimit): Effect.Effect<RateVerdict, RateLimited> =>
      Effect.flatMap(
        Effect.either(admitShared(projectId, emissionIntervalMicros(limit), Math.max(1, limit.burst))),
        (answer): Effect.Effect<RateVerdict, RateLimited> => {
          if (Either.isRight(answer)) {
            degradedReason = undefined
            const d = answer.right
            return d._tag === "Limited"
              ? Effect.fail(limitedError(limit, d.retryAfterMicros))
              : Effect.succeed({ limit: limit.requestsPerMinute, remaining: d.remaining, resetMs: d.resetMicros / 1000 })
          }
          const e = answer.left as { error?: { message?: unknown }; message?: unknown }
          degradedReason = `${store} is unreachable (${String(e.error?.message ?? e.message ?? "no answer")})`
          rateLimitFallbacks.count++
          const divided = share(limit)
          return Effect.flatMap(Clock.currentTimeMillis, (now) =>
            Either.mapLeft(fallback.admitAt(projectId, divided, now), () => limitedError(divided, emissionIntervalMicros(divided)))
          )
        }
      )

    return RateLimiter.of({
      mode: "shared",
      admit,
      upstream,
      health: (): RateLimitHealth =>
        degradedReason === undefined ? { mode: "shared", degraded: false } : { mode: "shared", degraded: true, reason: degradedReason, share: instances }
    })
  })

/**
 * The upstream limits shared through `store` (Redis, or PostgreSQL): a slot's lease lasts as long as
 * the epoch recovery waits before it calls an instance dead, and is renewed every heartbeat while its
 * call lives.
 */
const upstreamShared = (store: Pick<RedisGcra, "takeLimits" | "endLimits" | "renewLeases">) =>
  Effect.gen(function* () {
    const heartbeatMs = (yield* Settings).heartbeatMs
    const shared = sharedLimiter(store, staleAfterMs(heartbeatMs), localLimiter(), () => rateLimitFallbacks.count++)
    yield* Effect.forkScoped(
      Effect.repeat(
        Effect.delay(Effect.catchAllCause(Effect.tryPromise(shared.renew), () => Effect.void), Duration.millis(heartbeatMs)),
        Schedule.forever
      )
    )
    return shared.limiter
  })

/** The limit shared through Redis (REDIS_URL). */
export const RateLimiterShared = (redisUrl: string) =>
  Layer.scoped(
    RateLimiter,
    Effect.gen(function* () {
      const redis = yield* Effect.acquireRelease(
        Effect.sync(() => connectRedisGcra(redisUrl)),
        (r) => Effect.promise(() => r.close())
      )
      // A start waits up to a second for Redis; still unreachable, it serves on the fallback meanwhile.
      yield* Effect.promise(() => redis.ready(1_000))
      const upstream = yield* upstreamShared(redis)
      return yield* makeShared("Redis", (projectId, interval, burst) => Effect.tryPromise(() => redis.admit(projectId, interval, burst)), upstream)
    })
  )

/** The limit shared through PostgreSQL (a postgres:// DATABASE_URL and no REDIS_URL). */
export const RateLimiterPostgres = Layer.scoped(
  RateLimiter,
  Effect.gen(function* () {
    const admit = yield* pgGcra
    return yield* makeShared("PostgreSQL", admit, yield* upstreamShared(yield* pgLimits))
  })
)

/** Admissions made by the fallback because Redis could not answer (read by /metrics). */
export const rateLimitFallbacks = { count: 0 }

/**
 * The limiter the settings name: shared through Redis (REDIS_URL), else through PostgreSQL (a
 * postgres:// DATABASE_URL: several instances may share it), else this instance's own (SQLite: one
 * instance, and the synchronous in-memory path).
 */
export const RateLimiterLive = Layer.unwrapEffect(
  Effect.map(Settings, (s) =>
    Option.isSome(s.redisUrl)
      ? RateLimiterShared(Redacted.value(s.redisUrl.value))
      : isPostgresUrl(s.databaseUrl)
        ? RateLimiterPostgres
        : RateLimiter.Default
  )
)
