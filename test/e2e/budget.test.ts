/**
 * The budget invariant (docs/contract.md §4) under concurrency, end to end: many overlapping requests
 * against a small cap. At every sampled instant spent + reserved ≤ cap; afterwards spent ≤ cap,
 * nothing is left reserved, the receipts sum to what was spent, and every rejection is a 402.
 */
import { APIError } from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { chargeFor } from "../../spec/pricing.ts"
import { clientFor, dbAll, dbGet, expectApiError, expectNoServerErrors, governanceOf, ledgerState, newProject, type StatusLog } from "./helpers.ts"

const PRICES = { input: 100_000, output: 1_000_000 } // 0.1 Credit per input token, 1 per output token
const ROUTE_LIMIT = 64

interface Sample {
  spent: number
  reserved: number
}

describe("budget under concurrency", () => {
  let mock: MockUpstream
  let gw: TestGateway
  const log: StatusLog = []

  beforeAll(async () => {
    // Every upstream call is a little slow so that requests overlap and holds coexist.
    mock = await startMockUpstream({ behavior: { delayMs: 60, chunkDelayMs: 5 } })
    gw = await startGateway(
      mockGatewayFile(mock.url, [{ name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: ROUTE_LIMIT, auto: true }], {
        "gpt-test": PRICES
      })
    )
  })

  afterAll(async () => {
    expectNoServerErrors(log)
    await gw.close()
    await mock.close()
  })

  /** Fire `run` n times at once while sampling the project's window; returns outcomes and samples. */
  const burst = async <T>(projectId: string, n: number, run: (i: number) => Promise<T>) => {
    const samples: Array<Sample> = []
    const sample = () => {
      const s = ledgerState(gw, projectId)
      samples.push({ spent: s.spent, reserved: s.reserved })
    }
    const timer = setInterval(sample, 2)
    const settled = await Promise.allSettled(Array.from({ length: n }, (_, i) => run(i)))
    clearInterval(timer)
    sample()
    return { settled, samples }
  }

  const checkOutcome = <T>(projectId: string, cap: number, settled: Array<PromiseSettledResult<T>>, samples: Array<Sample>, chargeOf: (v: T) => number) => {
    for (const s of samples) {
      expect(s.spent + s.reserved).toBeLessThanOrEqual(cap)
      expect(s.reserved).toBeGreaterThanOrEqual(0)
    }
    // Holds live at least as long as the upstream delay, so the sampler saw some: the check above is not vacuous.
    expect(samples.some((s) => s.reserved > 0)).toBe(true)
    const ok = settled.filter((s): s is PromiseFulfilledResult<T> => s.status === "fulfilled")
    const failed = settled.filter((s): s is PromiseRejectedResult => s.status === "rejected")
    for (const f of failed) {
      expect(f.reason).toBeInstanceOf(APIError)
      expect((f.reason as APIError).status).toBe(402)
      expect((f.reason as APIError).code).toBe("budget_exceeded")
    }
    // The cap must have bitten, and some requests must have been served: otherwise this proves nothing.
    expect(ok.length).toBeGreaterThan(0)
    expect(failed.length).toBeGreaterThan(0)

    const state = ledgerState(gw, projectId)
    expect(state.cap).toBe(cap)
    expect(state.spent).toBeLessThanOrEqual(cap)
    expect(state.reserved).toBe(0)
    expect(state.receiptSum).toBe(state.spent)
    expect(state.receipts).toBe(ok.length)
    expect(ok.reduce((sum, s) => sum + chargeOf(s.value), 0)).toBe(state.spent)
    expect(state.reservations.held ?? 0).toBe(0)
    expect(state.reservations.settled).toBe(ok.length)
    // Rejected requests never reserved anything: 402 is decided before the hold, or the hold is refused.
    expect(state.requests.completed).toBe(ok.length)

    // Each receipt: charge recomputable from its tokens, and never above its reservation.
    const receipts = dbAll<{ body: string }>(gw, "SELECT body FROM receipts WHERE project_id = ?", projectId).map(
      (r) => JSON.parse(r.body) as { credits_charged: number; credits_reserved: number; tokens: Parameters<typeof chargeFor>[0]; usage_source: string }
    )
    for (const r of receipts) {
      expect(r.credits_charged).toBeGreaterThan(0)
      expect(r.credits_charged).toBeLessThanOrEqual(r.credits_reserved)
      expect(r.credits_charged).toBe(chargeFor(r.tokens, PRICES))
    }
    return state
  }

  it("with max_tokens: spent never exceeds the cap, spent + reserved ≤ cap throughout, receipts sum to spent", async () => {
    const cap = 200
    const p = await newProject(gw, { budget: cap })
    const client = clientFor(gw, p.key, log)
    const { settled, samples } = await burst(p.projectId, 16, (i) =>
      client.chat.completions.create({ model: "auto", max_tokens: 40, messages: [{ role: "user", content: `budget request ${i}` }] })
    )
    checkOutcome(p.projectId, cap, settled, samples, (v) => governanceOf(v).credits_charged)
    // The admin view reports the same window.
    const view = await gw.admin("GET", `/admin/v1/projects/${p.projectId}`)
    const state = ledgerState(gw, p.projectId)
    expect(view.body.current_window).toMatchObject({ budget_credits: cap, spent: state.spent, reserved: 0, remaining: cap - state.spent })
  })

  it("without max_tokens: the gateway caps the output to what still fits, and never overspends", async () => {
    const cap = 150
    const p = await newProject(gw, { budget: cap })
    const client = clientFor(gw, p.key, log)
    const first = mock.requests.length
    const { settled, samples } = await burst(p.projectId, 12, (i) =>
      client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: `uncapped request ${i}` }] })
    )
    checkOutcome(p.projectId, cap, settled, samples, (v) => governanceOf(v).credits_charged)
    const caps = mock.requests.slice(first).map((r) => (r.body as { max_tokens?: number }).max_tokens)
    expect(caps.length).toBeGreaterThan(0)
    for (const c of caps) {
      expect(c).toBeGreaterThanOrEqual(1)
      expect(c).toBeLessThanOrEqual(ROUTE_LIMIT)
    }
  })

  it("streams under the same cap keep the same invariant", async () => {
    const cap = 180
    const p = await newProject(gw, { budget: cap })
    const client = clientFor(gw, p.key, log)
    const { settled, samples } = await burst(p.projectId, 12, async (i) => {
      const stream = await client.chat.completions.create({
        model: "auto",
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: 40,
        messages: [{ role: "user", content: `streamed budget ${i}` }]
      })
      let last: unknown
      for await (const chunk of stream) last = chunk
      return last
    })
    checkOutcome(p.projectId, cap, settled, samples, (v) => governanceOf(v).credits_charged)
  })

  it("one client cap per call (issue 38, finding 5): X-Max-Credits and a different metadata.max_credits are a 400 naming the field, nothing held or charged; the same cap in both bounds the reservation and the charge", async () => {
    const p = await newProject(gw, { budget: 10_000 })
    const client = clientFor(gw, p.key, log)
    const story = [{ role: "user" as const, content: "tell me a long story" }]
    const calls = mock.calls
    for (const [header, metadata] of [["20", "100000"], ["100000", "20"]] as const) {
      await expectApiError(client.chat.completions.create({ model: "auto", messages: story, metadata: { max_credits: metadata } }, { headers: { "X-Max-Credits": header } }), {
        status: 400,
        code: "invalid_request_error",
        param: "metadata.max_credits",
        message: /X-Max-Credits.*metadata\.max_credits/
      })
    }
    // The quote applies the same rule as the call.
    const quoted = await fetch(`${gw.url}/routing/evaluate`, {
      method: "POST",
      headers: { authorization: `Bearer ${p.key}`, "content-type": "application/json", "x-max-credits": "20" },
      body: JSON.stringify({ model: "auto", messages: story, metadata: { max_credits: "100000" } })
    })
    expect(quoted.status).toBe(400)
    expect(mock.calls).toBe(calls)
    expect(ledgerState(gw, p.projectId)).toMatchObject({ spent: 0, reserved: 0, receipts: 0, reservations: {}, requests: {} })

    const cap = 20
    const served = await client.chat.completions.create({ model: "auto", messages: story, metadata: { max_credits: String(cap) } }, { headers: { "X-Max-Credits": String(cap) } })
    const g = governanceOf(served)
    const reserved = dbGet<{ amount: number }>(gw, "SELECT amount FROM reservations WHERE request_id = ?", g.request_id)!.amount
    expect(reserved).toBeLessThanOrEqual(cap)
    expect(g.credits_charged).toBeGreaterThan(0)
    expect(g.credits_charged).toBeLessThanOrEqual(reserved)
  })
})
