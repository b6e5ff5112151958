/**
 * The reads the dashboard's budget view is made of (issue 41 item 4), end to end through the official
 * `openai` client and the admin API, on each engine: `GET /admin/v1/projects/{id}/end_users?order=spent`
 * ranks every end user that spent in the current window, most first, then by name, each with the cap
 * that applies (its own, the project's default, none) and its spent equal to Σ its receipts; a page at
 * a time by `<spent>:<name>` cursors; another project's end users never appear. `GET
 * /admin/v1/projects/{id}/key_budgets` lists the project's keys that have a budget, with their windows.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { clientFor, dbAll, expectNoServerErrors, newKey, newProject, type StatusLog } from "./helpers.ts"

const PRICES = { input: 1_000_000, output: 1_000_000 } // 1 Credit a token

interface Ranked {
  readonly user: string
  readonly spent: number
  readonly reserved: number
  readonly budget_credits: number | null
  readonly budget_source: string
  readonly remaining: number | null
}

describe("end users ranked by spend and the keys' budgets, for the dashboard", () => {
  let mock: MockUpstream
  let gw: TestGateway
  const log: StatusLog = []

  beforeAll(async () => {
    mock = await startMockUpstream()
    gw = await startGateway(mockGatewayFile(mock.url, [{ name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: 16, auto: true }], { "gpt-test": PRICES }))
  })
  afterAll(async () => {
    expectNoServerErrors(log)
    await gw.close()
    await mock.close()
  })

  /** Σ credits_charged of the project's receipts per end user named. */
  const receiptSums = (projectId: string) => {
    const sums = new Map<string, number>()
    for (const r of dbAll<{ body: string; credits_charged: number }>(gw, "SELECT body, credits_charged FROM receipts WHERE project_id = ?", projectId)) {
      const user = (JSON.parse(r.body) as { end_user?: string }).end_user
      if (user !== undefined) sums.set(user, (sums.get(user) ?? 0) + Number(r.credits_charged))
    }
    return sums
  }

  it("order=spent ranks the window's end users by spent, then name, a page at a time; only the project's own", async () => {
    const p = await newProject(gw, { name: "ranked" })
    const other = await newProject(gw, { name: "ranked-other" })
    const client = clientFor(gw, p.key, log)
    // Calls of one size each: spent is proportional to the count. "b/ob" and "carol" tie; a name with
    // a slash, and another project's "alice" who spends most of all.
    const calls: ReadonlyArray<readonly [string, number]> = [["alice", 4], ["b/ob", 2], ["carol", 2], ["zoë", 3], ["dave", 1]]
    for (const [user, n] of calls) for (let i = 0; i < n; i++) await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "same size" }], user })
    await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "same size" }] }) // names no end user
    for (let i = 0; i < 6; i++) await clientFor(gw, other.key, log).chat.completions.create({ model: "auto", messages: [{ role: "user", content: "same size" }], user: "alice" })

    // The caps that apply: carol's own, the project's default for the others, dave none at all.
    expect((await gw.admin("PATCH", `/admin/v1/projects/${p.projectId}/end_user_budget`, { end_user_budget_credits: 100_000 })).status).toBe(200)
    expect((await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/carol`, { budget_credits: 5_000 })).status).toBe(200)
    expect((await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/dave`, { budget_credits: null })).status).toBe(200)
    // An override that never called is not in the ranking (it has no window).
    expect((await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/erin`, { budget_credits: 7 })).status).toBe(200)

    const ranked = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/end_users?order=spent`)
    expect(ranked.status).toBe(200)
    expect(ranked.body).toMatchObject({ object: "list", has_more: false, next_cursor: null })
    const data = ranked.body.data as Array<Ranked>
    expect(data.map((u) => u.user)).toEqual(["alice", "zoë", "b/ob", "carol", "dave"])
    const sums = receiptSums(p.projectId)
    const unit = sums.get("dave")!
    expect(unit).toBeGreaterThan(0)
    for (const u of data) {
      expect({ user: u.user, spent: u.spent, reserved: u.reserved }).toEqual({ user: u.user, spent: sums.get(u.user), reserved: 0 })
      expect(u.spent).toBe(unit * calls.find(([name]) => name === u.user)![1])
    }
    const byName = new Map(data.map((u) => [u.user, u]))
    expect(byName.get("carol")).toMatchObject({ budget_credits: 5_000, budget_source: "override", remaining: 5_000 - 2 * unit })
    expect(byName.get("alice")).toMatchObject({ budget_credits: 100_000, budget_source: "project_default", remaining: 100_000 - 4 * unit })
    expect(byName.get("dave")).toMatchObject({ budget_credits: null, budget_source: "override", remaining: null })
    // By name (the default order) the list is still the overrides.
    const overrides = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/end_users`)
    expect((overrides.body.data as Array<Ranked>).map((u) => u.user)).toEqual(["carol", "dave", "erin"])

    // Two at a time: the pages, concatenated, are the ranking; each cursor is <spent>:<name>.
    const paged: Array<string> = []
    let cursor: string | null = null
    do {
      const page: { status: number; body: any } = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/end_users?order=spent&limit=2${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`)
      expect(page.status).toBe(200)
      paged.push(...(page.body.data as Array<Ranked>).map((u) => u.user))
      cursor = page.body.next_cursor as string | null
      if (cursor !== null) expect(cursor).toMatch(/^\d+:.+$/)
    } while (cursor !== null)
    expect(paged).toEqual(["alice", "zoë", "b/ob", "carol", "dave"])
    const top = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/end_users?order=spent&limit=2`)
    expect(top.body.next_cursor).toBe(`${3 * unit}:zoë`)

    // The other project's alice is its own.
    const theirs = await gw.admin("GET", `/admin/v1/projects/${other.projectId}/end_users?order=spent`)
    expect((theirs.body.data as Array<Ranked>).map((u) => [u.user, u.spent])).toEqual([["alice", 6 * unit]])

    // A cursor that is not <spent>:<name>, an unknown order, an unknown project.
    for (const bad of ["alice", "-1:alice", "1.5:alice", "12:"]) {
      const res = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/end_users?order=spent&cursor=${encodeURIComponent(bad)}`)
      expect([bad, res.status, res.body.error?.param]).toEqual([bad, 400, "cursor"])
    }
    const order = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/end_users?order=cost`)
    expect(order.status).toBe(400)
    expect((await gw.admin("GET", "/admin/v1/projects/prj_nope/end_users?order=spent")).status).toBe(404)
  })

  it("key_budgets lists the project's keys that have a budget, by id, with their current windows", async () => {
    const p = await newProject(gw, { name: "key-budgets" })
    const uncapped = await newKey(gw, p.projectId)
    const idle = await newKey(gw, p.projectId)
    expect((await gw.admin("PATCH", `/admin/v1/keys/${p.keyId}`, { budget_credits: 10_000 })).status).toBe(200)
    expect((await gw.admin("PATCH", `/admin/v1/keys/${idle.id}`, { budget_credits: 500 })).status).toBe(200)
    await clientFor(gw, p.key, log).chat.completions.create({ model: "auto", messages: [{ role: "user", content: "hello" }], user: "alice" })
    await clientFor(gw, uncapped.secret, log).chat.completions.create({ model: "auto", messages: [{ role: "user", content: "hello" }] })

    const listed = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/key_budgets`)
    expect(listed.status).toBe(200)
    const one = (await gw.admin("GET", `/admin/v1/keys/${p.keyId}/budget`)).body
    expect(one.spent).toBeGreaterThan(0)
    const idleOne = (await gw.admin("GET", `/admin/v1/keys/${idle.id}/budget`)).body
    expect(listed.body).toEqual({ object: "list", data: [one, idleOne].sort((a, b) => (a.key_id < b.key_id ? -1 : 1)), has_more: false, next_cursor: null })
    expect(idleOne).toMatchObject({ budget_credits: 500, spent: 0, reserved: 0, remaining: 500 })

    const first = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/key_budgets?limit=1`)
    expect(first.body).toMatchObject({ has_more: true, next_cursor: first.body.data[0].key_id })
    const second = await gw.admin("GET", `/admin/v1/projects/${p.projectId}/key_budgets?limit=1&cursor=${first.body.next_cursor}`)
    expect(second.body).toMatchObject({ has_more: false, next_cursor: null })
    expect([first.body.data[0].key_id, second.body.data[0].key_id].sort()).toEqual([p.keyId, idle.id].sort())
    expect((await gw.admin("GET", "/admin/v1/projects/prj_nope/key_budgets")).status).toBe(404)
  })
})
