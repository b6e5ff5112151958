/**
 * Budgets at every scope (issue 41), end to end through the official `openai` client and the admin
 * API, on each engine: a key's budget refuses with 402 param `key`, an end user's with `end_user`, the
 * project's with `project`; a refusal holds nothing; afterwards nothing is held in any scope and each
 * scope's spent is the sum of the receipts charged to it (the receipts name their key and end user).
 * The admin API refuses a cap that is negative, fractional, above 2^53 − 1 or not a number, and an end
 * user's name of more than 256 characters, each a 400 naming the field.
 */
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { clientFor, dbAll, expectApiError, expectNoServerErrors, newKey, newProject, type StatusLog } from "./helpers.ts"

const PRICES = { input: 1_000_000, output: 1_000_000 } // 1 Credit a token
const ROUTE_LIMIT = 16
const hello = [{ role: "user" as const, content: "hello" }]
const want402 = { status: 402, code: "budget_exceeded", noRetry: true } as const

describe("budgets at the key and end-user scopes", () => {
  let mock: MockUpstream
  let gw: TestGateway
  const log: StatusLog = []

  beforeAll(async () => {
    mock = await startMockUpstream()
    gw = await startGateway(
      mockGatewayFile(mock.url, [{ name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: ROUTE_LIMIT, auto: true }], { "gpt-test": PRICES })
    )
  })
  afterAll(async () => {
    expectNoServerErrors(log)
    await gw.close()
    await mock.close()
  })

  /** Every scope's windows of a project: the project's, its keys' and its end users' (spent, reserved). */
  const windows = (projectId: string, keyIds: ReadonlyArray<string>) => {
    const project = dbAll<{ spent: number; reserved: number }>(gw, "SELECT spent, reserved FROM budget_windows WHERE project_id = ?", projectId)
    const scoped = dbAll<{ scope: string; spent: number; reserved: number }>(gw, "SELECT scope, spent, reserved FROM scope_windows WHERE scope LIKE ?", `end_user:${projectId}/%`)
    const keys = keyIds.flatMap((k) => dbAll<{ scope: string; spent: number; reserved: number }>(gw, "SELECT scope, spent, reserved FROM scope_windows WHERE scope = ?", `key:${k}`))
    const all = new Map<string, { spent: number; reserved: number }>()
    for (const w of project) all.set(`project:${projectId}`, { spent: Number(w.spent), reserved: Number(w.reserved) })
    for (const w of [...scoped, ...keys]) all.set(w.scope, { spent: Number(w.spent), reserved: Number(w.reserved) })
    return all
  }
  /** Σ receipts charged to each scope, by the receipt's own key_id and end_user. */
  const receiptSums = (projectId: string) => {
    const sums = new Map<string, number>()
    const add = (scope: string, n: number) => sums.set(scope, (sums.get(scope) ?? 0) + n)
    for (const r of dbAll<{ body: string; credits_charged: number }>(gw, "SELECT body, credits_charged FROM receipts WHERE project_id = ?", projectId)) {
      const body = JSON.parse(r.body) as { key_id?: string; end_user?: string }
      const n = Number(r.credits_charged)
      add(`project:${projectId}`, n)
      expect(body.key_id, "every receipt names its key").toBeDefined()
      add(`key:${body.key_id}`, n)
      if (body.end_user !== undefined) add(`end_user:${projectId}/${body.end_user}`, n)
    }
    return sums
  }
  const expectBalanced = (projectId: string, keyIds: ReadonlyArray<string>) => {
    const w = windows(projectId, keyIds)
    const sums = receiptSums(projectId)
    for (const [scope, { spent, reserved }] of w) {
      expect({ scope, reserved }, "nothing held after").toEqual({ scope, reserved: 0 })
      expect({ scope, spent }, "Σ receipts = spent").toEqual({ scope, spent: sums.get(scope) ?? 0 })
    }
    for (const scope of sums.keys()) expect(w.has(scope), `${scope} has a window`).toBe(true)
    return w
  }

  it("a key's budget refuses with param key, an end user's with end_user, the project's with project; each refusal holds nothing", async () => {
    const p = await newProject(gw, { name: "scopes-e2e", budget: 1_000_000 })
    const other = await newKey(gw, p.projectId)
    const a = clientFor(gw, p.key, log)
    const b = clientFor(gw, other.secret, log)

    // The key's scope: a cap of 0 refuses its calls, and only its calls.
    expect((await gw.admin("PATCH", `/admin/v1/keys/${p.keyId}`, { budget_credits: 0 })).body).toMatchObject({ object: "key_budget", budget_credits: 0, spent: 0, reserved: 0, remaining: 0 })
    await expectApiError(a.chat.completions.create({ model: "auto", messages: hello }), { ...want402, param: "key", message: /key's remaining budget/ })
    await b.chat.completions.create({ model: "auto", messages: hello })

    // The end user's scope: the project's default of 0 refuses a user without an override …
    expect((await gw.admin("PATCH", `/admin/v1/projects/${p.projectId}/end_user_budget`, { end_user_budget_credits: 0 })).status).toBe(200)
    await expectApiError(b.chat.completions.create({ model: "auto", messages: hello, user: "carol" }), { ...want402, param: "end_user", message: /end user's remaining budget/ })
    await expectApiError(b.chat.completions.create({ model: "auto", messages: hello, metadata: { end_user: "carol" } }), { ...want402, param: "end_user" })
    // … an override (here: none at all) lets it through, and a call naming no end user is not held in one.
    const put = await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/carol`, { budget_credits: null })
    expect(put.body).toMatchObject({ object: "end_user", user: "carol", budget_credits: null, budget_source: "override" })
    await b.chat.completions.create({ model: "auto", messages: hello, user: "carol" })
    await b.chat.completions.create({ model: "auto", messages: hello })
    const carol = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/end_users/carol`)
    expect(carol.body.spent).toBeGreaterThan(0)
    const dave = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/end_users/dave`)
    expect(dave.body).toMatchObject({ budget_credits: 0, budget_source: "project_default", spent: 0 })
    const list = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/end_users`)
    expect(list.body).toMatchObject({ object: "list", has_more: false, next_cursor: null })
    expect((list.body.data as Array<{ user: string }>).map((u) => u.user)).toEqual(["carol"])
    // DELETE removes the override: the default (0) applies again.
    expect((await gw.admin("DELETE", `/admin/v1/projects/${p.projectId}/end_users/carol`)).body).toMatchObject({ budget_source: "project_default", budget_credits: 0 })
    await expectApiError(b.chat.completions.create({ model: "auto", messages: hello, user: "carol" }), { ...want402, param: "end_user" })
    expect((await gw.admin("DELETE", `/admin/v1/projects/${p.projectId}/end_users/carol`)).status).toBe(404)

    // The project's scope comes first: with every scope out of room, the 402 names the project.
    expect((await gw.admin("PATCH", `/admin/v1/projects/${p.projectId}`, { budget_credits: 0 })).status).toBe(200)
    await expectApiError(a.chat.completions.create({ model: "auto", messages: hello, user: "carol" }), { ...want402, param: "project", message: /project's remaining budget/ })
    await expectApiError(b.chat.completions.create({ model: "auto", messages: hello }), { ...want402, param: "project" })

    const w = expectBalanced(p.projectId, [p.keyId, other.id])
    expect(w.get(`key:${p.keyId}`)?.spent ?? 0, "the refused key spent nothing").toBe(0)
    expect(w.get(`key:${other.id}`)!.spent).toBeGreaterThan(0)
  })

  it("a key's budget is never overspent by concurrent calls, and the key's receipts sum to its spent", async () => {
    const p = await newProject(gw, { name: "scopes-e2e-race", budget: 1_000_000 })
    const cap = 150
    expect((await gw.admin("PATCH", `/admin/v1/keys/${p.keyId}`, { budget_credits: cap })).status).toBe(200)
    const client = clientFor(gw, p.key, log)
    const outcomes = await Promise.allSettled(Array.from({ length: 24 }, (_, i) => client.chat.completions.create({ model: "auto", messages: hello, user: `u${i % 3}` })))
    const refused = outcomes.filter((o) => o.status === "rejected").map((o) => (o as PromiseRejectedResult).reason as { status: number; error: { param: string } })
    for (const r of refused) expect([r.status, r.error.param]).toEqual([402, "key"])
    expect(refused.length).toBeGreaterThan(0)
    const w = expectBalanced(p.projectId, [p.keyId])
    expect(w.get(`key:${p.keyId}`)!.spent).toBeLessThanOrEqual(cap)
    const budget = await gw.admin("GET", `/admin/v1/keys/${p.keyId}/budget`)
    expect(budget.body).toMatchObject({ budget_credits: cap, spent: w.get(`key:${p.keyId}`)!.spent, reserved: 0 })
  })

  it("POST /v1/routing/evaluate previews every scope: the one that would refuse, each scope's figures, the key's limits", async () => {
    const p = await newProject(gw, { name: "scopes-e2e-evaluate", budget: 1_000_000 })
    const evaluate = async (secret: string, user?: string) => {
      const res = await fetch(`${gw.url}/routing/evaluate`, {
        method: "POST",
        headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "auto", messages: hello, ...(user === undefined ? {} : { user }) })
      })
      expect(res.status).toBe(200)
      return (await res.json()) as { budget: { would_pass: boolean; refused_by: string | null; scopes: Array<Record<string, unknown>> }; rate_limit: { limits: unknown } }
    }
    // Nothing capped but the project: the key is listed, uncapped.
    const open = await evaluate(p.key)
    expect(open.budget).toMatchObject({ would_pass: true, refused_by: null })
    expect(open.budget.scopes.map((s) => [s.scope, s.budget_credits, s.remaining])).toEqual([["project", 1_000_000, 1_000_000], ["key", null, null]])
    expect(open.rate_limit.limits).toEqual([])

    const capped = await gw.admin("POST", `/admin/v1/projects/${p.projectId}/keys`, { environment: "development", budget_credits: 0, rate_limit: { max_concurrent: 2 } })
    const refused = await evaluate(capped.body.secret, "erin")
    expect(refused.budget).toMatchObject({ would_pass: false, refused_by: "key" })
    expect(refused.budget.scopes.map((s) => [s.scope, s.budget_credits, s.spent, s.reserved, s.remaining])).toEqual([
      ["project", 1_000_000, 0, 0, 1_000_000],
      ["key", 0, 0, 0, 0],
      ["end_user", null, 0, 0, null]
    ])
    expect(refused.rate_limit.limits).toEqual([{ scope: "key", tokens_per_minute: null, max_concurrent: 2 }])

    // An end user out of room: refused by end_user, the key (uncapped) letting it through.
    expect((await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/erin`, { budget_credits: 0 })).status).toBe(200)
    expect((await evaluate(p.key, "erin")).budget).toMatchObject({ would_pass: false, refused_by: "end_user" })
    expect((await evaluate(p.key, "frank")).budget).toMatchObject({ would_pass: true, refused_by: null })
    // The preview changed no window.
    expect(dbAll(gw, "SELECT scope FROM scope_windows WHERE scope LIKE ?", `%${p.projectId}%`)).toEqual([])
  })

  it("a key created with its budget: answered with it, and held against it from its first call", async () => {
    const p = await newProject(gw, { name: "scopes-e2e-create" })
    const created = await gw.admin("POST", `/admin/v1/projects/${p.projectId}/keys`, { environment: "development", budget_credits: 0 })
    expect([created.status, created.body.budget_credits]).toEqual([201, 0])
    const budget = await gw.admin("GET", `/admin/v1/keys/${created.body.id}/budget`)
    expect(budget.body).toMatchObject({ budget_credits: 0, spent: 0 })
    const refused = await new OpenAI({ baseURL: gw.url, apiKey: created.body.secret, maxRetries: 0 }).chat.completions
      .create({ model: "gpt-test", messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e)
    expect([(refused as any).status, (refused as any).error?.param]).toEqual([402, "key"])
  })

  it("bad caps and a user of more than 256 characters are 400s naming the field", async () => {
    const p = await newProject(gw, { name: "scopes-e2e-bad" })
    for (const bad of [-1, 1.5, 2 ** 53, "10", true]) {
      const k = await gw.admin("PATCH", `/admin/v1/keys/${p.keyId}`, { budget_credits: bad })
      expect([bad, k.status, k.body.error?.param]).toEqual([bad, 400, "budget_credits"])
      const d = await gw.admin("PATCH", `/admin/v1/projects/${p.projectId}/end_user_budget`, { end_user_budget_credits: bad })
      expect([bad, d.status, d.body.error?.param]).toEqual([bad, 400, "end_user_budget_credits"])
      const u = await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/alice`, { budget_credits: bad })
      expect([bad, u.status, u.body.error?.param]).toEqual([bad, 400, "budget_credits"])
    }
    // A key created with a bad budget: refused before anything is written.
    const keysBefore = dbAll(gw, "SELECT id FROM api_keys WHERE project_id = ?", p.projectId).length
    for (const bad of [-1, 1.5, 2 ** 53, "10"]) {
      const k = await gw.admin("POST", `/admin/v1/projects/${p.projectId}/keys`, { environment: "development", budget_credits: bad })
      expect([bad, k.status, k.body.error?.param]).toEqual([bad, 400, "budget_credits"])
    }
    expect(dbAll(gw, "SELECT id FROM api_keys WHERE project_id = ?", p.projectId)).toHaveLength(keysBefore)
    const long = await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/${"x".repeat(257)}`, { budget_credits: 1 })
    expect(long.status).toBe(400)
    expect(long.body.error.param).toBe("user")
    const ok = await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/${"x".repeat(256)}`, { budget_credits: 1 })
    expect(ok.status).toBe(200)
    expect((await gw.admin("PATCH", "/admin/v1/keys/key_nope", { budget_credits: 1 })).status).toBe(404)
    // Nothing was written by a refusal.
    expect(dbAll(gw, "SELECT budget_credits FROM api_keys WHERE id = ?", p.keyId)).toEqual([{ budget_credits: null }])
    // A call naming an end user of 10 KB: a 400 naming the field, before anything is held.
    const client = clientFor(gw, p.key, log)
    await expectApiError(client.chat.completions.create({ model: "auto", messages: hello, user: "x".repeat(10_240) }), { status: 400, code: "invalid_request_error", param: "user", noRetry: true })
    await expectApiError(client.chat.completions.create({ model: "auto", messages: hello, metadata: { end_user: "x".repeat(10_240) } }), { status: 400, code: "invalid_request_error", param: "metadata.end_user" })
    expect(dbAll(gw, "SELECT COUNT(*) AS n FROM reservations WHERE project_id = ?", p.projectId)).toEqual([{ n: 0 }])
  })
})
