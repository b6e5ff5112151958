/**
 * The rate limit shared by several instances through Redis (REDIS_URL), on the real Redis of
 * scripts/services.sh: one GCRA Lua script on Redis's clock, so three instances together admit
 * exactly what spec/rateLimit.ts's GCRA admits for one project on that clock, never three times it. And when Redis cannot answer, the conservative
 * fallback: each instance admits its share (the limit divided by the live instances), says so in its
 * health and counts it. Runs in `npm test` whenever Redis answers; under CI=true it must run.
 */
import { Effect, Either, Layer, type ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it, onTestFinished } from "vitest"
import { Instance } from "../../src/services/Instance.ts"
import { RateLimiter, RateLimiterPostgres, RateLimiterShared, rateLimitFallbacks } from "../../src/services/RateLimiter.ts"
import { DatabaseLive, StoreDatabaseLive } from "../../src/store/Database.ts"
import { freshSchema, onEngines, pgQuerySync, TEST_REDIS_URL, type TestSchema } from "../support/pg.ts"
import { checkGcra, emissionIntervalMicros, type RateLimit } from "../../spec/rateLimit.ts"
import { Redis } from "ioredis"
import { newProjectId } from "../../src/domain/ids.ts"
import { testRuntime } from "../support/runtime.ts"

const REDIS_URL = TEST_REDIS_URL

const dir = mkdtempSync(join(tmpdir(), "tollgate-rl-"))
const schemas: Array<TestSchema> = []
afterAll(async () => {
  for (const s of schemas) s.drop()
  rmSync(dir, { recursive: true, force: true })
})

/**
 * `n` instances: each its own limiter (and Redis client) on `redisUrl`, all on one store file; each
 * takes its epoch (src/services/Instance.ts), which is what the fallback counts.
 */
const instances = async (n: number, redisUrl: string, store: string) => {
  const rts = Array.from({ length: n }, (_, i) =>
    testRuntime(
      RateLimiterShared(redisUrl).pipe(Layer.provideMerge(Instance.Default), Layer.provide(DatabaseLive)),
      { databaseUrl: `sqlite:${join(dir, store)}`, instanceId: `limiter-${i}` },
      onTestFinished
    )
  )
  // Started one after the other: the first migrates the file.
  for (const rt of rts) await rt.runPromise(RateLimiter)
  return rts
}

const admitAll = (rts: ReadonlyArray<ManagedRuntime.ManagedRuntime<RateLimiter, unknown>>, projectId: string, perInstance: number, limit: { requestsPerMinute: number; burst: number }) =>
  Promise.all(
    rts.flatMap((rt) => Array.from({ length: perInstance }, () => rt.runPromise(Effect.either(Effect.flatMap(RateLimiter, (l) => l.admit(projectId, limit))))))
  )

/** How many of `n` admissions of one project, all at `nowMicros` on an empty bucket, spec/rateLimit.ts admits. */
const specAdmits = (n: number, limit: RateLimit, nowMicros: number): number => {
  let state = 0
  let admitted = 0
  for (let i = 0; i < n; i++) {
    const d = checkGcra(state, limit, nowMicros)
    if (d._tag === "Allowed") {
      state = d.state
      admitted++
    }
  }
  return admitted
}

/**
 * Invariant: instances sharing one limit admit together exactly what the spec's GCRA admits for one
 * project, on the shared store's clock. 20 admissions on each instance at once, between two readings
 * of that clock (`clockMicros`); one a minute with a burst of 10, so nothing refills within the test
 * and the spec admits the same at the span's start and end (checked): exactly 10, where limiters per
 * instance would admit 30. Every refusal is RateLimited, its retry within one emission interval.
 */
const expectOneLimit = async (rts: ReadonlyArray<ManagedRuntime.ManagedRuntime<RateLimiter, unknown>>, clockMicros: () => Promise<number>) => {
  const limit = { requestsPerMinute: 1, burst: 10 }
  const projectId = newProjectId()
  const from = await clockMicros()
  const outcomes = await admitAll(rts, projectId, 20, limit)
  const to = await clockMicros()
  const expected = specAdmits(outcomes.length, limit, from)
  expect(specAdmits(outcomes.length, limit, to)).toBe(expected)
  expect(outcomes.filter(Either.isRight).length).toBe(expected)
  for (const o of outcomes.filter(Either.isLeft)) {
    expect(o.left._tag).toBe("RateLimited")
    expect(o.left.retryAfterMs).toBeGreaterThan(0)
    expect(o.left.retryAfterMs).toBeLessThanOrEqual(emissionIntervalMicros(limit) / 1000)
  }
  for (const rt of rts) expect(await rt.runPromise(Effect.map(RateLimiter, (l) => l.health()))).toEqual({ mode: "shared", degraded: false })
}

describe.runIf(onEngines("RateLimiterShared (Redis)", { redis: true }))("RateLimiterShared: one limit across instances", () => {
  it("three instances admit together exactly what the spec's GCRA admits on Redis's clock, not three times it", async () => {
    const rts = await instances(3, REDIS_URL, "shared.db")
    const redis = new Redis(REDIS_URL)
    try {
      await expectOneLimit(rts, async () => {
        const [seconds, micros] = await redis.time()
        return Number(seconds) * 1_000_000 + Number(micros)
      })
    } finally {
      redis.disconnect()
    }
  })

  it("Redis unreachable: each instance admits its share (limit ÷ live instances), reports degraded, counts the fallback", async () => {
    // Port 1 on loopback: nothing listens, every command fails at once.
    const again = await instances(3, "redis://127.0.0.1:1", "fallback.db")
    // Each instance recounts the live ones every 5 s (the first counted only itself): wait until every
    // one has seen all three — a condition, not a guess at how long that takes. A probe admission on
    // another project fails over to the fallback, whose health says the share it divides by.
    const probe = newProjectId()
    const shares = () =>
      Promise.all(
        again.map((rt) =>
          rt.runPromise(
            Effect.gen(function* () {
              const limiter = yield* RateLimiter
              yield* Effect.either(limiter.admit(probe, { requestsPerMinute: 60_000, burst: 1_000 }))
              const health = limiter.health()
              return health.mode === "shared" && health.degraded ? health.share : 0
            })
          )
        )
      )
    await expect.poll(shares, { timeout: 15_000, interval: 250 }).toEqual([3, 3, 3])
    const before = rateLimitFallbacks.count
    const limit = { requestsPerMinute: 60, burst: 9 }
    const projectId = newProjectId()
    const outcomes = await admitAll(again, projectId, 10, limit)
    const admitted = outcomes.filter(Either.isRight).length
    // Never open: together at most the burst (each 9 ÷ instances it saw, rounded down).
    expect(admitted).toBeGreaterThan(0)
    expect(admitted).toBeLessThanOrEqual(limit.burst)
    expect(rateLimitFallbacks.count - before).toBe(30)
    for (const rt of again) expect(await rt.runPromise(Effect.map(RateLimiter, (l) => l.health()))).toMatchObject({ mode: "shared", degraded: true, share: 3 })
  }, 30_000)
})

describe.runIf(onEngines("RateLimiterPostgres (PostgreSQL)"))("RateLimiterPostgres: one limit across instances without Redis", () => {
  it("three instances on one PostgreSQL database admit together what one would (one guarded upsert per admission)", async () => {
    const schema = freshSchema()
    schemas.push(schema)
    const rts = Array.from({ length: 3 }, () =>
      testRuntime(RateLimiterPostgres.pipe(Layer.provide(StoreDatabaseLive)), { databaseUrl: schema.url, pgPoolSize: 4 }, onTestFinished)
    )
    for (const rt of rts) await rt.runPromise(RateLimiter)
    await expectOneLimit(rts, async () => pgQuerySync<{ us: number }>(schema.url, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us")[0]!.us)
  })
})
