import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { GatewayFile } from "../../src/domain/config.ts"
import { startMockUpstream, type MockUpstream } from "../support/mockUpstream.ts"
import { startGateway, type TestGateway } from "../support/gateway.ts"

const OPEN_MS = 400

describe("routing: models, fallback, circuit breaker, evaluate, usage", () => {
  let primary: MockUpstream
  let backup: MockUpstream
  let gw: TestGateway
  let client: OpenAI
  const auth = () => ({ authorization: `Bearer ${gw.devKey}`, "content-type": "application/json" })

  beforeAll(async () => {
    primary = await startMockUpstream()
    backup = await startMockUpstream()
    const file: GatewayFile = {
      providers: { p1: { type: "openai", base_url: primary.url }, p2: { type: "openai", base_url: backup.url } },
      routes: [
        { name: "primary", provider: "p1", upstream_model: "m1", max_output_tokens: 200, auto: true },
        { name: "backup", provider: "p2", upstream_model: "m2", max_output_tokens: 200, auto: true },
        { name: "private", provider: "p2", upstream_model: "m3", max_output_tokens: 200, auto: false, projects: ["prj_someoneelse"] }
      ],
      rate_cards: [
        {
          version: "rc_2020-01",
          effective_from: "2020-01-01T00:00:00Z",
          prices: { primary: { input: 1000, output: 3000 }, backup: { input: 2000, output: 5000 }, private: { input: 1, output: 1 } }
        }
      ]
    }
    gw = await startGateway(file, { breakerFailures: 2, breakerOpenMs: OPEN_MS, upstreamRetries: 0 })
    client = new OpenAI({ baseURL: gw.url, apiKey: gw.devKey, maxRetries: 0 })
  })
  afterAll(async () => {
    await gw.close()
    await primary.close()
    await backup.close()
  })

  it("GET /v1/models lists auto and the routes this project may use, through client.models.list()", async () => {
    const ids: Array<string> = []
    for await (const m of client.models.list()) ids.push(m.id)
    expect(ids).toEqual(["auto", "primary", "backup"])
  })

  it("a route reserved for another project is unknown to this one (503, not retryable)", async () => {
    const res = await fetch(`${gw.url}/chat/completions`, { method: "POST", headers: auth(), body: JSON.stringify({ model: "private", messages: [{ role: "user", content: "x" }] }) })
    expect(res.status).toBe(503)
    expect(res.headers.get("x-should-retry")).toBe("false")
  })

  it("auto falls back to the next route on a 5xx before any token; the attempts are recorded and the served route prices the charge", async () => {
    primary.pushBehavior({ status: 500 })
    const { data } = await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "fallback" }] }).withResponse()
    const g = (data as any).governance
    const status: any = await (await fetch(`${gw.url}/requests/${g.request_id}`, { headers: auth() })).json()
    expect(status.route).toBe("backup")
    expect(status.attempts.map((a: any) => [a.route, a.outcome])).toEqual([["primary", "error"], ["backup", "ok"]])
    const receipt: any = await (await fetch(`${gw.url}/requests/${g.request_id}/receipt`, { headers: auth() })).json()
    expect(receipt.route).toBe("backup")
    // Backup prices: 2000 input / 5000 output per 1M tokens.
    const t = receipt.tokens
    expect(receipt.credits_charged).toBe(Math.ceil((t.input * 2000 + t.output * 5000) / 1_000_000))
  })

  it("breaker: consecutive failures open the primary; auto skips it; after the open window one probe closes it again", async () => {
    primary.reset()
    primary.setBehavior({ status: 503 })
    // Explicit calls fail: 2 failures open the circuit.
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${gw.url}/chat/completions`, { method: "POST", headers: auth(), body: JSON.stringify({ model: "primary", messages: [{ role: "user", content: "x" }] }) })
      expect(res.status).toBe(503)
    }
    const callsWhenOpen = primary.calls
    const open = await fetch(`${gw.url}/chat/completions`, { method: "POST", headers: auth(), body: JSON.stringify({ model: "primary", messages: [{ role: "user", content: "x" }] }) })
    expect(open.status).toBe(503)
    expect(((await open.json()) as any).error.message).toMatch(/circuit open.*auto/)
    expect(primary.calls).toBe(callsWhenOpen)
    // auto goes straight to the backup while the circuit is open; models no longer lists primary.
    const viaAuto = await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "x" }] })
    expect(viaAuto.model).toBe("m2")
    expect(primary.calls).toBe(callsWhenOpen)
    const ids: Array<string> = []
    for await (const m of client.models.list()) ids.push(m.id)
    expect(ids).not.toContain("primary")
    // Half-open: after the window the next request is the probe; success closes the circuit.
    primary.setBehavior({})
    await new Promise((r) => setTimeout(r, OPEN_MS + 50))
    const probe = await client.chat.completions.create({ model: "primary", messages: [{ role: "user", content: "probe" }] })
    expect(probe.model).toBe("m1")
    expect(primary.calls).toBe(callsWhenOpen + 1)
    const after = await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "x" }] })
    expect(after.model).toBe("m1")
  })

  it("POST /v1/routing/evaluate previews route and cost and changes nothing in the ledger", async () => {
    const snapshot = () => ({
      windows: gw.query("SELECT * FROM budget_windows ORDER BY project_id, period"),
      reservations: gw.query("SELECT COUNT(*) AS n FROM reservations")[0],
      receipts: gw.query("SELECT COUNT(*) AS n FROM receipts")[0],
      requests: gw.query("SELECT COUNT(*) AS n FROM requests")[0]
    })
    const before = snapshot()
    const calls = primary.calls + backup.calls
    const res = await fetch(`${gw.url}/routing/evaluate`, {
      method: "POST",
      headers: auth(),
      body: JSON.stringify({ model: "auto", max_tokens: 100, messages: [{ role: "user", content: "How much would this cost?" }] })
    })
    expect(res.status).toBe(200)
    const evaluation: any = await res.json()
    expect(evaluation.route).toBe("primary")
    expect(evaluation.candidates).toEqual(["primary", "backup"])
    expect(evaluation.rate_card_version).toBe("rc_2020-01")
    expect(evaluation.output_cap).toBe(100)
    // Worst case covers the most expensive candidate: backup at 2000/5000.
    const n = evaluation.estimated_input_tokens
    expect(evaluation.estimated_credits.worst_case).toBe(Math.ceil((n * 2000 + 100 * 5000) / 1_000_000))
    expect(evaluation.budget.would_pass).toBe(true)
    expect(evaluation.rate_limit.would_pass).toBe(true)
    expect(evaluation.executed).toBe(false)
    expect(snapshot()).toEqual(before)
    expect(primary.calls + backup.calls).toBe(calls)
  })

  it("GET /v1/usage equals the sum of the window's receipts, per model and in total", async () => {
    const usage: any = await (await fetch(`${gw.url}/usage`, { headers: auth() })).json()
    const rows = gw.query<{ body: string }>("SELECT body FROM receipts WHERE project_id = ? AND period = ?", gw.projectId, usage.period)
    const receipts = rows.map((r) => JSON.parse(r.body))
    expect(receipts.length).toBeGreaterThan(0)
    expect(usage.requests).toBe(receipts.length)
    expect(usage.credits).toBe(receipts.reduce((n, r) => n + r.credits_charged, 0))
    expect(usage.budget.spent).toBe(usage.credits)
    for (const cls of ["input", "cached_input", "output", "reasoning"]) {
      expect(usage.tokens[cls]).toBe(receipts.reduce((n, r) => n + r.tokens[cls], 0))
    }
    for (const m of usage.by_model) {
      const mine = receipts.filter((r) => r.route === m.model)
      expect(m.requests).toBe(mine.length)
      expect(m.credits).toBe(mine.reduce((n, r) => n + r.credits_charged, 0))
    }
    const other: any = await (await fetch(`${gw.url}/usage?period=2019-01`, { headers: auth() })).json()
    expect(other.requests).toBe(0)
    expect(other.credits).toBe(0)
    const bad = await fetch(`${gw.url}/usage?period=2019-13`, { headers: auth() })
    expect(bad.status).toBe(400)
  })
})
