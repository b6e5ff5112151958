/**
 * Issue 19, finding 2: a body with 100k nested arrays in an unknown field failed inside the gateway
 * ("Maximum call stack size exceeded", shown to the client in a 503 route_unavailable), was counted
 * as an upstream failure, and two such calls opened the route's circuit for every project.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { useMockedGateway } from "../support/gateway.ts"

const deep = (levels: number) => `${"[".repeat(levels)}${"]".repeat(levels)}`
const bodyWithDeepField = (levels: number) => `{"model":"auto","messages":[{"role":"user","content":"hi"}],"x_extra":${deep(levels)}}`

describe("JSON depth limit and the breaker (finding 2)", () => {
  const env = useMockedGateway({ beforeAll, afterAll }, undefined, { breakerFailures: 2 })

  const post = async (path: string, body: string, authorization = `Bearer ${env.gateway.devKey}`) => {
    const res = await fetch(`${env.gateway.origin}${path}`, { method: "POST", headers: { authorization, "content-type": "application/json" }, body })
    return { status: res.status, text: await res.text() }
  }

  it("100k nested arrays in an unknown field: 400 invalid_request_error naming the depth, never an internal message, no upstream call", async () => {
    for (const path of ["/v1/chat/completions", "/v1/responses", "/v1/routing/evaluate"]) {
      const calls = env.upstream.calls
      const res = await post(path, path === "/v1/responses" ? `{"model":"auto","input":"hi","x_extra":${deep(100_000)}}` : bodyWithDeepField(100_000))
      expect(res.status, path).toBe(400)
      const error = (JSON.parse(res.text) as { error: Record<string, unknown> }).error
      expect(error).toMatchObject({ type: "invalid_request_error", code: "invalid_request_error", param: null })
      expect(error.message).toMatch(/deeper than 64 levels/)
      expect(res.text).not.toMatch(/call stack|at .*\.ts|Error:/)
      expect(env.upstream.calls).toBe(calls)
    }
  })

  it("the admin API's bodies have the same limit", async () => {
    const res = await post("/admin/v1/projects", `{"name":"deep","budget_credits":1,"rate_limit":{"requests_per_minute":1},"x":${deep(1000)}}`, `Bearer ${env.gateway.adminToken}`)
    expect(res.status).toBe(400)
    expect(res.text).toMatch(/deeper than 64 levels/)
  })

  it("nesting within the limit passes through to the upstream unchanged", async () => {
    const res = await post("/v1/chat/completions", bodyWithDeepField(50))
    expect(res.status).toBe(200)
    expect(JSON.stringify((env.upstream.requests.at(-1)!.body as { x_extra: unknown }).x_extra)).toBe(deep(50))
  })

  it("repeated hostile bodies never open the shared route's circuit: another project's next call is served", async () => {
    for (let i = 0; i < 5; i++) expect((await post("/v1/chat/completions", bodyWithDeepField(100_000))).status).toBe(400)
    const project = await env.gateway.admin("POST", "/admin/v1/projects", { name: "bystander", budget_credits: 1_000_000, rate_limit: { requests_per_minute: 600 } })
    const key = await env.gateway.admin("POST", `/admin/v1/projects/${project.body.id}/keys`, { environment: "development" })
    const res = await post("/v1/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"still up?"}]}`, `Bearer ${key.body.secret}`)
    expect(res.status).toBe(200)
  })
})
