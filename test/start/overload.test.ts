/**
 * Issue 40, item 3 (DESIGN §12; docs/decisions/0046): on PostgreSQL a reservation's waits are bounded —
 * for its lane's turn (TOLLGATE_PG_MAX_WAIT_MS), for a place in its lane's queue
 * (TOLLGATE_PG_MAX_QUEUED), for a hot row's lock (TOLLGATE_PG_LOCK_TIMEOUT_MS). Past a bound the call
 * answers 503 `server_overloaded` (type `server_error`) with Retry-After, refused before any money
 * moved: no hold, no claim, no request row. Each case runs a real gateway on its own schema of the test
 * database, a real mock upstream, the official `openai` client (no retries of its own), and makes the
 * shedding deterministic by holding the project's budget row locked from the test's own connection
 * (the lane's statement then waits on it; the callers queue behind it) — no timed assertion: a wait the
 * test makes only needs to be longer than the bound it passes.
 *
 * Afterwards, on the database: no hold held, no claim in flight, reserved = 0, Σ receipts = spent, one
 * receipt per call answered 200, and every shed call's retry with its idempotency key answered 200 (a
 * claim left behind would make it wait and then 409). `tollgate audit` finds nothing.
 */
import { randomBytes } from "node:crypto"
import OpenAI from "openai"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { auditStore } from "../../src/store/auditReader.ts"
import type { GatewaySettings } from "../../src/domain/config.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { freshSchema, onEngines, pgQuerySync } from "../support/pg.ts"

interface Answer {
  readonly key: string
  readonly status: number
  readonly code: string | null | undefined
  readonly type: string | undefined
  readonly retryAfter: string | null | undefined
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const counts = (answers: ReadonlyArray<Answer>) => {
  const out: Record<string, number> = {}
  for (const a of answers) out[a.status === 200 ? "200" : `${a.status} ${a.code}`] = (out[`${a.status === 200 ? "200" : `${a.status} ${a.code}`}`] ?? 0) + 1
  return out
}

describe.runIf(onEngines("test/start/overload.test.ts (bounded waits on PostgreSQL)"))("a reservation's waits on PostgreSQL are bounded: 503 server_overloaded, nothing held", () => {
  let mock: MockUpstream
  const opened: Array<{ gateway: TestGateway; drop: () => void }> = []

  beforeAll(async () => {
    mock = await startMockUpstream()
    mock.setBehavior({ delayMs: 5 })
  })
  afterAll(async () => {
    for (const { gateway, drop } of opened) {
      await gateway.close()
      drop()
    }
    await mock.close()
  })

  const start = async (bounds: Partial<GatewaySettings>) => {
    const schema = freshSchema()
    const gateway = await startGateway(mockGatewayFile(mock.url), { databaseUrl: schema.url, pgPoolSize: 6, inflightWaitMs: 500, ...bounds })
    opened.push({ gateway, drop: schema.drop })
    const client = new OpenAI({ apiKey: gateway.devKey, baseURL: gateway.url, maxRetries: 0 })
    const call = async (key: string): Promise<Answer> => {
      try {
        await client.chat.completions.create(
          { model: "auto", max_tokens: 16, messages: [{ role: "user", content: `overload ${key}` }] },
          { headers: { "idempotency-key": key } }
        )
        return { key, status: 200, code: null, type: undefined, retryAfter: undefined }
      } catch (e) {
        if (!(e instanceof OpenAI.APIError)) throw e
        return { key, status: e.status ?? 0, code: e.code, type: e.type, retryAfter: e.headers instanceof Headers ? e.headers.get("retry-after") : (e.headers as Record<string, string> | undefined)?.["retry-after"] }
      }
    }
    return { gateway, url: schema.url, call }
  }

  /** The project's budget row locked by a transaction of the test's own, until `release`. */
  const lockWindow = async (url: string, projectId: string) => {
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    await client.query("BEGIN")
    const { rowCount } = await client.query("SELECT 1 FROM budget_windows WHERE project_id = $1 FOR UPDATE", [projectId])
    expect(rowCount).toBe(1)
    const { rows } = await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")
    const release = async () => {
      await client.query("COMMIT")
      await client.end()
    }
    return { release, pid: rows[0]!.pid }
  }

  /** Until a reservation statement waits for the test's lock (the lane is then busy on it). */
  const reservationWaitsOnLock = async (url: string, lockPid: number) => {
    for (;;) {
      const [row] = pgQuerySync<{ n: number }>(
        url,
        "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE query LIKE '%tollgate_reserve_bounded%' AND ? = ANY(pg_blocking_pids(pid))",
        [lockPid]
      )
      if (Number(row!.n) > 0) return
      await sleep(20)
    }
  }

  /** Once every call was answered: no hold held, no claim in flight, nothing reserved. */
  const nothingHeld = (gateway: TestGateway, url: string) => {
    const [w] = pgQuerySync<{ reserved: number }>(url, "SELECT reserved FROM budget_windows WHERE project_id = ?", [gateway.projectId])
    const [h] = pgQuerySync<{ n: number }>(url, "SELECT COUNT(*) AS n FROM reservations WHERE state = 'held'")
    const [c] = pgQuerySync<{ n: number }>(url, "SELECT COUNT(*) AS n FROM idempotency WHERE state = 'in_flight'")
    expect({ reserved: Number(w!.reserved), held: Number(h!.n), claimsInFlight: Number(c!.n) }).toEqual({ reserved: 0, held: 0, claimsInFlight: 0 })
  }

  /** What the database says once every call ended: nothing held, conserved, one receipt per 200. */
  const ledgerAfter = (gateway: TestGateway, url: string, answered200: number) => {
    const [w] = pgQuerySync<{ spent: number; reserved: number }>(url, "SELECT spent, reserved FROM budget_windows WHERE project_id = ?", [gateway.projectId])
    const [r] = pgQuerySync<{ n: number; sum: number }>(url, "SELECT COUNT(*) AS n, COALESCE(SUM(credits_charged), 0) AS sum FROM receipts WHERE project_id = ?", [gateway.projectId])
    const [h] = pgQuerySync<{ n: number }>(url, "SELECT COUNT(*) AS n FROM reservations WHERE state = 'held'")
    const [c] = pgQuerySync<{ n: number }>(url, "SELECT COUNT(*) AS n FROM idempotency WHERE state = 'in_flight'")
    const facts = { reserved: Number(w!.reserved), held: Number(h!.n), claimsInFlight: Number(c!.n), receipts: Number(r!.n), receiptSum: Number(r!.sum), spent: Number(w!.spent) }
    console.log(`overload: the ledger afterwards: ${JSON.stringify(facts)}`)
    expect(facts).toEqual({ reserved: 0, held: 0, claimsInFlight: 0, receipts: answered200, receiptSum: facts.spent, spent: facts.spent })
  }

  /** The shed counters on /metrics (process-wide: the test reads their growth). */
  const shedCounts = async (gateway: TestGateway) => {
    const text = await (await fetch(`${gateway.origin}/metrics`, { headers: { authorization: `Bearer ${gateway.adminToken}` } })).text()
    const value = (bound: string) => Number(new RegExp(`^tollgate_store_shed_total\\{bound="${bound}"\\} (\\d+)$`, "m").exec(text)?.[1] ?? NaN)
    return { queued: value("queued"), waited: value("waited"), lock: value("lock") }
  }

  const expectShed = (answers: ReadonlyArray<Answer>) => {
    for (const a of answers) {
      expect({ status: a.status, code: a.code, type: a.type }, a.key).toEqual({ status: 503, code: "server_overloaded", type: "server_error" })
      expect(Number(a.retryAfter), a.key).toBeGreaterThanOrEqual(1)
    }
  }

  it("a lane: past TOLLGATE_PG_MAX_QUEUED a call is refused at once; one that waited for its turn past TOLLGATE_PG_MAX_WAIT_MS is refused unsent; their retries run; nothing held", async () => {
    const { gateway, url, call } = await start({ pgMaxWaitMs: 100, pgLockTimeoutMs: 60_000, pgMaxQueued: 4 })
    const tag = randomBytes(4).toString("hex")
    expect((await call(`warm-${tag}`)).status).toBe(200) // the window's row exists from here
    const before = await shedCounts(gateway)
    const { release, pid } = await lockWindow(url, gateway.projectId)
    const first = call(`first-${tag}`)
    await reservationWaitsOnLock(url, pid)
    // 20 callers behind it: 4 queue on the lane, the other 16 are refused at once.
    const keys = Array.from({ length: 20 }, (_, i) => `queued-${tag}-${i}`)
    let answeredSoFar = 0
    const pending = keys.map((k) => call(k).finally(() => answeredSoFar++))
    while (answeredSoFar < 16) await sleep(10)
    // The 4 queued joined the queue before it was full; each has now waited longer than the 100 ms bound.
    await sleep(300)
    await release()
    const firstAnswer = await first
    const answers = await Promise.all(pending)
    console.log(`overload (lane): the blocked call ${firstAnswer.status}; the 20 behind it: ${JSON.stringify(counts(answers))}`)
    expect(firstAnswer.status).toBe(200)
    expectShed(answers)
    nothingHeld(gateway, url)
    const after = await shedCounts(gateway)
    expect({ queued: after.queued - before.queued, waited: after.waited - before.waited, lock: after.lock - before.lock }).toEqual({ queued: 16, waited: 4, lock: 0 })
    // One at a time: a retry never meets the bound it was refused by.
    const again: Array<Answer> = []
    for (const a of answers) again.push(await call(a.key))
    console.log(`overload (lane): their 20 retries with the same keys: ${JSON.stringify(counts(again))}`)
    expect(again.map((a) => a.status)).toEqual(again.map(() => 200))
    ledgerAfter(gateway, url, 22)
    expect((await auditStore({ database: url, jobs: 0 })).findings).toEqual([])
  })

  it("a hot row: a reservation that waits for a locked budget row past TOLLGATE_PG_LOCK_TIMEOUT_MS is rolled back whole and refused; retries run; nothing held", async () => {
    const { gateway, url, call } = await start({ pgMaxWaitMs: 60_000, pgLockTimeoutMs: 200, pgMaxQueued: 10_000 })
    const tag = randomBytes(4).toString("hex")
    expect((await call(`warm-${tag}`)).status).toBe(200)
    const before = await shedCounts(gateway)
    const { release } = await lockWindow(url, gateway.projectId)
    // Held until every call was answered: each batch waits 200 ms on the row, then is refused whole.
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => call(`hot-${tag}-${i}`)))
    await release()
    console.log(`overload (hot row): 12 calls on a row locked elsewhere: ${JSON.stringify(counts(answers))}`)
    expectShed(answers)
    nothingHeld(gateway, url)
    expect((await shedCounts(gateway)).lock - before.lock).toBe(12)
    const again: Array<Answer> = []
    for (const a of answers) again.push(await call(a.key))
    expect(again.map((a) => a.status)).toEqual(again.map(() => 200))
    ledgerAfter(gateway, url, 13)
    expect((await auditStore({ database: url, jobs: 0 })).findings).toEqual([])
  })

  it("200 concurrent callers against a lane bound of 2: every answer is 200 or a clean 503, and the ledger is conserved", async () => {
    const { gateway, url, call } = await start({ pgMaxWaitMs: 1000, pgLockTimeoutMs: 1000, pgMaxQueued: 2 })
    // The project's rate limit out of the way: every caller reaches the store.
    const patched = await gateway.admin("PATCH", `/admin/v1/projects/${gateway.projectId}`, { rate_limit: { requests_per_minute: 1_000_000, burst: 1_000 } })
    expect(patched.status, JSON.stringify(patched.body)).toBe(200)
    const tag = randomBytes(4).toString("hex")
    const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => call(`burst-${tag}-${i}`)))
    console.log(`overload (burst): 200 concurrent callers, lane bound 2: ${JSON.stringify(counts(answers))}`)
    const shed = answers.filter((a) => a.status !== 200)
    expectShed(shed)
    ledgerAfter(gateway, url, answers.length - shed.length)
    expect((await auditStore({ database: url, jobs: 0 })).findings).toEqual([])
  })
})
