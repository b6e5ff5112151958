/**
 * The shared rate limit's state in Redis (REDIS_URL): GCRA as ONE Lua script, so the read of a
 * project's theoretical arrival time (TAT), the decision and the write are one atomic step on the
 * Redis server whichever instance asks, on the server's clock (`TIME`), never an instance's. It is
 * spec/rateLimit.ts `checkGcra`, line for line, in microseconds; the key expires once the bucket is
 * full again, so idle projects cost nothing. Budgets never live here: only the limiter's TAT.
 *
 * Without Redis, PostgreSQL keeps the same state (`pgGcra`): one guarded upsert per admission on the
 * database's clock.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Runtime } from "effect"
import { Redis } from "ioredis"
import { type Bucket, correct, take } from "../domain/tokenBucket.ts"

export const GCRA_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local state = tonumber(redis.call('GET', KEYS[1]) or '0')
local tat = math.max(state, now)
local newTat = tat + interval
local allowAt = newTat - burst * interval
if now < allowAt then
  return {0, allowAt - now, tat - now}
end
redis.call('SET', KEYS[1], string.format('%.0f', newTat), 'PX', math.ceil((newTat - now) / 1000) + 1000)
return {1, math.floor((now - allowAt) / interval), newTat - now}
`

/** What the script decided, in µs (spec/rateLimit.ts `GcraDecision` without the state, which stays in Redis). */
export type SharedGcraDecision =
  | { readonly _tag: "Allowed"; readonly remaining: number; readonly resetMicros: number }
  | { readonly _tag: "Limited"; readonly retryAfterMicros: number; readonly resetMicros: number }

/**
 * The limits that protect the upstream (issue 41 item 3), all of a call's scopes in ONE script, all or
 * none: each tokens-per-minute scope's bucket (src/domain/tokenBucket.ts `take`, in ms on Redis's
 * clock; a hash {l: level in units, a: refilled at}) and each max_concurrent scope's leases (a sorted
 * set of call ids scored by their expiry; expired ones dropped first, so a dead instance's calls give
 * their slots back once their lease runs out). KEYS: the buckets, then the lease sets. ARGV: the
 * counts, (unused), the call's id, the lease's length (ms), each bucket's limit and what the call
 * takes from it (its tokens; 1 from a route's requests bucket), each set's limit.
 * Answers {1, tightest bucket, its tokens left, ms until it is full} or {0, refusing scope (1-based),
 * tokens left, ms until full, ms until the estimate fits (-1: never, over the whole limit)}.
 */
export const LIMITS_TAKE_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nT = tonumber(ARGV[1])
local nC = tonumber(ARGV[2])
local levels = {}
for i = 1, nT do
  local tpm = tonumber(ARGV[4 + 2 * i])
  local tokens = tonumber(ARGV[5 + 2 * i])
  local full = tpm * 60000
  local s = redis.call('HMGET', KEYS[i], 'l', 'a')
  local level = full
  if s[1] then
    level = math.min(full, tonumber(s[1]) + math.max(0, now - tonumber(s[2])) * tpm)
  end
  local need = tokens * 60000
  if need > level then
    local retry = -1
    if tokens <= tpm then retry = math.ceil((need - level) / tpm) end
    return {0, i, math.floor(level / 60000), math.ceil((full - level) / tpm), retry}
  end
  levels[i] = level - need
end
for j = 1, nC do
  local key = KEYS[nT + j]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZSCORE', key, ARGV[4]) == false and redis.call('ZCARD', key) >= tonumber(ARGV[5 + 2 * nT + j]) then
    return {0, nT + j, 0, 0, 1000}
  end
end
local tightest, left, reset = 0, -1, 0
for i = 1, nT do
  local tpm = tonumber(ARGV[4 + 2 * i])
  local untilFull = math.ceil((tpm * 60000 - levels[i]) / tpm)
  redis.call('HSET', KEYS[i], 'l', string.format('%.0f', levels[i]), 'a', string.format('%.0f', now))
  redis.call('PEXPIRE', KEYS[i], untilFull + 1000)
  local tokensLeft = math.floor(levels[i] / 60000)
  if left < 0 or tokensLeft < left then tightest, left, reset = i, tokensLeft, untilFull end
end
for j = 1, nC do
  redis.call('ZADD', KEYS[nT + j], now + tonumber(ARGV[5]), ARGV[4])
  redis.call('PEXPIRE', KEYS[nT + j], tonumber(ARGV[5]) * 2)
end
return {1, tightest, left, reset}
`

/**
 * A call's end: each bucket corrected by its delta in tokens (the estimate less the real count: given
 * back up to full, or taken down to empty — tokenBucket.ts `correct`), and its leases dropped. KEYS
 * as LIMITS_TAKE_LUA's; ARGV: the counts, (unused), the call's id, each bucket's limit and delta.
 */
export const LIMITS_END_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nT = tonumber(ARGV[1])
local nC = tonumber(ARGV[2])
for i = 1, nT do
  local tpm = tonumber(ARGV[3 + 2 * i])
  local delta = tonumber(ARGV[4 + 2 * i]) * 60000
  local full = tpm * 60000
  local s = redis.call('HMGET', KEYS[i], 'l', 'a')
  if s[1] and delta ~= 0 then
    local level = math.min(full, tonumber(s[1]) + math.max(0, now - tonumber(s[2])) * tpm)
    level = math.min(full, math.max(0, level + delta))
    redis.call('HSET', KEYS[i], 'l', string.format('%.0f', level), 'a', string.format('%.0f', now))
    redis.call('PEXPIRE', KEYS[i], math.ceil((full - level) / tpm) + 1000)
  end
end
for j = 1, nC do redis.call('ZREM', KEYS[nT + j], ARGV[4]) end
return 1
`

/** The leases of the calls an instance still runs, pushed ahead by ARGV[1] ms: KEYS[i] holds ARGV[1 + i]. */
export const LEASES_RENEW_LUA = `
local t = redis.call('TIME')
local until_ = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', until_, ARGV[1 + i])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[1]) * 2)
end
return 1
`

/** What LIMITS_TAKE_LUA decided. */
export type SharedLimitsDecision =
  | { readonly _tag: "Taken"; readonly tightest: number; readonly remaining: number; readonly resetMs: number }
  | { readonly _tag: "Limited"; readonly scope: number; readonly remaining: number; readonly resetMs: number; readonly retryAfterMs: number }

/** A call's shared limits as the scripts read them: its buckets' and its lease sets' names and limits. */
export interface SharedLimitsCall {
  /** `amount`: what the call takes (its tokens, or 1 from a requests bucket); `corrected`: whether its end corrects it. */
  readonly buckets: ReadonlyArray<{ readonly id: string; readonly tpm: number; readonly amount: number; readonly corrected: boolean }>
  readonly slots: ReadonlyArray<{ readonly id: string; readonly max: number }>
  readonly callId: string
}

export interface RedisGcra {
  /** One admission for `projectId`; rejects when Redis cannot answer (the caller falls back). */
  readonly admit: (projectId: string, intervalMicros: number, burst: number) => Promise<SharedGcraDecision>
  /** Take a call's tokens and slots, all or none (LIMITS_TAKE_LUA). */
  readonly takeLimits: (call: SharedLimitsCall, leaseMs: number) => Promise<SharedLimitsDecision>
  /** Correct a call's token buckets by `delta` tokens and drop its leases (LIMITS_END_LUA). */
  readonly endLimits: (call: SharedLimitsCall, delta: number) => Promise<void>
  /** Push the leases of the calls still running ahead by `leaseMs`. */
  readonly renewLeases: (leases: ReadonlyArray<{ readonly slot: string; readonly callId: string }>, leaseMs: number) => Promise<void>
  readonly connected: () => boolean
  /** Resolves once connected, or after `timeoutMs` (whichever first): a start waits a moment for Redis. */
  readonly ready: (timeoutMs: number) => Promise<void>
  readonly close: () => Promise<void>
}

/**
 * A client that fails fast when Redis is away (no offline queue, a short command timeout, no
 * retried commands) and keeps reconnecting in the background, so the limiter's fallback takes over
 * at once and hands back as soon as Redis answers again.
 */
export const connectRedisGcra = (url: string, keyPrefix = "tollgate:rl:"): RedisGcra => {
  const redis = new Redis(url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: 250,
    connectTimeout: 1000,
    retryStrategy: (times) => Math.min(50 * times, 1000),
    lazyConnect: false
  })
  // Errors surface on the commands; the connection's own are expected while Redis is away.
  redis.on("error", () => undefined)
  redis.defineCommand("tollgateGcra", { numberOfKeys: 1, lua: GCRA_LUA })
  redis.defineCommand("tollgateLimitsTake", { lua: LIMITS_TAKE_LUA })
  redis.defineCommand("tollgateLimitsEnd", { lua: LIMITS_END_LUA })
  redis.defineCommand("tollgateLeasesRenew", { lua: LEASES_RENEW_LUA })
  const commands = redis as unknown as {
    tollgateGcra: (key: string, interval: number, burst: number) => Promise<[number, number, number]>
    tollgateLimitsTake: (...args: Array<string | number>) => Promise<Array<number>>
    tollgateLimitsEnd: (...args: Array<string | number>) => Promise<number>
    tollgateLeasesRenew: (...args: Array<string | number>) => Promise<number>
  }
  const run = commands.tollgateGcra.bind(redis)
  const keysOf = (c: SharedLimitsCall) => [...c.buckets.map((b) => `${keyPrefix}tb:${b.id}`), ...c.slots.map((s) => `${keyPrefix}cc:${s.id}`)]
  return {
    takeLimits: async (c, leaseMs) => {
      const keys = keysOf(c)
      const r = await commands.tollgateLimitsTake.call(redis, keys.length, ...keys, c.buckets.length, c.slots.length, 0, c.callId, leaseMs, ...c.buckets.flatMap((b) => [b.tpm, b.amount]), ...c.slots.map((s) => s.max))
      return r[0] === 1
        ? { _tag: "Taken", tightest: r[1]! - 1, remaining: r[2]!, resetMs: r[3]! }
        : { _tag: "Limited", scope: r[1]! - 1, remaining: r[2]!, resetMs: r[3]!, retryAfterMs: r[4]! < 0 ? Number.POSITIVE_INFINITY : r[4]! }
    },
    endLimits: async (c, delta) => {
      const keys = keysOf(c)
      await commands.tollgateLimitsEnd.call(redis, keys.length, ...keys, c.buckets.length, c.slots.length, 0, c.callId, ...c.buckets.flatMap((b) => [b.tpm, b.corrected ? delta : 0]))
    },
    renewLeases: async (leases, leaseMs) => {
      if (leases.length === 0) return
      await commands.tollgateLeasesRenew.call(redis, leases.length, ...leases.map((l) => `${keyPrefix}cc:${l.slot}`), leaseMs, ...leases.map((l) => l.callId))
    },
    admit: async (projectId, intervalMicros, burst) => {
      const [allowed, a, b] = await run(keyPrefix + projectId, intervalMicros, burst)
      return allowed === 1 ? { _tag: "Allowed", remaining: a, resetMicros: b } : { _tag: "Limited", retryAfterMicros: a, resetMicros: b }
    },
    connected: () => redis.status === "ready",
    ready: (timeoutMs) =>
      redis.status === "ready"
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            const timer = setTimeout(done, timeoutMs)
            function done() {
              clearTimeout(timer)
              redis.off("ready", done)
              resolve()
            }
            redis.once("ready", done)
          }),
    close: async () => {
      redis.disconnect()
    }
  }
}

/**
 * The same GCRA as ONE statement on PostgreSQL (no REDIS_URL): an upsert of the project's TAT whose
 * DO UPDATE is guarded by the admission rule, on the database's clock (`statement_timestamp()`).
 * Admitted: the row comes back. Refused: nothing changed, and one read tells when to retry.
 */
export const pgGcra = Effect.map(SqlClient.SqlClient, (sql) => (projectId: string, interval: number, burst: number): Effect.Effect<SharedGcraDecision, unknown> =>
  Effect.gen(function* () {
    const nowUs = sql.literal("(extract(epoch FROM statement_timestamp()) * 1000000)::bigint")
    const [admitted] = yield* sql<{ tat: number; now: number }>`
      INSERT INTO rate_limits AS r (project_id, tat) VALUES (${projectId}, ${nowUs} + ${interval}::bigint)
      ON CONFLICT (project_id) DO UPDATE SET tat = GREATEST(r.tat, ${nowUs}) + ${interval}::bigint
        WHERE GREATEST(r.tat, ${nowUs}) + ${interval}::bigint - ${burst * interval}::bigint <= ${nowUs}
      RETURNING tat, ${nowUs} AS now`
    if (admitted !== undefined) {
      const allowAt = admitted.tat - burst * interval
      return { _tag: "Allowed", remaining: Math.floor((admitted.now - allowAt) / interval), resetMicros: admitted.tat - admitted.now } as const
    }
    const [row] = yield* sql<{ tat: number; now: number }>`SELECT tat, ${nowUs} AS now FROM rate_limits WHERE project_id = ${projectId}`
    const tat = Math.max(row!.tat, row!.now)
    return { _tag: "Limited", retryAfterMicros: Math.max(0, tat + interval - burst * interval - row!.now), resetMicros: tat - row!.now } as const
  })
)

/**
 * The upstream limits shared through PostgreSQL (no REDIS_URL; migration 0015's `token_buckets` and
 * `concurrency_leases`): what LIMITS_TAKE_LUA, LIMITS_END_LUA and LEASES_RENEW_LUA do, as one
 * transaction each on the database's clock. The call's scopes are locked first, in one order
 * (transaction advisory locks on their names, sorted), so two calls sharing scopes never deadlock
 * and a scope with no row yet is locked all the same; the bucket rule is tokenBucket.ts's.
 */
export const pgLimits = Effect.map(Effect.runtime<SqlClient.SqlClient>(), (runtime) => {
  const run = Runtime.runPromise(runtime)
  const locked = <A>(scopes: ReadonlyArray<string>, body: (sql: SqlClient.SqlClient, now: number) => Effect.Effect<A, unknown, never>) =>
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql.withTransaction(
        Effect.gen(function* () {
          for (const s of [...new Set(scopes)].sort()) yield* sql`SELECT pg_advisory_xact_lock(hashtext(${s}))`
          const [{ now }] = (yield* sql<{ now: number }>`SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now`) as [{ now: number }]
          return yield* body(sql, Number(now))
        })
      )
    )
  const bucketsOf = (sql: SqlClient.SqlClient, ids: ReadonlyArray<string>) =>
    ids.length === 0
      ? Effect.succeed(new Map<string, Bucket>())
      : Effect.map(
          sql<{ scope: string; level: number; at_us: number }>`SELECT scope, level, at_us FROM token_buckets WHERE ${sql.in("scope", ids)}`,
          (rows) => new Map(rows.map((r) => [r.scope, { level: Number(r.level), at: Math.floor(Number(r.at_us) / 1000) }]))
        )
  const save = (sql: SqlClient.SqlClient, id: string, b: Bucket) =>
    sql`INSERT INTO token_buckets (scope, level, at_us) VALUES (${id}, ${b.level}, ${b.at * 1000})
        ON CONFLICT (scope) DO UPDATE SET level = excluded.level, at_us = excluded.at_us`
  const scopesOf = (c: SharedLimitsCall) => [...c.buckets.map((b) => `tb:${b.id}`), ...c.slots.map((s) => `cc:${s.id}`)]

  const takeLimits = (c: SharedLimitsCall, leaseMs: number): Promise<SharedLimitsDecision> =>
    run(
      locked(scopesOf(c), (sql, now) =>
        Effect.gen(function* () {
          const stored = yield* bucketsOf(sql, c.buckets.map((b) => b.id))
          const next: Array<Bucket> = []
          let tightest = 0
          let left = -1
          let reset = 0
          for (const [i, b] of c.buckets.entries()) {
            const d = take(stored.get(b.id), b.tpm, b.amount, now)
            if (d._tag === "Limited") return { _tag: "Limited", scope: i, remaining: d.remaining, resetMs: d.resetMs, retryAfterMs: d.retryAfterMs } as const
            next.push(d.bucket)
            if (left < 0 || d.remaining < left) [tightest, left, reset] = [i, d.remaining, d.resetMs]
          }
          for (const [j, s] of c.slots.entries()) {
            yield* sql`DELETE FROM concurrency_leases WHERE scope = ${s.id} AND expires_us <= ${now * 1000}`
            const [held] = yield* sql<{ n: number; mine: number }>`
              SELECT COUNT(*) AS n, COUNT(*) FILTER (WHERE call_id = ${c.callId}) AS mine FROM concurrency_leases WHERE scope = ${s.id}`
            if (Number(held!.mine) === 0 && Number(held!.n) >= s.max) {
              return { _tag: "Limited", scope: c.buckets.length + j, remaining: 0, resetMs: 0, retryAfterMs: 1000 } as const
            }
          }
          for (const [i, b] of c.buckets.entries()) yield* save(sql, b.id, next[i]!)
          for (const s of c.slots) {
            yield* sql`INSERT INTO concurrency_leases (scope, call_id, expires_us) VALUES (${s.id}, ${c.callId}, ${(now + leaseMs) * 1000})
                       ON CONFLICT (scope, call_id) DO UPDATE SET expires_us = excluded.expires_us`
          }
          return { _tag: "Taken", tightest, remaining: Math.max(0, left), resetMs: reset } as const
        })
      )
    )

  const endLimits = (c: SharedLimitsCall, delta: number): Promise<void> =>
    run(
      locked(scopesOf(c), (sql, now) =>
        Effect.gen(function* () {
          const stored = yield* bucketsOf(sql, c.buckets.filter((b) => b.corrected && delta !== 0).map((b) => b.id))
          for (const b of c.buckets) {
            const was = stored.get(b.id)
            if (was !== undefined) yield* save(sql, b.id, correct(was, b.tpm, delta, 0, now))
          }
          for (const s of c.slots) yield* sql`DELETE FROM concurrency_leases WHERE scope = ${s.id} AND call_id = ${c.callId}`
        })
      )
    )

  const renewLeases = (leases: ReadonlyArray<{ readonly slot: string; readonly callId: string }>, leaseMs: number): Promise<void> =>
    leases.length === 0
      ? Promise.resolve()
      : run(
          Effect.flatMap(SqlClient.SqlClient, (sql) =>
            Effect.forEach(
              leases,
              (l) => sql`UPDATE concurrency_leases SET expires_us = (extract(epoch FROM clock_timestamp()) * 1000)::bigint * 1000 + ${leaseMs * 1000}
                         WHERE scope = ${l.slot} AND call_id = ${l.callId}`,
              { discard: true }
            )
          )
        )
  return { takeLimits, endLimits, renewLeases }
})
