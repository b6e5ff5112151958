/**
 * `tollgate audit` checks every scope's window (issue 41, item 5): after real calls through the
 * `openai` client with a key budget and an end user's, on SQLite and on PostgreSQL, the audit is
 * clean and counts the key's and the end user's windows beside the project's; each tampering of a
 * scope's row is named by its kind and the scope's window — spent off by one, reserved off, and a cap
 * lowered under what the window had committed before its holds (not grandfathered).
 */
import Database from "better-sqlite3"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { auditStore } from "../../src/store/auditReader.ts"
import { newProject } from "../e2e/helpers.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import pg from "pg"
import { freshSchema, onEngines, type TestSchema } from "../support/pg.ts"

const engines = [
  ["sqlite", true],
  ["pg", onEngines("test/audit/scopes.test.ts on PostgreSQL", { pg: true })]
] as const

describe.each(engines)("the audit of the key and end-user scopes on %s", (engine, enabled) => {
  let upstream: MockUpstream
  let gw: TestGateway
  let schema: TestSchema | undefined
  let keyScope = ""
  let userScope = ""
  let period = ""

  /** A write to the store behind the gateway's back (the tampering). */
  const write = async (sql: string, ...params: Array<unknown>) => {
    if (gw.engine === "pg") {
      const client = new pg.Client({ connectionString: gw.databaseUrl })
      await client.connect()
      try {
        await client.query(sql.replace(/\?/g, () => "$1"), params)
      } finally {
        await client.end()
      }
      return
    }
    const db = new Database(gw.dbPath)
    try {
      db.prepare(sql).run(...params)
    } finally {
      db.close()
    }
  }
  const audit = async () => {
    const r = await auditStore({ database: gw.databaseUrl, limit: 1000, jobs: 0 })
    return { windows: r.summary.stats.windows, findings: r.findings.map((f) => `${f.kind} ${f.subject}`).sort() }
  }

  beforeAll(async () => {
    if (!enabled) return
    upstream = await startMockUpstream()
    schema = engine === "pg" ? freshSchema() : undefined
    gw = await startGateway(mockGatewayFile(upstream.url), schema === undefined ? {} : { databaseUrl: schema.url })
    const p = await newProject(gw, { budget: 1_000_000 })
    const client = new OpenAI({ baseURL: gw.url, apiKey: p.key, maxRetries: 0 })
    const call = (user?: string) => client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: "hi" }], max_tokens: 4, ...(user === undefined ? {} : { user }) })
    expect((await gw.admin("PATCH", `/admin/v1/keys/${p.keyId}`, { budget_credits: 100_000 })).status).toBe(200)
    expect((await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/erin`, { budget_credits: 50_000 })).status).toBe(200)
    for (const user of ["erin", undefined, "erin", "frank"]) await call(user)
    keyScope = `key:${p.keyId}`
    userScope = `end_user:${p.projectId}/erin`
    period = gw.query<{ period: string }>("SELECT period FROM scope_windows WHERE scope = ?", keyScope)[0]!.period
  })
  afterAll(async () => {
    if (!enabled) return
    await gw.close()
    await upstream.close()
    schema?.drop()
  })

  it.runIf(enabled)("clean after real calls, the scopes' windows counted beside the projects'", async () => {
    const projectWindows = gw.query<{ n: number }>("SELECT COUNT(*) AS n FROM budget_windows")[0]!.n
    const scopeWindows = gw.query<{ n: number }>("SELECT COUNT(*) AS n FROM scope_windows")[0]!.n
    // The key of this project, the default project's key if it called, erin and frank.
    expect(Number(scopeWindows)).toBeGreaterThanOrEqual(3)
    const r = await audit()
    expect(r.findings).toEqual([])
    expect(r.windows).toBe(Number(projectWindows) + Number(scopeWindows))
  })

  it.runIf(enabled)("a key's spent off by one, an end user's reserved off: each named on its scope's window", async () => {
    await write("UPDATE scope_windows SET spent = spent + 1 WHERE scope = ?", keyScope)
    await write("UPDATE scope_windows SET reserved = reserved + 5 WHERE scope = ?", userScope)
    try {
      expect((await audit()).findings).toEqual([`window_reserved_mismatch ${userScope}/${period}`, `window_spent_mismatch ${keyScope}/${period}`])
    } finally {
      await write("UPDATE scope_windows SET spent = spent - 1 WHERE scope = ?", keyScope)
      await write("UPDATE scope_windows SET reserved = reserved - 5 WHERE scope = ?", userScope)
    }
    expect((await audit()).findings).toEqual([])
  })

  it.runIf(enabled)("a cap under what its window committed: over cap unless the cap was lowered after the window's last hold", async () => {
    // Lowered now (after the holds): grandfathered, as a project's cap is.
    expect((await gw.admin("PUT", `/admin/v1/projects/${gw.query<{ project_id: string }>("SELECT project_id FROM end_users WHERE end_user = 'erin'")[0]!.project_id}/end_users/erin`, { budget_credits: 1 })).status).toBe(200)
    expect((await audit()).findings).toEqual([])
    // The same cap dated before the window's holds: the window overspent it.
    await write("UPDATE end_users SET updated_at = 0 WHERE end_user = 'erin'")
    await write("UPDATE api_keys SET budget_credits = 1, budget_changed_at = 0 WHERE id = ?", keyScope.slice("key:".length))
    expect((await audit()).findings).toEqual([`window_over_cap ${userScope}/${period}`, `window_over_cap ${keyScope}/${period}`])
  })
})
