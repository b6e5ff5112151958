/**
 * Issue 38, finding 1: PostgreSQL refusing or dropping the gateway's connections. With the database
 * limiting the gateway's role to fewer connections than its pool (a role with a low CONNECTION LIMIT),
 * 40 concurrent calls answered 500 "Failed to acquire connection", left holds `held` and keys
 * `in_flight` until the 15-minute TTL, and the retry the message asked for got 409 after 60 s. Now a
 * call that fails for the store's sake answers 503 with Retry-After and holds nothing; its retry runs;
 * /readyz reports the store's trouble; start-up names the connection problem and the setting.
 *
 * Each case makes its own role and schema in the test database (PostgreSQL on loopback) and drops
 * them after.
 */
import { execFileSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { auditStore } from "../../src/store/auditReader.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { startMockUpstream, type MockUpstream } from "../support/mockUpstream.ts"
import { onEngines, pgQuerySync, TEST_PG_URL, withSchema } from "../support/pg.ts"

const psql = (sql: string): string =>
  execFileSync("psql", [TEST_PG_URL, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })

/** A login role limited to `limit` connections, owning a fresh schema; its DATABASE_URL. */
const limitedRole = (limit: number) => {
  const name = `tg_lim_${randomBytes(4).toString("hex")}`
  psql(`CREATE ROLE ${name} LOGIN CONNECTION LIMIT ${limit}; CREATE SCHEMA ${name} AUTHORIZATION ${name}`)
  const url = new URL(TEST_PG_URL)
  url.username = name
  return {
    name,
    url: withSchema(url.toString(), name),
    /** The schema read by the test's own (unlimited) role, for assertions and the audit. */
    readerUrl: withSchema(TEST_PG_URL, name),
    terminate: () => Number(psql(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '${name}'`).trim()),
    limit: (n: number) => psql(`ALTER ROLE ${name} CONNECTION LIMIT ${n}`),
    drop: () => {
      psql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '${name}'`)
      psql(`DROP SCHEMA IF EXISTS ${name} CASCADE; DROP ROLE IF EXISTS ${name}`)
    }
  }
}

const statusCounts = (statuses: ReadonlyArray<number>) => {
  const counts: Record<string, number> = {}
  for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1
  return counts
}

interface Outcome {
  readonly status: number
  readonly retryAfter: string | null
  readonly code: string | undefined
}

const call = async (gateway: TestGateway, key: string, content: string): Promise<Outcome> => {
  const res = await fetch(`${gateway.url}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gateway.devKey}`, "content-type": "application/json", "idempotency-key": key },
    body: JSON.stringify({ model: "auto", max_tokens: 16, messages: [{ role: "user", content }] })
  })
  const body = (await res.json()) as { error?: { code?: string } }
  return { status: res.status, retryAfter: res.headers.get("retry-after"), code: body.error?.code }
}

const stranded = (url: string) => ({
  held: Number(pgQuerySync<{ n: number }>(url, "SELECT COUNT(*) AS n FROM reservations WHERE state = 'held'", [])[0]!.n),
  inFlight: Number(pgQuerySync<{ n: number }>(url, "SELECT COUNT(*) AS n FROM idempotency WHERE state = 'in_flight'", [])[0]!.n)
})

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe.runIf(onEngines("test/hostile/storeFaults.test.ts (PostgreSQL refusing connections)"))("PostgreSQL refusing or dropping the gateway's connections", () => {
  let mock: MockUpstream
  const cleanups: Array<() => unknown> = []
  beforeAll(async () => {
    mock = await startMockUpstream()
    mock.setBehavior({ delayMs: 20 })
  })
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c()
  })
  afterAll(async () => {
    await mock.close()
  })

  /**
   * 40 concurrent calls, each with its own idempotency key, while `during` runs; then the promise:
   * every answer 200 or 503 store_unavailable with Retry-After, nothing held 3 s later, every 503's
   * retry with its key answered 200, and `tollgate audit` clean.
   */
  const burst = async (gateway: TestGateway, role: ReturnType<typeof limitedRole>, label: string, during: () => Promise<void> = async () => {}) => {
    const keys = Array.from({ length: 40 }, (_, i) => `${label}-${i}-${randomBytes(4).toString("hex")}`)
    const t0 = performance.now()
    const first = await Promise.all([...keys.map((k, i) => call(gateway, k, `${label} ${i}`)), during()])
    const answers = first.slice(0, keys.length) as Array<Outcome>
    console.log(`finding 1 (${label}): 40 concurrent calls: ${JSON.stringify(statusCounts(answers.map((o) => o.status)))} in ${(performance.now() - t0).toFixed(0)} ms`)
    // A 503 is one of the store's two clean refusals, both with Retry-After: the database unreachable
    // (store_unavailable), or a wait past the lane's bound while connections are re-made
    // (server_overloaded, docs/decisions/0046) — seen once in a full suite on a loaded 2-core host.
    const clean503 = (o: Outcome) => o.status === 503 && (o.code === "store_unavailable" || o.code === "server_overloaded") && o.retryAfter !== null
    for (const o of answers) expect(o.status === 200 || clean503(o), JSON.stringify(o)).toBe(true)
    await sleep(3000)
    const left = stranded(role.readerUrl)
    console.log(`finding 1 (${label}): 3 s later: ${left.held} holds held, ${left.inFlight} keys in flight`)
    expect(left).toEqual({ held: 0, inFlight: 0 })
    const r0 = performance.now()
    const again = await Promise.all(answers.flatMap((o, i) => (o.status === 503 ? [call(gateway, keys[i]!, `${label} ${i}`)] : [])))
    console.log(`finding 1 (${label}): ${again.length} retries with the same keys: ${JSON.stringify(statusCounts(again.map((o) => o.status)))} in ${(performance.now() - r0).toFixed(0)} ms`)
    expect(again.map((o) => o.status).filter((s) => s !== 200)).toEqual([])
    const audit = await auditStore({ database: role.readerUrl, jobs: 0 })
    expect(audit.findings).toEqual([])
  }

  it("a role limited below the pool (CONNECTION LIMIT 4, pool 12): every call answers 200 or 503 with Retry-After, nothing stays held after 3 s, each retry runs, the audit is clean", async () => {
    const role = limitedRole(4)
    cleanups.push(role.drop)
    const gateway = await startGateway(mockGatewayFile(mock.url), { databaseUrl: role.url, pgPoolSize: 12 })
    cleanups.push(gateway.close)
    await burst(gateway, role, "limit-4")
  }, 120_000)

  it("connections dropped during a burst (pg_terminate_backend every 100 ms): every answer 200 or 503, nothing held after 3 s, each retry runs, the audit is clean", async () => {
    const role = limitedRole(-1)
    cleanups.push(role.drop)
    const gateway = await startGateway(mockGatewayFile(mock.url), { databaseUrl: role.url, pgPoolSize: 12, pgAcquireTimeoutMs: 1000 })
    cleanups.push(gateway.close)
    let terminated = 0
    await burst(gateway, role, "terminated", async () => {
      for (const t0 = performance.now(); performance.now() - t0 < 1500; await sleep(100)) terminated += role.terminate()
    })
    console.log(`finding 1 (terminated): ${terminated} backends terminated during the burst`)
    expect(terminated).toBeGreaterThan(0)
  }, 120_000)

  it("the database refusing every connection: calls answer 503 store_unavailable with Retry-After at once after the bound, /readyz 503 naming the store; served again once it accepts", async () => {
    const role = limitedRole(-1)
    cleanups.push(role.drop)
    const gateway = await startGateway(mockGatewayFile(mock.url), { databaseUrl: role.url, pgPoolSize: 4, pgAcquireTimeoutMs: 500 })
    cleanups.push(gateway.close)
    expect((await call(gateway, `ok-${randomBytes(4).toString("hex")}`, "before")).status).toBe(200)
    role.limit(0)
    role.terminate()
    const t0 = performance.now()
    const refused = await Promise.all(Array.from({ length: 8 }, (_, i) => call(gateway, `down-${i}-${randomBytes(4).toString("hex")}`, `down ${i}`)))
    const refusedMs = performance.now() - t0
    console.log(`finding 1: the database refusing every connection: ${JSON.stringify(statusCounts(refused.map((o) => o.status)))} in ${refusedMs.toFixed(0)} ms`)
    for (const o of refused) expect([o.status, o.code, o.retryAfter]).toEqual([503, "store_unavailable", "1"])
    const ready = await fetch(`${gateway.origin}/readyz`)
    const readyBody = (await ready.json()) as { status: string; reason?: string }
    expect([ready.status, readyBody.status]).toEqual([503, "unavailable"])
    expect(readyBody.reason).toMatch(/PostgreSQL/)
    role.limit(-1)
    expect((await call(gateway, `back-${randomBytes(4).toString("hex")}`, "after")).status).toBe(200)
    const readyAgain = (await (await fetch(`${gateway.origin}/readyz`)).json()) as { status: string }
    expect(readyAgain.status).toBe("ready")
    expect(stranded(role.readerUrl)).toEqual({ held: 0, inFlight: 0 })
  }, 120_000)

  it("a limit the running pool exceeds: refused connections lower the pool's ceiling, calls wait for the connections it has, /readyz says degraded", async () => {
    const role = limitedRole(-1)
    cleanups.push(role.drop)
    const gateway = await startGateway(mockGatewayFile(mock.url), { databaseUrl: role.url, pgPoolSize: 12 })
    cleanups.push(gateway.close)
    role.limit(4)
    role.terminate()
    const keys = Array.from({ length: 40 }, (_, i) => `shrink-${i}-${randomBytes(4).toString("hex")}`)
    const first = await Promise.all(keys.map((k, i) => call(gateway, k, `shrink ${i}`)))
    console.log(`finding 1: the role limited to 4 while running with a pool of 12: ${JSON.stringify(statusCounts(first.map((o) => o.status)))} ${JSON.stringify(first.filter((o) => o.status !== 200).map((o) => o.code))}`)
    // Every call waits for a connection the pool has. A statement in flight when the role's sessions were
    // terminated (the webhook worker's poll, say) must not hand its dead connection to a call (pgPool.ts, `ended`).
    expect(first.map((o) => o.status).filter((s) => s !== 200)).toEqual([])
    const ready = (await (await fetch(`${gateway.origin}/readyz`)).json()) as { status: string; store: { status: string; reason?: string } }
    expect(ready.status).toBe("ready")
    expect(ready.store.status).toBe("degraded")
    expect(stranded(role.readerUrl)).toEqual({ held: 0, inFlight: 0 })
  }, 120_000)

  it("start-up: a role allowed no connection fails with a message naming the problem and the setting; one allowed 2 starts, its pool fitted", async () => {
    const none = limitedRole(0)
    cleanups.push(none.drop)
    const failed = await startGateway(mockGatewayFile(mock.url), { databaseUrl: none.url, pgPoolSize: 12 }).then(
      (g) => g.close().then(() => "started"),
      (e: unknown) => String(e)
    )
    expect(failed).toMatch(/too many connections for role/)
    expect(failed).toMatch(/TOLLGATE_PG_POOL_SIZE/)
    expect(failed).not.toMatch(/\n\s+at /)
    const two = limitedRole(2)
    cleanups.push(two.drop)
    const gateway = await startGateway(mockGatewayFile(mock.url), { databaseUrl: two.url, pgPoolSize: 12 })
    cleanups.push(gateway.close)
    const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => call(gateway, `two-${i}-${randomBytes(4).toString("hex")}`, `two ${i}`)))
    expect(answers.map((o) => o.status).filter((s) => s !== 200)).toEqual([])
  }, 120_000)
})
