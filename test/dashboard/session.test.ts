/**
 * The dashboard's sign-in session over HTTP (issue 17): cookie attributes, CSRF on every write, a
 * team's read-only view of its own project and environment, expiry, sign-out, and the admin API's
 * new reads decoding with the schemas the OpenAPI document is generated from.
 */
import { Schema } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as A from "../../src/http/adminApi.ts"
import { ADMIN_TOKEN, mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"

interface Reply {
  readonly status: number
  readonly body: any
  readonly headers: Headers
}

/** A cookie jar of one: what a browser would keep for this origin. */
const client = (origin: string) => {
  let cookie: string | undefined
  let csrf: string | undefined
  const call = async (method: string, path: string, body?: unknown, extra: Record<string, string> = {}): Promise<Reply> => {
    const headers: Record<string, string> = { ...extra }
    if (body !== undefined) headers["content-type"] = "application/json"
    if (cookie !== undefined) headers.cookie = cookie
    const res = await fetch(`${origin}${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) })
    const set = res.headers.get("set-cookie")
    if (set !== null) cookie = set.split(";")[0]
    return { status: res.status, body: await res.json(), headers: res.headers }
  }
  return {
    call,
    signIn: async (token: string) => {
      const r = await call("POST", "/admin/v1/session", { token })
      csrf = r.body.csrf_token
      return r
    },
    write: (method: string, path: string, body?: unknown) => call(method, path, body, csrf === undefined ? {} : { "x-csrf-token": csrf }),
    get cookie() {
      return cookie
    },
    set cookie(v) {
      cookie = v
    }
  }
}

describe("dashboard sessions and the admin API's dashboard reads", () => {
  let upstream: MockUpstream
  let gw: TestGateway
  beforeAll(async () => {
    upstream = await startMockUpstream()
    gw = await startGateway(mockGatewayFile(upstream.url))
  })
  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
  })

  it("a wrong admin token or project key is refused, and sets no cookie", async () => {
    const c = client(gw.origin)
    const wrong = await c.signIn("not-the-token")
    expect(wrong.status).toBe(401)
    expect(wrong.body.error.code).toBe("invalid_admin_token")
    expect(wrong.headers.get("set-cookie")).toBeNull()
    const badKey = await c.signIn(gw.devKey.slice(0, -3) + "aaa")
    expect(badKey.status).toBe(401)
    expect(badKey.body.error.code).toBe("invalid_api_key")
    const form = await fetch(`${gw.origin}/admin/v1/session`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: `token=${ADMIN_TOKEN}` })
    expect(form.status).toBe(400)
    expect(form.headers.get("set-cookie")).toBeNull()
  })

  it("an operator session is an HttpOnly, SameSite=Strict cookie; writes need the session's CSRF token", async () => {
    const c = client(gw.origin)
    const signed = await c.signIn(ADMIN_TOKEN)
    expect(signed.status).toBe(201)
    const session = Schema.decodeUnknownSync(A.SessionInfo)(signed.body)
    expect(session.role).toBe("operator")
    const set = signed.headers.get("set-cookie")!
    expect(set).toMatch(/^tollgate_session=[A-Za-z0-9_-]{43};/)
    expect(set).toMatch(/HttpOnly/i)
    expect(set).toMatch(/SameSite=Strict/i)
    expect(set).toMatch(/Path=\//)
    expect(set).not.toContain(ADMIN_TOKEN)
    expect(signed.headers.get("cache-control")).toBe("no-store")

    expect((await c.call("GET", "/admin/v1/projects")).status).toBe(200)
    const noCsrf = await c.call("POST", "/admin/v1/projects", { name: "x", budget_credits: 1, rate_limit: { requests_per_minute: 1 } })
    expect(noCsrf.status).toBe(403)
    expect(noCsrf.body.error.code).toBe("invalid_csrf_token")
    const forged = await c.call("POST", "/admin/v1/projects", { name: "x", budget_credits: 1, rate_limit: { requests_per_minute: 1 } }, { "x-csrf-token": "forged" + session.csrf_token.slice(6) })
    expect(forged.status).toBe(403)
    expect(forged.body.error.code).toBe("invalid_csrf_token")
    const created = await c.write("POST", "/admin/v1/projects", { name: "with-csrf", budget_credits: 1000, rate_limit: { requests_per_minute: 60 } })
    expect(created.status).toBe(201)

    // The bearer token still works alone, without cookie or CSRF (CLI, scripts).
    expect((await gw.admin("GET", "/admin/v1/projects")).status).toBe(200)

    // The session's own endpoints take the cookie only: the bearer token alone is no session, and beside
    // the cookie it changes nothing (the sign-out still needs CSRF).
    const bearerOnly = await gw.admin("GET", "/admin/v1/session")
    expect(bearerOnly.status).toBe(401)
    expect((await c.call("GET", "/admin/v1/session", undefined, { authorization: `Bearer ${ADMIN_TOKEN}` })).status).toBe(200)
    expect((await c.call("DELETE", "/admin/v1/session", undefined, { authorization: `Bearer ${ADMIN_TOKEN}` })).status).toBe(403)

    // Sign-out needs the CSRF token too, and ends the session for good.
    expect((await c.call("DELETE", "/admin/v1/session")).status).toBe(403)
    const out = await c.write("DELETE", "/admin/v1/session")
    expect(out.status).toBe(200)
    expect(out.headers.get("set-cookie")).toMatch(/^tollgate_session=; Max-Age=0; Path=\/; HttpOnly; SameSite=Strict/)
    const stale = client(gw.origin)
    stale.cookie = set.split(";")[0]
    expect((await stale.call("GET", "/admin/v1/projects")).status).toBe(401)
  })

  it("a team session reads only its own project and environment, and writes nothing", async () => {
    const op = client(gw.origin)
    await op.signIn(ADMIN_TOKEN)
    const other = (await op.write("POST", "/admin/v1/projects", { name: "other", budget_credits: 1000, rate_limit: { requests_per_minute: 60 } })).body
    const staging = (await op.write("POST", `/admin/v1/projects/${gw.projectId}/keys`, { environment: "staging" })).body
    const ai = new OpenAI({ baseURL: gw.url, apiKey: gw.devKey, maxRetries: 0 })
    const done = await ai.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "team view" }] })
    const requestId = (done as any).governance.request_id as string
    await new OpenAI({ baseURL: gw.url, apiKey: staging.secret, maxRetries: 0 }).chat.completions.create({ model: "auto", messages: [{ role: "user", content: "staging" }] })

    const team = client(gw.origin)
    const signed = await team.signIn(gw.devKey)
    expect(signed.status).toBe(201)
    expect(signed.body).toMatchObject({ role: "team", project_id: gw.projectId, environment: "development" })

    const list = Schema.decodeUnknownSync(A.ProjectList)((await team.call("GET", "/admin/v1/projects")).body)
    expect(list.data.map((p) => p.id)).toEqual([gw.projectId])
    const own = Schema.decodeUnknownSync(A.Project)((await team.call("GET", `/admin/v1/projects/${gw.projectId}`)).body)
    expect(new Set(own.keys.map((k) => k.environment))).toEqual(new Set(["development"]))
    expect(own.keys.find((k) => k.status === "active")!.last_used_at).not.toBeNull()

    for (const path of [`/admin/v1/projects/${other.id}`, `/admin/v1/projects/${other.id}/keys`, `/admin/v1/projects/${other.id}/requests`, `/admin/v1/projects/${other.id}/usage`]) {
      const r = await team.call("GET", path)
      expect(r.status, path).toBe(404)
      expect(r.body.error.code).toBe("not_found")
    }
    const page = Schema.decodeUnknownSync(A.RequestPage)((await team.call("GET", `/admin/v1/projects/${gw.projectId}/requests?environment=staging`)).body)
    expect(page.data.length).toBeGreaterThan(0)
    expect(page.data.every((r) => r.environment === "development")).toBe(true)

    const write = await team.write("PATCH", `/admin/v1/projects/${gw.projectId}`, { budget_credits: 1 })
    expect(write.status).toBe(403)
    expect(write.body.error.code).toBe("forbidden")
    expect((await team.write("POST", `/admin/v1/projects/${gw.projectId}/keys`, { environment: "production" })).status).toBe(403)

    // Another environment's request answers like an unknown one.
    const stagingPage = Schema.decodeUnknownSync(A.RequestPage)((await op.call("GET", `/admin/v1/projects/${gw.projectId}/requests?environment=staging`)).body)
    const stagingId = stagingPage.data[0]!.id
    expect((await team.call("GET", `/admin/v1/projects/${gw.projectId}/requests/${stagingId}`)).status).toBe(404)
    expect((await team.call("GET", `/admin/v1/projects/${gw.projectId}/requests/${requestId}`)).status).toBe(200)

    // Revoking the key the team signed in with ends the team's session.
    await op.write("POST", `/admin/v1/keys/${own.keys.find((k) => k.status === "active")!.id}/revoke`)
    expect((await team.call("GET", "/admin/v1/projects")).status).toBe(401)
  })

  it("the request log pages and filters; usage per day sums to spent; a receipt carries its chain links", async () => {
    const op = client(gw.origin)
    await op.signIn(ADMIN_TOKEN)
    const project = (await op.write("POST", "/admin/v1/projects", { name: "paging", budget_credits: 1_000_000, rate_limit: { requests_per_minute: 600 } })).body
    const key = (await op.write("POST", `/admin/v1/projects/${project.id}/keys`, { environment: "production" })).body
    const ai = new OpenAI({ baseURL: gw.url, apiKey: key.secret, maxRetries: 0 })
    const ids: Array<string> = []
    for (let i = 0; i < 5; i++) {
      const c = await ai.chat.completions.create({ model: "auto", messages: [{ role: "user", content: `call ${i}` }], metadata: { idempotency_key: `order-${i}` } })
      ids.push((c as any).governance.request_id)
    }
    const seen: Array<string> = []
    let cursor: string | null = null
    do {
      const r = await op.call("GET", `/admin/v1/projects/${project.id}/requests?limit=2${cursor === null ? "" : `&cursor=${cursor}`}`)
      const page = Schema.decodeUnknownSync(A.RequestPage)(r.body)
      expect(page.data.length).toBeLessThanOrEqual(2)
      seen.push(...page.data.map((d) => d.id))
      cursor = page.next_cursor
    } while (cursor !== null)
    expect(seen).toEqual([...ids].reverse())
    const found = (await op.call("GET", `/admin/v1/projects/${project.id}/requests?q=order-3`)).body
    expect(found.data.map((d: any) => d.id)).toEqual([ids[3]])
    expect((await op.call("GET", `/admin/v1/projects/${project.id}/requests?q=${encodeURIComponent("100%_")}`)).body.data).toEqual([])
    expect((await op.call("GET", `/admin/v1/projects/${project.id}/requests?status=failed`)).body.data).toEqual([])
    expect((await op.call("GET", `/admin/v1/projects/${project.id}/requests?status=bogus`)).status).toBe(400)
    expect((await op.call("GET", `/admin/v1/projects/${project.id}/requests?limit=0`)).status).toBe(400)

    const usage = Schema.decodeUnknownSync(A.DailyUsage)((await op.call("GET", `/admin/v1/projects/${project.id}/usage`)).body)
    expect(usage.receipts).toBe(5)
    expect(usage.receipts_credits).toBe(usage.budget.spent)
    expect(usage.receipts_credits).toBeGreaterThan(0)
    expect(usage.days.reduce((n, d) => n + d.credits, 0)).toBe(usage.budget.spent)
    expect((await op.call("GET", `/admin/v1/projects/${project.id}/usage?period=2026-13`)).status).toBe(400)

    const middle = Schema.decodeUnknownSync(A.ReceiptView)((await op.call("GET", `/admin/v1/projects/${project.id}/requests/${ids[2]}/receipt`)).body)
    expect(middle.receipt.seq).toBe(3)
    expect(middle.previous).toMatchObject({ seq: 2, request_id: ids[1], hash: middle.receipt.prev_hash })
    expect(middle.next).toMatchObject({ seq: 4, request_id: ids[3] })
    const first = Schema.decodeUnknownSync(A.ReceiptView)((await op.call("GET", `/admin/v1/projects/${project.id}/requests/${ids[0]}/receipt`)).body)
    expect(first.previous).toBeNull()
    expect((await op.call("GET", `/admin/v1/projects/${project.id}/requests/req_unknown/receipt`)).body.error.code).toBe("request_not_found")
  })

  it("the page is served from the build with a strict CSP, gzipped when accepted, and nothing else under /dashboard", async () => {
    const page = await fetch(`${gw.origin}/dashboard/`, { headers: { "accept-encoding": "identity" } })
    expect(page.status).toBe(200)
    expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8")
    expect(page.headers.get("content-security-policy")).toBe(
      "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
    expect(page.headers.get("x-frame-options")).toBe("DENY")
    expect(page.headers.get("cache-control")).toBe("no-cache")
    const html = await page.text()
    expect(html).not.toMatch(/<script>|<style>|style=|https?:\/\//)
    const scripts = [...html.matchAll(/(?:src|href)="(\/dashboard\/assets\/[^"]+)"/g)].map((m) => m[1]!)
    expect(scripts.length).toBeGreaterThanOrEqual(2)
    for (const path of scripts) {
      const raw = await fetch(`${gw.origin}${path}`, { headers: { "accept-encoding": "identity" } })
      expect(raw.status).toBe(200)
      expect(raw.headers.get("cache-control")).toContain("immutable")
      expect(raw.headers.get("content-encoding")).toBeNull()
      const zipped = await fetch(`${gw.origin}${path}`, { headers: { "accept-encoding": "gzip" } })
      expect(zipped.headers.get("content-encoding")).toBe("gzip")
      expect(await zipped.text()).toBe(await raw.text())
    }
    const missing = await fetch(`${gw.origin}/dashboard/assets/nope.js`)
    expect(missing.status).toBe(404)
    expect(((await missing.json()) as any).error.code).toBe("unknown_url")
    expect((await fetch(`${gw.origin}/dashboard/../openapi.json`)).status).not.toBe(500)
  })

  it("an expired session is refused; no token, key or session id reaches the log", async () => {
    const short = await startGateway(mockGatewayFile(upstream.url), { sessionTtlMs: 300, accessLog: true })
    const logged: Array<string> = []
    const log = console.log
    const write = process.stdout.write.bind(process.stdout)
    console.log = (...args: Array<unknown>) => void logged.push(args.map(String).join(" "))
    process.stdout.write = ((chunk: string | Uint8Array) => (logged.push(String(chunk)), true)) as typeof process.stdout.write
    try {
      const c = client(short.origin)
      expect((await c.signIn(short.devKey)).status).toBe(201)
      expect((await c.signIn("wrong-" + ADMIN_TOKEN)).status).toBe(401)
      expect((await c.signIn(ADMIN_TOKEN)).status).toBe(201)
      expect((await c.call("GET", "/admin/v1/session")).status).toBe(200)
      console.log = log
      process.stdout.write = write
      expect(logged.some((l) => l.includes('"endpoint":"/admin/v1/session"'))).toBe(true)
      for (const secret of [ADMIN_TOKEN, short.devKey, c.cookie!.split("=")[1]!]) expect(logged.join("\n")).not.toContain(secret)
      await new Promise((r) => setTimeout(r, 400))
      const late = await c.call("GET", "/admin/v1/projects")
      expect(late.status).toBe(401)
      expect(late.body.error.message).toMatch(/expired/)
    } finally {
      console.log = log
      process.stdout.write = write
      await short.close()
    }
  })
})
