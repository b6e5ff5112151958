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
import { Effect } from "effect"
import { Redis } from "ioredis"

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

export interface RedisGcra {
  /** One admission for `projectId`; rejects when Redis cannot answer (the caller falls back). */
  readonly admit: (projectId: string, intervalMicros: number, burst: number) => Promise<SharedGcraDecision>
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
  const run = (redis as unknown as { tollgateGcra: (key: string, interval: number, burst: number) => Promise<[number, number, number]> }).tollgateGcra.bind(redis)
  return {
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
