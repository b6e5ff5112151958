/**
 * Budgets at every scope across instances (issue 41): three gateway processes (the bundle `npm start`
 * runs) on one PostgreSQL database and one Redis; 200 calls at once, through the official `openai`
 * client, spread over the three instances, 5 keys and 50 end users of one project whose budgets bite
 * at every scope (the project's, each key's, the end users' default and two overrides). Then, on the
 * database, for every scope's window: spent ≤ cap, nothing left reserved, Σ receipts charged to it =
 * its spent; every refusal a 402 naming a scope. Runs when PostgreSQL and Redis answer (always under CI=true).
 */
import { spawnSync } from "node:child_process"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import OpenAI, { APIError } from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile } from "../support/gateway.ts"
import { type Instance, startInstance } from "../support/instances.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { freshSchema, onEngines, pgQuerySync, TEST_REDIS_URL, type TestSchema } from "../support/pg.ts"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..")
const ADMIN = "scopes-race-admin-token"
const UNLIMITED = Number.MAX_SAFE_INTEGER

describe.runIf(onEngines("test/start/scopesRace.test.ts", { pg: true, redis: true }))("budgets at every scope, 200 calls over 3 instances", () => {
  mkdirSync(join(root, ".tollgate"), { recursive: true })
  const dir = mkdtempSync(join(root, ".tollgate", "scopes-"))
  let schema: TestSchema
  let mock: MockUpstream

  const nodes: Array<Instance> = []

  const admin = async (i: number, method: string, path: string, body?: unknown) => {
    const res = await fetch(`${nodes[i % 3]!.origin}${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
    const out = { status: res.status, body: (await res.json()) as any }
    expect(out.status, JSON.stringify(out.body)).toBeLessThan(300)
    return out.body
  }
  const q = <T = Record<string, unknown>>(sql: string, ...params: Array<unknown>) => pgQuerySync<T>(schema.url, sql, params)

  beforeAll(async () => {
    const build = spawnSync(process.execPath, [join(root, "scripts/build.mjs"), join(root, "src/main.ts"), join(dir, "dist")], { encoding: "utf8" })
    expect(build.status, build.stderr).toBe(0)
    schema = freshSchema()
    mock = await startMockUpstream({ behavior: { delayMs: 40 } })
    // 1 Credit per token: a call's worst case is ≈ 30 Credits, so every scope's budget bites at small numbers.
    const config = join(dir, "config.json")
    writeFileSync(config, JSON.stringify(mockGatewayFile(mock.url, undefined, { "gpt-test": { input: 1_000_000, output: 1_000_000 } })))
    const { TOLLGATE_CONFIG: _c, TOLLGATE_ADMIN_TOKEN: _a, ...rest } = process.env as Record<string, string>
    const env = {
      ...rest,
      PORT: "0",
      HOST: "127.0.0.1",
      DATABASE_URL: schema.url,
      REDIS_URL: TEST_REDIS_URL,
      TOLLGATE_CONFIG: config,
      TOLLGATE_ADMIN_TOKEN: ADMIN,
      TOLLGATE_PG_POOL_SIZE: "4",
      TOLLGATE_ACCESS_LOG: "false",
      // The race is the point: no call shed by the store's bounds (issue 40) on this shared box.
      TOLLGATE_PG_MAX_QUEUED: "1000",
      TOLLGATE_PG_MAX_WAIT_MS: "30000",
      TOLLGATE_PG_LOCK_TIMEOUT_MS: "30000"
    }
    // One first (it creates the default project), then the other two.
    nodes.push(await startInstance(dir, 0, env))
    nodes.push(...(await Promise.all([1, 2].map((i) => startInstance(dir, i, env)))))
  }, 120_000)

  afterAll(async () => {
    for (const n of nodes) if (n.child.exitCode === null && n.child.signalCode === null) n.child.kill("SIGTERM")
    await Promise.all(nodes.map((n) => (n.child.exitCode === null && n.child.signalCode === null ? new Promise((r) => n.child.once("exit", r)) : undefined)))
    await mock?.close()
    schema?.drop()
    rmSync(dir, { recursive: true, force: true })
  })

  it("every scope's spent ≤ cap, nothing held, Σ receipts = spent per scope; refusals name their scope", async () => {
    const project = await admin(0, "POST", "/admin/v1/projects", { name: "scopes-race", budget_credits: 2_400, rate_limit: { requests_per_minute: 60_000, burst: 1_000 } })
    const keyCaps = [150, 300, 600, null, 900]
    const keys: Array<{ id: string; secret: string; cap: number | null }> = []
    for (const [i, cap] of keyCaps.entries()) {
      const k = await admin(i, "POST", `/admin/v1/projects/${project.id}/keys`, { environment: "development" })
      await admin(i + 1, "PATCH", `/admin/v1/keys/${k.id}`, { budget_credits: cap })
      keys.push({ id: k.id, secret: k.secret, cap })
    }
    const defaultCap = 90
    await admin(2, "PATCH", `/admin/v1/projects/${project.id}/end_user_budget`, { end_user_budget_credits: defaultCap })
    const overrides: Record<string, number | null> = { u0: null, u1: 30, u2: 200 }
    for (const [u, cap] of Object.entries(overrides)) await admin(0, "PUT", `/admin/v1/projects/${project.id}/end_users/${u}`, { budget_credits: cap })
    const users = Array.from({ length: 50 }, (_, i) => `u${i}`)

    const calls = Array.from({ length: 200 }, (_, i) => {
      const node = nodes[i % 3]!
      const key = keys[i % 5]!
      const client = new OpenAI({ baseURL: `${node.origin}/v1`, apiKey: key.secret, maxRetries: 0 })
      // 7 is prime to 50 and to 5: every key meets many end users.
      return client.chat.completions.create({ model: "auto", max_tokens: 20, messages: [{ role: "user", content: "hello there" }], user: users[(i * 7) % 50]! })
    })
    const outcomes = await Promise.allSettled(calls)
    const refusedBy: Record<string, number> = {}
    for (const o of outcomes) {
      if (o.status === "fulfilled") continue
      const e = o.reason as APIError
      expect(e).toBeInstanceOf(APIError)
      expect([e.status, (e.error as { code?: string }).code]).toEqual([402, "budget_exceeded"])
      const param = (e.error as { param: string }).param
      expect(["project", "key", "end_user"]).toContain(param)
      refusedBy[param] = (refusedBy[param] ?? 0) + 1
    }
    const admitted = outcomes.filter((o) => o.status === "fulfilled").length

    // Every scope's window and cap, and Σ receipts charged to it (the receipts name their key and end user).
    const capOf = (scope: string): number => {
      if (scope.startsWith("project:")) return 2_400
      if (scope.startsWith("key:")) return keys.find((k) => `key:${k.id}` === scope)!.cap ?? UNLIMITED
      const user = scope.slice(`end_user:${project.id}/`.length)
      return user in overrides ? (overrides[user] ?? UNLIMITED) : defaultCap
    }
    const windows = [
      ...q<{ scope: string; spent: number; reserved: number }>("SELECT 'project:' || project_id AS scope, spent, reserved FROM budget_windows WHERE project_id = ?", project.id),
      ...q<{ scope: string; spent: number; reserved: number }>("SELECT scope, spent, reserved FROM scope_windows")
    ]
    const sums = new Map<string, number>()
    const add = (scope: string, n: number) => sums.set(scope, (sums.get(scope) ?? 0) + n)
    const receipts = q<{ body: string; credits_charged: number }>("SELECT body, credits_charged FROM receipts WHERE project_id = ?", project.id)
    for (const r of receipts) {
      const body = JSON.parse(r.body) as { key_id: string; end_user: string }
      add(`project:${project.id}`, Number(r.credits_charged))
      add(`key:${body.key_id}`, Number(r.credits_charged))
      add(`end_user:${project.id}/${body.end_user}`, Number(r.credits_charged))
    }
    expect(receipts.length).toBe(admitted)
    // A scope's window opens with its first hold (a call refused by an earlier scope never reaches it).
    for (const scope of sums.keys()) expect(windows.map((w) => w.scope)).toContain(scope)
    const report: Array<string> = []
    for (const w of windows) {
      const spent = Number(w.spent)
      expect({ scope: w.scope, reserved: Number(w.reserved) }).toEqual({ scope: w.scope, reserved: 0 })
      expect(spent, `${w.scope} over its cap`).toBeLessThanOrEqual(capOf(w.scope))
      expect({ scope: w.scope, spent }).toEqual({ scope: w.scope, spent: sums.get(w.scope) ?? 0 })
      if (!w.scope.startsWith("end_user:")) report.push(`${w.scope.split(":")[0]} ${spent}/${capOf(w.scope) === UNLIMITED ? "∞" : capOf(w.scope)}`)
    }
    expect(admitted).toBeGreaterThan(0)
    process.stdout.write(`[scopes race] 200 calls over 3 instances: ${admitted} admitted, refused by ${JSON.stringify(refusedBy)}; ${report.join(", ")}\n`)
  }, 120_000)
})
