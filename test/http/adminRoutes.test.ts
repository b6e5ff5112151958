/**
 * The admin groups HttpApiBuilder serves (src/http/adminRoutes.ts), through the running server: a
 * write's body is read within the body limits (413 / 400 before JSON.parse) and decoded by the
 * endpoint's payload schema, so a refused field is a 400 naming it; the AdminAuth middleware keeps
 * the admin check's 401 and 403s; every admin answer says `cache-control: no-store`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ADMIN_TOKEN, useMockedGateway } from "../support/gateway.ts"

describe("the admin groups on the wire", () => {
  const env = useMockedGateway({ beforeAll, afterAll })
  const call = async (method: string, path: string, body: string | undefined, headers: Record<string, string> = { authorization: `Bearer ${ADMIN_TOKEN}` }) => {
    const res = await fetch(`${env.gateway.origin}${path}`, { method, headers: { "content-type": "application/json", ...headers }, ...(body === undefined ? {} : { body }) })
    return { status: res.status, headers: res.headers, body: (await res.json()) as { error?: { message: string; type: string; code: string | null; param: string | null } } & Record<string, unknown> }
  }
  const project = JSON.stringify({ name: "p", budget_credits: 100, rate_limit: { requests_per_minute: 60 } })

  it("a refused field of a write is a 400 invalid_request_error naming its path", async () => {
    const cases: Array<[string, string, unknown, string]> = [
      ["POST", "/admin/v1/projects", { name: "p", budget_credits: "lots", rate_limit: { requests_per_minute: 60 } }, "budget_credits"],
      ["POST", "/admin/v1/projects", { budget_credits: 1, rate_limit: { requests_per_minute: 60 } }, "name"],
      ["POST", "/admin/v1/projects", { name: "p", budget_credits: 1, rate_limit: { requests_per_minute: 60, burst: "x" } }, "rate_limit.burst"],
      ["PATCH", `/admin/v1/projects/${env.gateway.projectId}`, { rate_limit: { requests_per_minute: 1.5 } }, "rate_limit.requests_per_minute"],
      ["POST", `/admin/v1/projects/${env.gateway.projectId}/keys`, { environment: "moon" }, "environment"],
      ["POST", "/admin/v1/keys/key_nope/rotate", { grace_seconds: "soon" }, "grace_seconds"],
      ["POST", "/admin/v1/session", { token: 7 }, "token"]
    ]
    for (const [method, path, body, param] of cases) {
      const res = await call(method, path, JSON.stringify(body))
      expect([path, res.status, res.body.error?.type, res.body.error?.param]).toEqual([path, 400, "invalid_request_error", param])
      expect(JSON.stringify(res.body)).not.toContain("HttpApiDecodeError")
    }
  })

  it("the services' own checks still answer after decoding (an empty name, a negative budget)", async () => {
    const empty = await call("POST", "/admin/v1/projects", JSON.stringify({ name: "", budget_credits: 1, rate_limit: { requests_per_minute: 60 } }))
    expect([empty.status, empty.body.error?.message, empty.body.error?.param]).toEqual([400, "name must be a non-empty string.", "name"])
    const negative = await call("POST", "/admin/v1/projects", JSON.stringify({ name: "p", budget_credits: -1, rate_limit: { requests_per_minute: 60 } }))
    expect([negative.status, negative.body.error?.param]).toEqual([400, "budget_credits"])
  })

  it("a body is refused before it is parsed: not JSON, too deep, too large", async () => {
    const notJson = await call("POST", "/admin/v1/projects", "{name:")
    expect([notJson.status, notJson.body.error?.param]).toEqual([400, null])
    expect(notJson.body.error?.message).toContain("could not parse the JSON body")
    const deep = await call("POST", "/admin/v1/projects", "[".repeat(200) + "]".repeat(200))
    expect(deep.status).toBe(400)
    expect(deep.body.error?.message).toContain("deeper than")
    const large = await call("POST", "/admin/v1/projects", JSON.stringify({ name: "x".repeat(9 * 1024 * 1024), budget_credits: 1, rate_limit: { requests_per_minute: 60 } }))
    expect(large.status).toBe(413)
  })

  it("a created project and an issued key are encoded by their schemas, 201, never cached", async () => {
    const created = await call("POST", "/admin/v1/projects", project)
    expect(created.status).toBe(201)
    expect(created.headers.get("cache-control")).toBe("no-store")
    expect(Object.keys(created.body)).toEqual(["id", "object", "organization", "name", "budget_credits", "rate_limit", "alert_thresholds_percent", "budget_period", "time_zone", "created_at", "updated_at", "current_window", "keys", "keys_has_more"])
    const key = await call("POST", `/admin/v1/projects/${String(created.body.id)}/keys`, JSON.stringify({ environment: "staging" }))
    expect([key.status, key.body.object, key.body.environment]).toEqual([201, "api_key", "staging"])
    const rotated = await call("POST", `/admin/v1/keys/${String(key.body.id)}/rotate`, undefined)
    expect([rotated.status, rotated.body.replaces]).toEqual([201, key.body.id])
  })

  it("the middleware keeps the admin check's answers: no token 401, a cookie write without CSRF 403", async () => {
    const none = await call("GET", "/admin/v1/projects", undefined, {})
    expect([none.status, none.body.error?.message]).toEqual([401, "Missing or wrong admin token. Send TOLLGATE_ADMIN_TOKEN as 'Authorization: Bearer <token>'."])
    expect(none.headers.get("cache-control")).toBe("no-store")
    const signIn = await fetch(`${env.gateway.origin}/admin/v1/session`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ token: ADMIN_TOKEN }) })
    const cookie = (signIn.headers.get("set-cookie") ?? "").split(";")[0]!
    const noCsrf = await call("POST", "/admin/v1/projects", project, { cookie })
    expect([noCsrf.status, noCsrf.body.error?.code]).toEqual([403, "invalid_csrf_token"])
  })

  it("a read's query is decoded by its schema: a refused filter is a 400 naming it; the handler's own checks stay", async () => {
    const base = `/admin/v1/projects/${env.gateway.projectId}/requests`
    for (const [query, param] of [["status=bogus", "status"], ["environment=moon", "environment"], ["limit=0", "limit"]] as const) {
      const res = await call("GET", `${base}?${query}`, undefined)
      expect([query, res.status, res.body.error?.type, res.body.error?.param]).toEqual([query, 400, "invalid_request_error", param])
    }
    const page = await call("GET", `${base}?status=completed&limit=5`, undefined)
    expect([page.status, page.body.object]).toEqual([200, "list"])
  })
})
