/**
 * KeyRegistry: who a bearer token is, and the admin lifecycle (create, rotate with grace, revoke).
 * Time is the TestClock; the store is a fresh in-memory SQLite per test.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, TestClock } from "effect"
import { formatKey, newSecret, parseKey } from "../../src/domain/apiKey.ts"
import { newKeyId } from "../../src/domain/ids.ts"
import { KeyRegistry } from "../../src/services/KeyRegistry.ts"
import { Projects } from "../../src/services/Projects.ts"
import { KeysRepo } from "../../src/store/keysRepo.ts"
import { newProject, storeLayer } from "./layers.ts"

const CACHE_TTL = 1000
const Live = KeyRegistry.Default.pipe(Layer.provideMerge(Projects.Default), Layer.provideMerge(storeLayer({ keyCacheTtlMs: CACHE_TTL })))

/** A project with one development key; returns the registry, the project and the issued key. */
const setup = Effect.gen(function* () {
  const keys = yield* KeyRegistry
  const project = yield* newProject({ budget_credits: 500, rate_limit: { requests_per_minute: 120, burst: 7 } })
  const issued = yield* keys.create(project.id, "development")
  return { keys, project, issued }
})

const bearer = (token: string) => `Bearer ${token}`

/** The InvalidApiKey message for `authorization`; fails the test if it authenticates. */
const rejection = (authorization: string | undefined) =>
  Effect.flatMap(KeyRegistry, (keys) => Effect.flip(keys.authenticate(authorization))).pipe(
    Effect.map((e) => {
      expect(e._tag).toBe("InvalidApiKey")
      return e.message
    })
  )

describe("KeyRegistry.authenticate", () => {
  it.effect("a fresh key authenticates to its project's scope", () =>
    Effect.gen(function* () {
      const { keys, project, issued } = yield* setup
      expect(issued.secret).toMatch(/^tg_dev_[a-z2-7]{16}_[a-z2-7]{39}$/)
      const principal = yield* keys.authenticate(bearer(issued.secret))
      expect(principal).toEqual({
        keyId: issued.id,
        projectId: project.id,
        organization: "org_test",
        environment: "development",
        budgetCredits: 500,
        // The project's budget period and zone (migration 0019): the defaults.
        budgetPeriod: "month",
        timeZone: "UTC",
        rateLimit: { requestsPerMinute: 120, burst: 7 }
      })
      // The scheme is case-insensitive and trailing whitespace is tolerated.
      expect((yield* keys.authenticate(`bearer ${issued.secret}  `)).keyId).toBe(issued.id)
    }).pipe(Effect.provide(Live)))

  it.effect("missing key", () =>
    Effect.gen(function* () {
      yield* setup
      expect(yield* rejection(undefined)).toMatch(/^Missing API key/)
      expect(yield* rejection("")).toMatch(/^Missing API key/)
    }).pipe(Effect.provide(Live)))

  it.effect("malformed key: wrong scheme, garbage, damaged checksum", () =>
    Effect.gen(function* () {
      const { issued } = yield* setup
      expect(yield* rejection(`Basic ${issued.secret}`)).toMatch(/^Malformed API key/)
      expect(yield* rejection("Bearer sk-not-a-tollgate-key")).toMatch(/^Malformed API key/)
      expect(yield* rejection(issued.secret)).toMatch(/^Malformed API key/)
      const last = issued.secret.at(-1)!
      const damaged = issued.secret.slice(0, -1) + (last === "a" ? "b" : "a")
      expect(yield* rejection(bearer(damaged))).toMatch(/^Malformed API key/)
    }).pipe(Effect.provide(Live)))

  it.effect("unknown key id, wrong secret and wrong environment all answer 'Unknown API key.'", () =>
    Effect.gen(function* () {
      const { issued } = yield* setup
      expect(yield* rejection(bearer(formatKey(newKeyId(), "development", newSecret())))).toBe("Unknown API key.")
      expect(yield* rejection(bearer(formatKey(issued.id, "development", newSecret())))).toBe("Unknown API key.")
      const secret = parseKey(issued.secret)!.secret
      expect(yield* rejection(bearer(formatKey(issued.id, "production", secret)))).toBe("Unknown API key.")
    }).pipe(Effect.provide(Live)))

  it.effect("a revoked key fails at once, even if it was cached", () =>
    Effect.gen(function* () {
      const { keys, issued } = yield* setup
      yield* keys.authenticate(bearer(issued.secret)) // now cached
      const info = yield* keys.revoke(issued.id)
      expect(info.status).toBe("revoked")
      expect(info.revoked_at).toBe(new Date(0).toISOString())
      expect(yield* rejection(bearer(issued.secret))).toBe(`API key ${issued.id} has been revoked.`)
    }).pipe(Effect.provide(Live)))

  it.effect("a revocation written by another instance is seen once the cache entry ages out", () =>
    Effect.gen(function* () {
      const { keys, issued } = yield* setup
      const sql = yield* SqlClient.SqlClient
      yield* keys.authenticate(bearer(issued.secret))
      yield* sql`UPDATE api_keys SET revoked_at = 0 WHERE id = ${issued.id}`
      // Still served from this instance's cache...
      yield* TestClock.adjust(CACHE_TTL - 1)
      expect((yield* keys.authenticate(bearer(issued.secret))).keyId).toBe(issued.id)
      // ...until the entry is older than keyCacheTtlMs.
      yield* TestClock.adjust(1)
      expect(yield* rejection(bearer(issued.secret))).toMatch(/has been revoked/)
    }).pipe(Effect.provide(Live)))

  it.effect("authenticateCached (the fast path's, before any fiber) answers from the cache only: a miss until the row was read, then the key's scope until the entry ages out", () =>
    Effect.gen(function* () {
      const { keys, issued } = yield* setup
      const now = () => TestClock.currentTimeMillis
      const parsed = parseKey(issued.secret)!
      expect(keys.authenticateCached(bearer(issued.secret), yield* now())).toEqual({ miss: parsed })
      // The miss, read from the store (authenticateMiss), gives the key's own row as the scope...
      const principal = yield* keys.authenticateMiss(parsed, yield* now())
      expect(principal).toMatchObject({ keyId: issued.id, environment: "development" })
      // ...and from then on the cache alone answers the same, up to the last instant of its TTL.
      expect(keys.authenticateCached(bearer(issued.secret), yield* now())).toEqual(principal)
      yield* TestClock.adjust(CACHE_TTL - 1)
      expect(keys.authenticateCached(bearer(issued.secret), yield* now())).toEqual(principal)
      // A wrong secret for the cached id is refused from the cache; no header at all too.
      const wrong = keys.authenticateCached(bearer(formatKey(issued.id, "development", newSecret())), yield* now())
      expect(wrong).toMatchObject({ _tag: "InvalidApiKey", message: "Unknown API key." })
      expect(keys.authenticateCached(undefined, yield* now())).toMatchObject({ _tag: "InvalidApiKey" })
      // At the TTL the entry is stale: a miss again.
      yield* TestClock.adjust(1)
      expect(keys.authenticateCached(bearer(issued.secret), yield* now())).toEqual({ miss: parsed })
    }).pipe(Effect.provide(Live)))

  it.effect("a rotated key works during its grace and stops at the instant it ends", () =>
    Effect.gen(function* () {
      const { keys, issued } = yield* setup
      yield* TestClock.setTime(10_000)
      const fresh = yield* keys.rotate(issued.id, 60)
      expect(fresh.replaces).toBe(issued.id)
      expect(fresh.old_key_expires_at).toBe(new Date(70_000).toISOString())
      expect((yield* keys.authenticate(bearer(fresh.secret))).keyId).toBe(fresh.id)

      yield* TestClock.setTime(69_999)
      expect((yield* keys.authenticate(bearer(issued.secret))).keyId).toBe(issued.id)
      expect((yield* keys.info(issued.id)).status).toBe("rotated")

      yield* TestClock.setTime(70_000)
      expect(yield* rejection(bearer(issued.secret))).toMatch(/grace period has ended/)
      expect((yield* keys.info(issued.id)).status).toBe("expired")
      expect((yield* keys.authenticate(bearer(fresh.secret))).keyId).toBe(fresh.id)
    }).pipe(Effect.provide(Live)))

  it.effect("a rotated key keeps the old key's budget and upstream limits; the project's cap is not taken for the key's", () =>
    Effect.gen(function* () {
      const { keys, project } = yield* setup
      const sql = yield* SqlClient.SqlClient
      const capped = yield* keys.create(project.id, "development", { tokens_per_minute: 900, max_concurrent: 3 }, 300)
      const fresh = yield* keys.rotate(capped.id, 60)
      expect(fresh.budget_credits).toBe(300)
      const stored = yield* sql<{ budget_credits: number | null; tokens_per_minute: number | null; max_concurrent: number | null }>`
        SELECT budget_credits, tokens_per_minute, max_concurrent FROM api_keys WHERE id = ${fresh.id}`
      expect(stored).toEqual([{ budget_credits: 300, tokens_per_minute: 900, max_concurrent: 3 }])
      // A key without a budget of its own rotates into one without (not the project's 500).
      const uncapped = yield* keys.rotate(fresh.id, 60)
      const plain = yield* keys.rotate((yield* keys.create(project.id, "development")).id, 60)
      expect(uncapped.budget_credits).toBe(300)
      expect(plain.budget_credits).toBeUndefined()
      expect(yield* sql`SELECT budget_credits FROM api_keys WHERE id = ${plain.id}`).toEqual([{ budget_credits: null }])
    }).pipe(Effect.provide(Live)))

  it.effect("rotation with zero grace ends the old key immediately, even while cached", () =>
    Effect.gen(function* () {
      const { keys, issued } = yield* setup
      yield* keys.authenticate(bearer(issued.secret))
      const fresh = yield* keys.rotate(issued.id, 0)
      expect(yield* rejection(bearer(issued.secret))).toMatch(/grace period has ended/)
      expect((yield* keys.authenticate(bearer(fresh.secret))).keyId).toBe(fresh.id)
    }).pipe(Effect.provide(Live)))
})

describe("KeyRegistry admin operations", () => {
  it.effect("create: unknown project is AdminNotFound, bad environment is InvalidRequest", () =>
    Effect.gen(function* () {
      const { keys, project, issued } = yield* setup
      const notFound = yield* Effect.flip(keys.create("prj_missing", "development"))
      expect(notFound._tag).toBe("AdminNotFound")
      const badEnv = yield* Effect.flip(keys.create(project.id, "qa"))
      expect(badEnv).toMatchObject({ _tag: "InvalidRequest", param: "environment" })
      yield* TestClock.adjust(1) // keys are listed by creation time (then id)
      const prod = yield* keys.create(project.id, "production")
      expect(prod.secret.startsWith("tg_prd_")).toBe(true)
      expect((yield* keys.authenticate(bearer(prod.secret))).environment).toBe("production")
      expect((yield* keys.list(project.id, undefined, { cursor: undefined, limit: 25 })).data.map((k) => [k.id, k.environment, k.status])).toEqual([
        [issued.id, "development", "active"],
        [prod.id, "production", "active"]
      ])
    }).pipe(Effect.provide(Live)))

  it.effect("rotate: invalid grace, unknown key, already rotated, revoked", () =>
    Effect.gen(function* () {
      const { keys, issued } = yield* setup
      for (const grace of [-1, 1.5, Number.NaN]) {
        expect(yield* Effect.flip(keys.rotate(issued.id, grace))).toMatchObject({ _tag: "InvalidRequest", param: "grace_seconds" })
      }
      expect((yield* Effect.flip(keys.rotate(newKeyId(), 10)))._tag).toBe("AdminNotFound")

      const fresh = yield* keys.rotate(issued.id, 3600)
      const again = yield* Effect.flip(keys.rotate(issued.id, 3600))
      expect(again._tag).toBe("AdminConflict")
      expect(again.message).toContain("is rotated")
      const oldInfo = yield* keys.info(issued.id)
      expect(oldInfo).toMatchObject({ status: "rotated", replaced_by: fresh.id, expires_at: new Date(3_600_000).toISOString() })
      expect((yield* keys.info(fresh.id)).replaces).toBe(issued.id)

      yield* keys.revoke(fresh.id)
      const revoked = yield* Effect.flip(keys.rotate(fresh.id, 0))
      expect(revoked._tag).toBe("AdminConflict")
      expect(revoked.message).toContain("is revoked")
    }).pipe(Effect.provide(Live)))

  it.effect("revoke: unknown key is AdminNotFound; revoking twice keeps the first revocation time", () =>
    Effect.gen(function* () {
      const { keys, issued } = yield* setup
      expect((yield* Effect.flip(keys.revoke(newKeyId())))._tag).toBe("AdminNotFound")
      yield* TestClock.setTime(5_000)
      yield* keys.revoke(issued.id)
      yield* TestClock.setTime(9_000)
      const second = yield* keys.revoke(issued.id)
      expect(second.revoked_at).toBe(new Date(5_000).toISOString())
    }).pipe(Effect.provide(Live)))

  it.effect("forgetProject drops cached principals so a new cap is seen at once", () =>
    Effect.gen(function* () {
      const { keys, project, issued } = yield* setup
      const projects = yield* Projects
      expect((yield* keys.authenticate(bearer(issued.secret))).budgetCredits).toBe(500)
      yield* projects.update(project.id, { budget_credits: 900 })
      expect((yield* keys.authenticate(bearer(issued.secret))).budgetCredits).toBe(500)
      yield* keys.forgetProject(project.id)
      expect((yield* keys.authenticate(bearer(issued.secret))).budgetCredits).toBe(900)
    }).pipe(Effect.provide(Live)))
})

describe("key checks in constant time (issue 19, finding 7)", () => {
  const Cached = KeyRegistry.Default.pipe(Layer.provideMerge(Projects.Default), Layer.provideMerge(storeLayer({ keyCacheTtlMs: 600_000 })))

  it.live("an unknown key id costs what a wrong secret costs: medians within 1.5× of each other, interleaved", () =>
    Effect.gen(function* () {
      const { keys, issued } = yield* setup
      const parsed = parseKey(issued.secret)!
      const wrongSecret = bearer(formatKey(parsed.keyId, "development", newSecret()))
      const unknownId = bearer(formatKey(newKeyId(), "development", newSecret()))
      const time = (authorization: string) => {
        const t0 = performance.now()
        Effect.runSync(Effect.either(keys.authenticate(authorization)))
        return performance.now() - t0
      }
      for (let i = 0; i < 200; i++) time(i % 2 === 0 ? wrongSecret : unknownId) // warm both paths
      const wrong: Array<number> = []
      const unknown: Array<number> = []
      for (let i = 0; i < 2000; i++) {
        wrong.push(time(wrongSecret))
        unknown.push(time(unknownId))
      }
      const median = (xs: Array<number>) => xs.sort((a, b) => a - b)[xs.length >> 1]!
      const [w, u] = [median(wrong), median(unknown)]
      console.log(`[finding 7] key check median: wrong secret ${(w * 1000).toFixed(1)} µs, unknown key id ${(u * 1000).toFixed(1)} µs`)
      expect(u / w).toBeLessThan(1.5)
      expect(w / u).toBeLessThan(1.5)
    }).pipe(Effect.provide(Cached)))
})

describe("one store read a key at a time (a cache entry that ages out under load is read once)", () => {
  /**
   * The real KeysRepo, with each `find` counted, and the first one's answer held at a gate the test
   * opens (the row is read from the store first, then held): so the misses the test begins are
   * certainly under way together, and a change can land while that read is out.
   */
  const gated = () => {
    const state = { reads: 0, gate: Effect.runSync(Deferred.make<void>()) }
    const repo = Layer.effect(
      KeysRepo,
      Effect.map(KeysRepo, (real) => ({
        ...real,
        find: (keyId: string) =>
          Effect.flatMap(
            Effect.sync(() => ++state.reads),
            (n) => Effect.tap(real.find(keyId), () => (n === 1 ? Deferred.await(state.gate) : Effect.void))
          )
      }) as KeysRepo)
    ).pipe(Layer.provide(KeysRepo.Default))
    const layer = KeyRegistry.DefaultWithoutDependencies.pipe(
      Layer.provide(repo),
      Layer.provideMerge(Projects.Default),
      Layer.provideMerge(storeLayer({ keyCacheTtlMs: CACHE_TTL }))
    )
    return { state, layer }
  }
  /** `body` on a fresh gated registry, with a project and its key made (no read yet counted: the next one is held). */
  type Gated = Effect.Effect.Success<typeof setup> & { readonly state: ReturnType<typeof gated>["state"] }
  const gatedRun = <A, E>(body: (c: Gated) => Effect.Effect<A, E, KeyRegistry>) => {
    const { state, layer } = gated()
    return Effect.gen(function* () {
      const made = yield* setup
      state.reads = 0
      return yield* body({ ...made, state })
    }).pipe(Effect.provide(layer))
  }
  /** Let the forked callers run until `n` reads have begun (each waits at the gate). */
  const readsBegun = (state: { reads: number }, n: number) =>
    Effect.gen(function* () {
      for (let i = 0; i < 1000 && state.reads < n; i++) yield* Effect.yieldNow()
      expect(state.reads).toBe(n)
    })

  it.effect("50 calls that miss together make one read, and all 50 get the key's scope", () =>
    gatedRun(({ keys, issued, state }) =>
      Effect.gen(function* () {
        const calls = yield* Effect.forkAll(Array.from({ length: 50 }, () => keys.authenticate(bearer(issued.secret))))
        yield* readsBegun(state, 1)
        // Every caller has missed by now and waits on the one read.
        for (let i = 0; i < 100; i++) yield* Effect.yieldNow()
        expect(state.reads).toBe(1)
        yield* Deferred.succeed(state.gate, undefined)
        const principals = yield* Fiber.join(calls)
        expect(principals.map((p) => p.keyId)).toEqual(Array(50).fill(issued.id))
        expect(state.reads).toBe(1)
        // The entry ages out: the next miss reads once more.
        yield* TestClock.adjust(CACHE_TTL)
        yield* Effect.forEach(Array.from({ length: 5 }), () => keys.authenticate(bearer(issued.secret)), { concurrency: "unbounded" })
        expect(state.reads).toBe(2)
      })
    ))

  it.effect("a caller that goes away does not cancel the read the others wait on", () =>
    gatedRun(({ keys, issued, state }) =>
      Effect.gen(function* () {
        const first = yield* Effect.fork(keys.authenticate(bearer(issued.secret)))
        yield* readsBegun(state, 1)
        const second = yield* Effect.fork(keys.authenticate(bearer(issued.secret)))
        for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
        yield* Fiber.interrupt(first)
        yield* Deferred.succeed(state.gate, undefined)
        expect((yield* Fiber.join(second)).keyId).toBe(issued.id)
        expect(state.reads).toBe(1)
      })
    ))

  it.effect("a revocation during a read: the calls after it read again, and what the read found before it is not kept", () =>
    gatedRun(({ keys, issued, state }) =>
      Effect.gen(function* () {
        // The first read finds the key live, and is held there.
        const before = yield* Effect.fork(keys.authenticate(bearer(issued.secret)))
        yield* readsBegun(state, 1)
        yield* keys.revoke(issued.id) // reads the row itself too
        const afterRevoke = state.reads
        // A call after the revocation does not wait on the read begun before it: it reads, and is refused.
        expect(yield* rejection(bearer(issued.secret))).toBe(`API key ${issued.id} has been revoked.`)
        expect(state.reads).toBe(afterRevoke + 1)
        yield* Deferred.succeed(state.gate, undefined)
        expect((yield* Fiber.join(before)).keyId).toBe(issued.id) // it read before the revocation committed
        // The row that read found is not remembered: the next call is refused from the cache.
        expect(keys.authenticateCached(bearer(issued.secret), yield* TestClock.currentTimeMillis)).toMatchObject({ _tag: "InvalidApiKey", message: `API key ${issued.id} has been revoked.` })
      })
    ))
})
