/**
 * The rate limit shared by several instances through Redis (REDIS_URL), on the real Redis of
 * scripts/services.sh: one GCRA Lua script on Redis's clock, so three instances together admit what
 * one would (burst + rate·t), never three times that. And when Redis cannot answer, the conservative
 * fallback: each instance admits its share (the limit divided by the live instances), says so in its
 * health and counts it. Runs in `npm test` whenever Redis answers; under CI=true it must run.
 */
import { Effect, Either, Layer, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { makeSettings, Settings } from "../../src/domain/config.ts"
import { Instance } from "../../src/services/Instance.ts"
import { RateLimiter, RateLimiterPostgres, RateLimiterShared, rateLimitFallbacks } from "../../src/services/RateLimiter.ts"
import { StoreDatabaseLive } from "../../src/store/Database.ts"
import { freshSchema, onEngines, TEST_REDIS_URL, type TestSchema } from "../support/pg.ts"
import { newProjectId } from "../../src/domain/ids.ts"
import { storeLayer } from "./layers.ts"

const REDIS_URL = TEST_REDIS_URL

const dir = mkdtempSync(join(tmpdir(), "tollgate-rl-"))
const runtimes: Array<ManagedRuntime.ManagedRuntime<RateLimiter, never>> = []
const schemas: Array<TestSchema> = []
afterAll(async () => {
  for (const rt of runtimes) await rt.dispose()
  for (const s of schemas) s.drop()
  rmSync(dir, { recursive: true, force: true })
})

/**
 * `n` instances: each its own limiter (and Redis client) on `redisUrl`, all on one store file; each
 * takes its epoch (src/services/Instance.ts), which is what the fallback counts.
 */
const instances = async (n: number, redisUrl: string, store: string) => {
  const rts = Array.from({ length: n }, (_, i) =>
    ManagedRuntime.make(
      RateLimiterShared(redisUrl).pipe(
        Layer.provideMerge(Instance.Default),
        Layer.provide(storeLayer({ databaseUrl: `sqlite:${join(dir, store)}`, instanceId: `limiter-${i}` }))
      )
    )
  )
  runtimes.push(...rts)
  // Started one after the other: the first migrates the file.
  for (const rt of rts) await rt.runPromise(RateLimiter)
  return rts
}

const admitAll = (rts: ReadonlyArray<ManagedRuntime.ManagedRuntime<RateLimiter, never>>, projectId: string, perInstance: number, limit: { requestsPerMinute: number; burst: number }) =>
  Promise.all(
    rts.flatMap((rt) => Array.from({ length: perInstance }, () => rt.runPromise(Effect.either(Effect.flatMap(RateLimiter, (l) => l.admit(projectId, limit))))))
  )

describe.runIf(onEngines("RateLimiterShared (Redis)", { redis: true }))("RateLimiterShared: one limit across instances", () => {
  it("three instances admit together what one would: burst + rate·t, not three times it", async () => {
    const rts = await instances(3, REDIS_URL, "shared.db")
    const limit = { requestsPerMinute: 60, burst: 10 }
    const projectId = newProjectId()
    const started = Date.now()
    const outcomes = await admitAll(rts, projectId, 20, limit)
    const elapsedMs = Date.now() - started
    const admitted = outcomes.filter(Either.isRight).length
    // One per second refills: at most burst + floor(t / 1 s) + 1 over the burst's span; 30 if per instance.
    expect(admitted).toBeGreaterThanOrEqual(limit.burst)
    expect(admitted).toBeLessThanOrEqual(limit.burst + Math.floor(elapsedMs / 1000) + 1)
    for (const o of outcomes.filter(Either.isLeft)) expect(o.left._tag).toBe("RateLimited")
    for (const rt of rts) expect(await rt.runPromise(Effect.map(RateLimiter, (l) => l.health()))).toEqual({ mode: "shared", degraded: false })
  })

  it("Redis unreachable: each instance admits its share (limit ÷ live instances), reports degraded, counts the fallback", async () => {
    // Port 1 on loopback: nothing listens, every command fails at once.
    const again = await instances(3, "redis://127.0.0.1:1", "fallback.db")
    // Let every instance beat once more and see all three (the first counted only itself).
    await new Promise((r) => setTimeout(r, 5_500))
    const before = rateLimitFallbacks.count
    const limit = { requestsPerMinute: 60, burst: 9 }
    const projectId = newProjectId()
    const outcomes = await admitAll(again, projectId, 10, limit)
    const admitted = outcomes.filter(Either.isRight).length
    // Never open: together at most the burst (each 9 ÷ instances it saw, rounded down).
    expect(admitted).toBeGreaterThan(0)
    expect(admitted).toBeLessThanOrEqual(limit.burst)
    expect(rateLimitFallbacks.count - before).toBe(30)
    const health = await again[2]!.runPromise(Effect.map(RateLimiter, (l) => l.health()))
    expect(health).toMatchObject({ mode: "shared", degraded: true })
    expect(health.mode === "shared" && health.degraded ? health.share : 0).toBeGreaterThanOrEqual(3)
  }, 20_000)
})

describe.runIf(onEngines("RateLimiterPostgres (PostgreSQL)"))("RateLimiterPostgres: one limit across instances without Redis", () => {
  it("three instances on one PostgreSQL database admit together what one would (one guarded upsert per admission)", async () => {
    const schema = freshSchema()
    schemas.push(schema)
    const rts = Array.from({ length: 3 }, () =>
      ManagedRuntime.make(
        RateLimiterPostgres.pipe(
          Layer.provide(StoreDatabaseLive),
          Layer.provide(Layer.succeed(Settings, makeSettings({ databaseUrl: schema.url, pgPoolSize: 4 })))
        )
      )
    )
    runtimes.push(...rts)
    for (const rt of rts) await rt.runPromise(RateLimiter)
    const limit = { requestsPerMinute: 60, burst: 10 }
    const projectId = newProjectId()
    const started = Date.now()
    const outcomes = await admitAll(rts, projectId, 20, limit)
    const elapsedMs = Date.now() - started
    const admitted = outcomes.filter(Either.isRight).length
    expect(admitted).toBeGreaterThanOrEqual(limit.burst)
    expect(admitted).toBeLessThanOrEqual(limit.burst + Math.floor(elapsedMs / 1000) + 1)
    for (const o of outcomes.filter(Either.isLeft)) {
      expect(o.left._tag).toBe("RateLimited")
      expect(o.left.retryAfterMs).toBeGreaterThan(0)
      expect(o.left.retryAfterMs).toBeLessThanOrEqual(1000)
    }
    for (const rt of rts) expect(await rt.runPromise(Effect.map(RateLimiter, (l) => l.health()))).toEqual({ mode: "shared", degraded: false })
  })
})
