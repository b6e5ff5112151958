import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { useMockedGateway } from "../support/gateway.ts"

describe("smoke: the governed path end to end", () => {
  const env = useMockedGateway({ beforeAll, afterAll })
  let client: OpenAI
  beforeAll(() => {
    client = new OpenAI({ baseURL: env.gateway.url, apiKey: env.gateway.devKey, maxRetries: 0 })
  })

  it("is live and ready: the store worker is up", async () => {
    const live = await fetch(`${env.gateway.origin}/healthz`)
    expect([live.status, await live.json()]).toEqual([200, { status: "ok" }])
    const ready = await fetch(`${env.gateway.origin}/readyz`)
    // Shared through Redis, or through PostgreSQL when the store is PostgreSQL.
    const shared = process.env.TOLLGATE_TEST_REDIS === "1" || process.env.TOLLGATE_TEST_STORE === "pg"
    expect([ready.status, await ready.json()]).toEqual([200, { status: "ready", store: { status: "ok" }, rate_limit: shared ? { mode: "shared", status: "ok" } : { mode: "local" } }])
  })

  it("non-streaming completion carries governance evidence and a receipt", async () => {
    const { data, response } = await client.chat.completions
      .create({ model: "auto", messages: [{ role: "user", content: "hello" }] })
      .withResponse()
    const governance = (data as unknown as { governance: any }).governance
    expect(response.headers.get("x-request-id")).toBe(governance.request_id)
    expect(governance.status).toBe("completed")
    expect(governance.verification.state).toBe("verified")
    expect(governance.credits_charged).toBeGreaterThan(0)
    const receipt: any = await (await fetch(`${env.gateway.url}/requests/${governance.request_id}/receipt`, { headers: { authorization: `Bearer ${env.gateway.devKey}` } })).json()
    expect(receipt.receipt_id).toBe(governance.receipt_id)
    expect(receipt.credits_charged).toBe(governance.credits_charged)
  })

  it("streaming completion puts governance on the last chunk", async () => {
    const stream = await client.chat.completions.create({
      model: "gpt-test",
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "stream please" }]
    })
    const chunks: Array<any> = []
    for await (const c of stream) chunks.push(c)
    const last = chunks.at(-1)
    expect(last.usage.completion_tokens).toBeGreaterThan(0)
    expect(last.governance.status).toBe("completed")
    expect(chunks.slice(0, -1).every((c) => c.governance === undefined)).toBe(true)
  })
})
