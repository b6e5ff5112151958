/**
 * The `tollgate` CLI's admin commands, run as a user runs them (bin/tollgate.mjs in a child process)
 * against a running gateway's admin API.
 */
import { execFile } from "node:child_process"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ADMIN_TOKEN, mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { startMockUpstream, type MockUpstream } from "../support/mockUpstream.ts"

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

describe("tollgate CLI: projects and keys through the admin API", () => {
  let upstream: MockUpstream
  let gw: TestGateway
  /** `token: null` runs with no TOLLGATE_ADMIN_TOKEN at all. */
  const cli = (args: ReadonlyArray<string>, token: string | null = ADMIN_TOKEN): Promise<Run> =>
    new Promise((resolve) => {
      const env: NodeJS.ProcessEnv = { ...process.env, TOLLGATE_URL: gw.origin }
      if (token === null) delete env.TOLLGATE_ADMIN_TOKEN
      else env.TOLLGATE_ADMIN_TOKEN = token
      execFile(process.execPath, ["bin/tollgate.mjs", ...args], { cwd: process.cwd(), env }, (err, stdout, stderr) =>
        resolve({ code: err === null ? 0 : Number(err.code), stdout, stderr })
      )
    })
  const json = (r: Run) => JSON.parse(r.stdout) as any

  beforeAll(async () => {
    upstream = await startMockUpstream()
    gw = await startGateway(mockGatewayFile(upstream.url))
  })
  afterAll(async () => {
    await gw.close()
    await upstream.close()
  })

  it("creates a project, issues a key that works at once, rotates it with grace, revokes the new one", async () => {
    const created = await cli(["projects", "create", "--name", "cli-test", "--budget", "5000", "--rpm", "120", "--burst", "12"])
    expect(created.code).toBe(0)
    const project = json(created)
    expect(project).toMatchObject({ name: "cli-test", budget_credits: 5000, rate_limit: { requests_per_minute: 120, burst: 12 } })

    const issued = await cli(["keys", "create", project.id, "--environment", "production"])
    expect(issued.code).toBe(0)
    const key = json(issued)
    expect(key.secret).toMatch(/^tg_prd_/)
    const client = (secret: string) => new OpenAI({ baseURL: gw.url, apiKey: secret, maxRetries: 0 })
    const ok = await client(key.secret).chat.completions.create({ model: "auto", messages: [{ role: "user", content: "cli" }] })
    expect((ok as any).governance.status).toBe("completed")

    const rotated = await cli(["keys", "rotate", key.id, "--grace-seconds", "3600"])
    expect(rotated.code).toBe(0)
    const fresh = json(rotated)
    expect(fresh.replaces).toBe(key.id)
    await client(key.secret).models.list()
    await client(fresh.secret).models.list()

    const revoked = await cli(["keys", "revoke", fresh.id])
    expect(revoked.code).toBe(0)
    expect(json(revoked).status).toBe("revoked")
    const denied = await client(fresh.secret).models.list().catch((e) => e)
    expect(denied.status).toBe(401)

    const updated = await cli(["projects", "update", project.id, "--budget", "9000"])
    expect(json(updated).budget_credits).toBe(9000)
    const listed = await cli(["keys", "list", project.id])
    expect(json(listed).data.map((k: any) => [k.id, k.status])).toEqual([
      [key.id, "rotated"],
      [fresh.id, "revoked"]
    ])
    const got = await cli(["projects", "get", project.id])
    expect(json(got).current_window.budget_credits).toBe(9000)
  }, 60_000)

  it("fails clearly: a wrong admin token is 401 (exit 1), a missing token exits 2, an unknown project is 404", async () => {
    const wrong = await cli(["projects", "get", gw.projectId], "not-the-token")
    expect(wrong.code).toBe(1)
    expect(JSON.parse(wrong.stderr).error.code).toBe("invalid_admin_token")
    const missing = await cli(["projects", "get", gw.projectId], null)
    expect(missing.code).toBe(2)
    expect(missing.stderr).toContain("TOLLGATE_ADMIN_TOKEN")
    const unknown = await cli(["projects", "get", "prj_doesnotexist"])
    expect(unknown.code).toBe(1)
    expect(JSON.parse(unknown.stderr).error.code).toBe("not_found")
  }, 60_000)

  it("lists a page at a time (--limit, --cursor from next_cursor) or every page (--all); a bad limit is the API's 400", async () => {
    for (let i = 0; i < 3; i++) await gw.admin("POST", "/admin/v1/projects", { name: `cli-list ${i}`, budget_credits: 1, rate_limit: { requests_per_minute: 60 } })
    const all = json(await cli(["projects", "list", "--all", "--limit", "2"]))
    const ids = all.data.map((p: any) => p.id)
    expect(new Set(ids).size).toBe(ids.length)
    expect(ids.length).toBe((await gw.admin("GET", "/admin/v1/projects?limit=100")).body.data.length)
    expect([all.has_more, all.next_cursor]).toEqual([false, null])
    const first = json(await cli(["projects", "list", "--limit", "2"]))
    expect([first.data.length, first.has_more, first.next_cursor]).toEqual([2, true, ids[1]])
    const second = json(await cli(["projects", "list", "--limit", "2", "--cursor", first.next_cursor]))
    expect(second.data.map((p: any) => p.id)).toEqual(ids.slice(2, 4))
    const keys = json(await cli(["keys", "list", gw.projectId, "--all", "--limit", "1"]))
    expect(keys.data.map((k: any) => k.project_id)).toEqual([gw.projectId])
    const bad = await cli(["projects", "list", "--limit", "0"])
    expect([bad.code, JSON.parse(bad.stderr).error.param]).toEqual([1, "limit"])
  }, 60_000)

  it("a project's budget period and zone, a key's budget at creation (issue 41); a zone the server does not know exits 1 naming it", async () => {
    const created = await cli(["projects", "create", "--name", "cli-periods", "--budget", "1000", "--budget-period", "week", "--time-zone", "Asia/Tokyo"])
    expect(created.code).toBe(0)
    const project = json(created)
    expect(project).toMatchObject({ budget_period: "week", time_zone: "Asia/Tokyo", current_window: { period: expect.stringMatching(/^\d{4}-W\d{2}$/) } })
    expect(json(await cli(["projects", "update", project.id, "--budget-period", "total"]))).toMatchObject({ budget_period: "total", current_window: { period: "total" } })
    const bad = await cli(["projects", "update", project.id, "--time-zone", "Mars/Base"])
    expect(bad.code).toBe(1)
    expect(bad.stdout + bad.stderr).toContain("time_zone")
    expect(json(await cli(["keys", "create", project.id, "--budget", "250"]))).toMatchObject({ budget_credits: 250 })
  })

  it("sets and reads budgets at the key and end-user scopes (issue 41); a 402 names the scope that refused", async () => {
    const project = json(await cli(["projects", "create", "--name", "cli-scopes", "--budget", "100000", "--rpm", "600"]))
    const key = json(await cli(["keys", "create", project.id]))
    expect(json(await cli(["keys", "budget", key.id, "--budget", "0"]))).toMatchObject({ object: "key_budget", key_id: key.id, budget_credits: 0, spent: 0 })
    expect(json(await cli(["projects", "key-budgets", project.id])).data.map((k: any) => [k.key_id, k.budget_credits])).toEqual([[key.id, 0]])
    const client = new OpenAI({ baseURL: gw.url, apiKey: key.secret, maxRetries: 0 })
    await expect(client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "cli" }] })).rejects.toMatchObject({ status: 402, error: { param: "key" } })
    expect(json(await cli(["keys", "budget", key.id, "--budget", "none"]))).toMatchObject({ budget_credits: null, remaining: null })
    expect(json(await cli(["projects", "end-user-budget", project.id, "--budget", "0"]))).toMatchObject({ end_user_budget_credits: 0 })
    await expect(client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "cli" }], user: "ann" })).rejects.toMatchObject({
      status: 402,
      error: { param: "end_user" }
    })
    expect(json(await cli(["projects", "end-user", project.id, "ann", "--budget", "5000"]))).toMatchObject({ user: "ann", budget_credits: 5000, budget_source: "override" })
    await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "cli" }], user: "ann" })
    expect(json(await cli(["projects", "end-user", project.id, "ann"])).spent).toBeGreaterThan(0)
    expect(json(await cli(["projects", "end-users", project.id])).data.map((u: any) => u.user)).toEqual(["ann"])
    const top = json(await cli(["projects", "end-users", project.id, "--order", "spent"])).data
    expect(top.map((u: any) => u.user)).toEqual(["ann"])
    expect(top[0].spent).toBeGreaterThan(0)
    expect(json(await cli(["projects", "end-user", project.id, "ann", "--delete"]))).toMatchObject({ budget_source: "project_default", budget_credits: 0 })
    const bad = await cli(["projects", "end-user", project.id, "ann", "--budget", "-5"])
    expect(bad.code).not.toBe(0)
    // An end user's own upstream limits go with its override (the whole of it: --budget is needed).
    expect(json(await cli(["projects", "end-user", project.id, "bo", "--budget", "none", "--tpm", "900", "--max-concurrent", "2"]))).toMatchObject({
      user: "bo",
      budget_credits: null,
      rate_limit: { tokens_per_minute: 900, max_concurrent: 2 }
    })
    expect((await cli(["projects", "end-user", project.id, "bo", "--tpm", "900"])).code).not.toBe(0)
  }, 60_000)
})
