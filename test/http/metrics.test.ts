import { Option, Redacted } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { endpointLabel } from "../../src/http/observability.ts"
import { startMockUpstream } from "../support/mockUpstream.ts"
import { mockGatewayFile, startGateway, useMockedGateway } from "../support/gateway.ts"

const value = (text: string, metric: string, labels: string): number => {
  const line = text.split("\n").find((l) => l.startsWith(`${metric}{`) && labels.split(",").every((p) => l.includes(p)))
  return line === undefined ? 0 : Number(line.split(" ").at(-1))
}

const METRICS_TOKEN = "scrape-token-for-tests"

describe("GET /metrics (Prometheus text format)", () => {
  const env = useMockedGateway({ beforeAll, afterAll }, undefined, { metricsToken: Option.some(Redacted.make(METRICS_TOKEN)) })
  const scrape = (token = METRICS_TOKEN) => fetch(`${env.gateway.origin}/metrics`, { headers: { authorization: `Bearer ${token}` } })

  it("needs a credential (issue 19, finding 6): none or a wrong one is a JSON 401 that lists no project; the metrics token or the admin token scrape", async () => {
    for (const headers of [{}, { authorization: "Bearer wrong" }, { authorization: `Bearer ${env.gateway.devKey}` }]) {
      const res = await fetch(`${env.gateway.origin}/metrics`, { headers })
      expect(res.status).toBe(401)
      const text = await res.text()
      expect(JSON.parse(text).error).toMatchObject({ code: "invalid_metrics_token", type: "invalid_request_error" })
      expect(text).not.toContain("prj_")
    }
    expect((await scrape()).status).toBe(200)
    expect((await scrape(env.gateway.adminToken)).status).toBe(200)
  })

  it("counts requests by endpoint and status, attempts by route, and credits charged per project", async () => {
    const client = new OpenAI({ baseURL: env.gateway.url, apiKey: env.gateway.devKey, maxRetries: 0 })
    const before = await (await scrape()).text()
    const completion = await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "metrics" }] })
    await client.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "x" }] }).catch(() => undefined)
    await fetch(`${env.gateway.url}/requests/req_unknownxx`, { headers: { authorization: `Bearer ${env.gateway.devKey}` } })
    const res = await scrape()
    expect(res.headers.get("content-type")).toMatch(/text\/plain/)
    const after = await res.text()
    const delta = (metric: string, labels: string) => value(after, metric, labels) - value(before, metric, labels)
    expect(delta("tollgate_http_requests_total", 'endpoint="/v1/chat/completions",status="200"')).toBe(1)
    expect(delta("tollgate_http_requests_total", 'endpoint="/v1/chat/completions",status="503"')).toBe(1)
    expect(delta("tollgate_http_requests_total", 'endpoint="/v1/requests/{id}",status="404"')).toBe(1)
    expect(delta("tollgate_upstream_attempts_total", 'route="gpt-test",outcome="ok"')).toBe(1)
    expect(delta("tollgate_credits_charged_total", `project="${env.gateway.projectId}"`)).toBe((completion as any).governance.credits_charged)
    expect(after).toContain('tollgate_http_request_duration_seconds_bucket{endpoint="/v1/chat/completions",le="+Inf"}')
  })

  it("endpoint labels fold ids so cardinality stays bounded", () => {
    expect(endpointLabel("/v1/requests/req_abc/receipt")).toBe("/v1/requests/{id}/receipt")
    expect(endpointLabel("/v1/requests/req_abc?x=1")).toBe("/v1/requests/{id}")
    expect(endpointLabel("/admin/v1/projects/prj_abc234/keys")).toBe("/admin/v1/projects/{id}/keys")
    expect(endpointLabel("/v1/whatever/123")).toBe("other")
  })
})

describe("access log", () => {
  it("one JSON line per request with the key id and request id, and never the key's secret", async () => {
    const upstream = await startMockUpstream()
    const gw = await startGateway(mockGatewayFile(upstream.url), { accessLog: true })
    const lines: Array<string> = []
    const original = console.log
    console.log = (...args: Array<unknown>) => {
      lines.push(args.map(String).join(" "))
    }
    try {
      const client = new OpenAI({ baseURL: gw.url, apiKey: gw.devKey, maxRetries: 0 })
      const completion = await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "log me" }] })
      const requestId = (completion as any).governance.request_id
      const entry = lines.map((l) => JSON.parse(l)).find((l) => l.annotations?.request_id === requestId)
      expect(entry).toBeDefined()
      expect(entry.message).toBe("request")
      expect(entry.annotations).toMatchObject({ method: "POST", endpoint: "/v1/chat/completions", status: 200, project_id: gw.projectId })
      expect(entry.annotations.key_id).toMatch(/^key_/)
      const secret = gw.devKey.split("_")[3]!
      expect(lines.join("\n")).not.toContain(secret)
    } finally {
      console.log = original
      await gw.close()
      await upstream.close()
    }
  })
})
