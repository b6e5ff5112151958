/**
 * Evidence of a governed request (docs/contract.md §6): GET /v1/requests/{id} shows status and attempts
 * (retries and `auto` fallback included); the receipt has SPEC's fields, its charge can be
 * recomputed from its tokens and the rate card, it chains to the previous receipt, and it verifies
 * offline with the public key served at GET /v1/receipts/keys.
 */
import { generateKeyPairSync } from "node:crypto"
import type OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chargeFor } from "../../spec/pricing.ts"
import { GENESIS_HASH, type Receipt, verifyReceipt } from "../../spec/receipt.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { clientFor, expectNoServerErrors, governanceOf, newProject, type StatusLog } from "./helpers.ts"

const RETRIES = 1
const PRICES = { input: 1_000_000, cached_input: 500_000, output: 2_000_000 } // Credits per 1M tokens
const hello = [{ role: "user" as const, content: "receipt please" }]

interface RequestView {
  id: string
  object: string
  status: string
  route: string
  verification: { state: string; checks: Array<string>; failed_checks: Array<string> }
  credits_reserved: number
  credits_charged: number
  rate_card_version: string
  receipt_id: string | null
  attempts: Array<{ route: string; outcome: string; status?: number }>
  error: unknown
}

describe("request status and receipts", () => {
  let mock: MockUpstream
  let gw: TestGateway
  let client: OpenAI
  let publicKeys: Map<string, string>
  const log: StatusLog = []

  beforeAll(async () => {
    mock = await startMockUpstream()
    gw = await startGateway(
      mockGatewayFile(
        mock.url,
        [
          { name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: false },
          { name: "primary", provider: "mock", upstream_model: "primary-model", max_output_tokens: 256, auto: true },
          { name: "secondary", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: true }
        ],
        { "gpt-test": PRICES, primary: PRICES, secondary: PRICES }
      ),
      { upstreamRetries: RETRIES }
    )
    client = clientFor(gw, gw.devKey, log)
    const keys = (await client.get("/receipts/keys")) as { object: string; data: Array<{ id: string; algorithm: string; public_key: string }> }
    expect(keys.object).toBe("list")
    expect(keys.data.length).toBeGreaterThan(0)
    expect(keys.data.every((k) => k.algorithm === "Ed25519")).toBe(true)
    publicKeys = new Map(keys.data.map((k) => [k.id, k.public_key]))
  })

  afterAll(async () => {
    expectNoServerErrors(log)
    await gw.close()
    await mock.close()
  })

  const statusOf = (id: string) => client.get(`/requests/${id}`) as Promise<RequestView>
  const receiptOf = (id: string, c: OpenAI = client) => c.get(`/requests/${id}/receipt`) as Promise<Receipt>

  it("a completed request: status, attempts and governance agree", async () => {
    const { data, response } = await client.chat.completions.create({ model: "gpt-test", messages: hello }).withResponse()
    const g = governanceOf(data)
    expect(response.headers.get("x-request-id")).toBe(g.request_id)
    expect(g.request_id).toMatch(/^req_/)
    expect(g.receipt_id).toMatch(/^rcpt_/)
    expect(g.rate_card_version).toBe("rc_2020-01")
    expect(g.verification).toMatchObject({ state: "verified", checks: ["route", "schema", "budget"] })
    const status = await statusOf(g.request_id)
    expect(status).toMatchObject({
      id: g.request_id,
      object: "governed_request",
      status: "completed",
      route: "gpt-test",
      credits_charged: g.credits_charged,
      receipt_id: g.receipt_id,
      rate_card_version: g.rate_card_version,
      error: null
    })
    expect(status.verification.state).toBe("verified")
    expect(status.attempts).toHaveLength(1)
    expect(status.attempts[0]).toMatchObject({ route: "gpt-test", outcome: "ok" })
    expect(status.credits_charged).toBeLessThanOrEqual(status.credits_reserved)
  })

  it("a retried request shows both attempts and is charged once", async () => {
    mock.pushBehavior({ status: 500 })
    const calls = mock.calls
    const g = governanceOf(await client.chat.completions.create({ model: "gpt-test", messages: hello }))
    expect(mock.calls - calls).toBe(2)
    const status = await statusOf(g.request_id)
    expect(status.status).toBe("completed")
    expect(status.attempts.map((a) => [a.route, a.outcome, a.status ?? null])).toEqual([
      ["gpt-test", "error", 500],
      ["gpt-test", "ok", null]
    ])
    expect((await receiptOf(g.request_id)).credits_charged).toBe(g.credits_charged)
  })

  it("model auto falls back to the next route when the first is unavailable", async () => {
    mock.behaviorsByModel.set("primary-model", { status: 503 })
    try {
      const g = governanceOf(await client.chat.completions.create({ model: "auto", messages: hello }))
      const status = await statusOf(g.request_id)
      expect(status.route).toBe("secondary")
      expect(status.attempts.map((a) => `${a.route}:${a.outcome}`)).toEqual([
        ...Array(1 + RETRIES).fill("primary:error"),
        "secondary:ok"
      ])
      expect((await receiptOf(g.request_id)).route).toBe("secondary")
    } finally {
      mock.behaviorsByModel.delete("primary-model")
    }
  })

  it("the receipt has SPEC's fields, recomputes from its tokens and verifies with the served public key", async () => {
    mock.pushBehavior({ usage: { prompt_tokens: 100, cached_tokens: 40, completion_tokens: 10, reasoning_tokens: 4 } })
    const g = governanceOf(await client.chat.completions.create({ model: "gpt-test", messages: hello }))
    const receipt = await receiptOf(g.request_id)
    expect(receipt).toMatchObject({
      request_id: g.request_id,
      receipt_id: g.receipt_id,
      status: "completed",
      verification: { state: "verified", checks: ["route", "schema", "budget"] },
      credits_charged: g.credits_charged,
      rate_card_version: g.rate_card_version,
      usage_source: "reported",
      tokens: { input: 60, cached_input: 40, output: 6, reasoning: 4 },
      project_id: gw.projectId,
      environment: "development"
    })
    expect(Number.isInteger(receipt.credits_charged)).toBe(true)
    // 60 × 1 + 40 × 0.5 + 6 × 2 + 4 × 2 (reasoning at the output price) = 100 Credits.
    expect(receipt.credits_charged).toBe(100)
    expect(receipt.credits_charged).toBe(chargeFor(receipt.tokens, PRICES))
    expect(receipt.credits_charged).toBeLessThanOrEqual(receipt.credits_reserved)

    const pem = publicKeys.get(receipt.signing_key_id)
    expect(pem).toBeDefined()
    expect(verifyReceipt(receipt, pem!)).toEqual([])
    // Tampering is detected, and another key does not verify it.
    expect(verifyReceipt({ ...receipt, credits_charged: receipt.credits_charged - 1 }, pem!)).toEqual(["hash", "signature"])
    const stranger = generateKeyPairSync("ed25519").publicKey.export({ type: "spki", format: "pem" }).toString()
    expect(verifyReceipt(receipt, stranger)).toEqual(["signature"])
  })

  it("an upstream that omits usage is charged the counted tokens", async () => {
    mock.pushBehavior({ omitUsage: true })
    const g = governanceOf(await client.chat.completions.create({ model: "gpt-test", messages: hello }))
    const receipt = await receiptOf(g.request_id)
    expect(receipt.usage_source).toBe("counted")
    expect(receipt.tokens.input).toBeGreaterThan(0)
    expect(receipt.tokens.output).toBeGreaterThan(0)
    expect(receipt.credits_charged).toBeGreaterThan(0)
    expect(receipt.credits_charged).toBe(chargeFor(receipt.tokens, PRICES))
    expect(verifyReceipt(receipt, publicKeys.get(receipt.signing_key_id)!)).toEqual([])
  })

  it("an upstream reporting more than was reserved is charged the reservation at most, and flagged unverified", async () => {
    mock.pushBehavior({ usage: { prompt_tokens: 100_000 } })
    const g = governanceOf(await client.chat.completions.create({ model: "gpt-test", messages: hello }))
    const receipt = await receiptOf(g.request_id)
    expect(chargeFor(receipt.tokens, PRICES)).toBeGreaterThan(receipt.credits_reserved)
    expect(receipt.credits_charged).toBe(receipt.credits_reserved)
    expect(g.credits_charged).toBe(receipt.credits_reserved)
    expect(receipt.verification).toMatchObject({ state: "unverified", failed_checks: ["budget"] })
    expect(g.verification.state).toBe("unverified")
    expect(verifyReceipt(receipt, publicKeys.get(receipt.signing_key_id)!)).toEqual([])
  })

  it("a project's receipts form a hash chain from the genesis hash", async () => {
    const p = await newProject(gw)
    const c = clientFor(gw, p.key, log)
    const receipts: Array<Receipt> = []
    for (let i = 0; i < 3; i++) {
      const g = governanceOf(await c.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: `chain ${i}` }] }))
      receipts.push(await receiptOf(g.request_id, c))
    }
    expect(receipts.map((r) => r.seq)).toEqual([1, 2, 3])
    expect(receipts[0]!.prev_hash).toBe(GENESIS_HASH)
    expect(receipts[1]!.prev_hash).toBe(receipts[0]!.hash)
    expect(receipts[2]!.prev_hash).toBe(receipts[1]!.hash)
    for (const r of receipts) {
      expect(r.project_id).toBe(p.projectId)
      expect(verifyReceipt(r, publicKeys.get(r.signing_key_id)!)).toEqual([])
    }
  })
})
