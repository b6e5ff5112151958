/**
 * Every admin list is paged (issue 38, finding 4; src/domain/paging.ts): `limit` (1–100, default 25)
 * and `cursor` (a page's next_cursor), answered as {object: "list", data, has_more, next_cursor}, on
 * SQLite and on PostgreSQL. Walking the pages returns every item exactly once, in creation order; a
 * project's budget window on a page is its own; GET /admin/v1/projects/{id} embeds the first page of
 * keys with `keys_has_more`; a team session pages its own project and environment only; a bad limit or
 * cursor is a 400 naming it.
 */
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { startMockUpstream, type MockUpstream } from "../support/mockUpstream.ts"
import { freshSchema, onEngines, type TestSchema } from "../support/pg.ts"

interface Listed {
  readonly id: string
  readonly [field: string]: unknown
}

interface ListPage {
  readonly object: "list"
  readonly data: ReadonlyArray<Listed>
  readonly has_more: boolean
  readonly next_cursor: string | null
}

const engines: ReadonlyArray<"sqlite" | "pg"> = ["sqlite", ...(onEngines("test/http/adminPaging.test.ts on PostgreSQL") ? (["pg"] as const) : [])]

describe.each(engines)("admin lists, paged (%s)", (engine) => {
  let upstream: MockUpstream
  let gw: TestGateway
  let schema: TestSchema | undefined
  /** The projects' ids oldest first (by created_at, then id, as their creation answers say): the default project first. */
  let created: Array<string> = []
  /** The keys of `keyed`, oldest first likewise. */
  let keys: Array<{ id: string; environment: string }> = []
  let keyed: string

  /** Items in list order: oldest first, and by id among those created in the same millisecond. */
  const oldestFirst = <T extends { id: string; created_at: string }>(items: ReadonlyArray<T>) =>
    [...items].sort((a, b) => a.created_at.localeCompare(b.created_at) || (a.id < b.id ? -1 : 1))

  const get = async (path: string, headers: Record<string, string> = { authorization: `Bearer ${gw.adminToken}` }) => {
    const res = await fetch(`${gw.origin}${path}`, { headers })
    return { status: res.status, body: (await res.json()) as any }
  }

  /** Every page of `path` at `limit` a page, following next_cursor; the pages' sizes and ids. */
  const walk = async (path: string, limit: number, headers?: Record<string, string>) => {
    const pages: Array<ListPage> = []
    let cursor: string | null = null
    do {
      const res = await get(`${path}?limit=${limit}${cursor === null ? "" : `&cursor=${cursor}`}`, headers)
      expect(res.status).toBe(200)
      pages.push(res.body)
      cursor = res.body.next_cursor
      expect(cursor === null).toBe(!res.body.has_more)
    } while (cursor !== null)
    return { sizes: pages.map((p) => p.data.length), ids: pages.flatMap((p) => p.data.map((item) => item.id)), pages }
  }

  beforeAll(async () => {
    upstream = await startMockUpstream()
    schema = engine === "pg" ? freshSchema() : undefined
    gw = await startGateway(mockGatewayFile(upstream.url), schema === undefined ? {} : { databaseUrl: schema.url })
    const projects = [(await gw.admin("GET", `/admin/v1/projects/${gw.projectId}`)).body]
    for (let i = 0; i < 120; i++) {
      projects.push((await gw.admin("POST", "/admin/v1/projects", { name: `paged ${i}`, budget_credits: 1000 + i, rate_limit: { requests_per_minute: 60 } })).body)
    }
    created = oldestFirst(projects).map((p) => p.id)
    keyed = created[7]!
    const issued = []
    for (let i = 0; i < 60; i++) issued.push((await gw.admin("POST", `/admin/v1/projects/${keyed}/keys`, { environment: ["development", "staging", "production"][i % 3] })).body)
    keys = oldestFirst(issued).map((k) => ({ id: k.id, environment: k.environment }))
  }, 60_000)
  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
    schema?.drop()
  })

  it("121 projects at ?limit=10: 13 pages, each project exactly once in creation order, has_more until the last", async () => {
    const { sizes, ids, pages } = await walk("/admin/v1/projects", 10)
    expect(sizes).toEqual([...Array(12).fill(10), 1])
    expect(ids).toEqual(created)
    expect(pages.map((p) => p.has_more)).toEqual([...Array(12).fill(true), false])
    expect(pages.slice(0, -1).map((p) => p.next_cursor)).toEqual(pages.slice(0, -1).map((p) => p.data.at(-1)!.id))
  })

  it("without a limit a page holds 25 projects; limit=100 is the largest page", async () => {
    const first = await get("/admin/v1/projects")
    expect([first.status, first.body.object, first.body.data.length, first.body.has_more]).toEqual([200, "list", 25, true])
    expect(first.body.next_cursor).toBe(created[24])
    const largest = await get("/admin/v1/projects?limit=100")
    expect(largest.body.data.map((p: Listed) => p.id)).toEqual(created.slice(0, 100))
  })

  it("a project's budget window on a page is its own: its cap, and its spent after a charged call", async () => {
    await new OpenAI({ baseURL: gw.url, apiKey: gw.devKey, maxRetries: 0 }).chat.completions.create({ model: "auto", messages: [{ role: "user", content: "spend" }] })
    const page = await get("/admin/v1/projects?limit=100")
    for (const p of page.body.data) expect(p.current_window.budget_credits).toBe(p.budget_credits)
    const [listed] = page.body.data
    const own = await get(`/admin/v1/projects/${gw.projectId}`)
    expect(listed.current_window.spent).toBeGreaterThan(0)
    expect(listed.current_window).toEqual(own.body.current_window)
    const other = page.body.data[5]
    expect(other.current_window).toMatchObject({ budget_credits: other.budget_credits, spent: 0, reserved: 0, remaining: other.budget_credits })
  })

  it("a project's 60 keys at ?limit=7: every key exactly once in creation order; GET project embeds the first 25 and keys_has_more", async () => {
    const { sizes, ids } = await walk(`/admin/v1/projects/${keyed}/keys`, 7)
    expect(sizes).toEqual([...Array(8).fill(7), 4])
    expect(ids).toEqual(keys.map((k) => k.id))
    const project = await get(`/admin/v1/projects/${keyed}`)
    expect(project.body.keys.map((k: Listed) => k.id)).toEqual(keys.slice(0, 25).map((k) => k.id))
    expect(project.body.keys_has_more).toBe(true)
    const rest = await get(`/admin/v1/projects/${keyed}/keys?limit=100&cursor=${project.body.keys.at(-1).id}`)
    expect(rest.body.data.map((k: Listed) => k.id)).toEqual(keys.slice(25).map((k) => k.id))
    const few = await get(`/admin/v1/projects/${created[8]}`)
    expect([few.body.keys, few.body.keys_has_more]).toEqual([[], false])
  })

  it("a team session pages its own environment's keys and lists only its own project", async () => {
    const issued = await gw.admin("POST", `/admin/v1/projects/${keyed}/keys`, { environment: "staging" })
    const signIn = await fetch(`${gw.origin}/admin/v1/session`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ token: issued.body.secret }) })
    const cookie = { cookie: (signIn.headers.get("set-cookie") ?? "").split(";")[0]! }
    const staging = (await walk(`/admin/v1/projects/${keyed}/keys`, 100)).pages.flatMap((p) => p.data).filter((k) => k.environment === "staging").map((k) => k.id)
    expect(staging).toHaveLength(21)
    expect(staging).toContain(issued.body.id)
    const { sizes, ids } = await walk(`/admin/v1/projects/${keyed}/keys`, 6, cookie)
    expect(sizes).toEqual([6, 6, 6, 3])
    expect(ids).toEqual(staging)
    const projects = await walk("/admin/v1/projects", 10, cookie)
    expect(projects.ids).toEqual([keyed])
    // Another environment's key, or another project, is no item of the team's lists.
    const production = keys.find((k) => k.environment === "production")!.id
    expect((await get(`/admin/v1/projects/${keyed}/keys?cursor=${production}`, cookie)).body.error.param).toBe("cursor")
    expect((await get(`/admin/v1/projects?cursor=${created[0]}`, cookie)).body.error.param).toBe("cursor")
  })

  it("a bad limit or cursor is a 400 invalid_request_error naming it, on every admin list", async () => {
    const lists = ["/admin/v1/projects", `/admin/v1/projects/${keyed}/keys`, `/admin/v1/projects/${keyed}/requests`]
    for (const list of lists) {
      for (const limit of ["0", "101", "-1", "1.5", "ten", "1e1", "", "0x10"]) {
        const res = await get(`${list}?limit=${limit}`)
        expect([list, limit, res.status, res.body.error?.type, res.body.error?.param]).toEqual([list, limit, 400, "invalid_request_error", "limit"])
      }
      for (const cursor of ["a%20b", "x".repeat(65), "%27%3B--"]) {
        const res = await get(`${list}?cursor=${cursor}`)
        expect([list, cursor, res.status, res.body.error?.param]).toEqual([list, cursor, 400, "cursor"])
      }
    }
    // A well-formed id that is no item of the list: another list's, an unknown one.
    for (const [list, cursor] of [["/admin/v1/projects", keys[0]!.id], ["/admin/v1/projects", "prj_unknown"], [`/admin/v1/projects/${keyed}/keys`, created[3]!], [`/admin/v1/projects/${created[3]}/keys`, keys[0]!.id]]) {
      const res = await get(`${list}?cursor=${cursor}`)
      expect([list, res.status, res.body.error?.type, res.body.error?.param]).toEqual([list, 400, "invalid_request_error", "cursor"])
    }
  })
})
