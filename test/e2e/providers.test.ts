import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { GatewayFile } from "../../src/domain/config.ts"
import { startMockUpstream, type MockUpstream } from "../support/mockUpstream.ts"
import { startGateway, type TestGateway } from "../support/gateway.ts"

describe("providers: OpenAI-compatible and Anthropic upstreams, server-held credentials", () => {
  let openaiMock: MockUpstream
  let anthropicMock: MockUpstream
  let gw: TestGateway
  let client: OpenAI

  beforeAll(async () => {
    process.env.TG_TEST_OPENAI_KEY = "sk-server-openai-123"
    process.env.TG_TEST_ANTHROPIC_KEY = "sk-ant-server-456"
    openaiMock = await startMockUpstream()
    anthropicMock = await startMockUpstream()
    const file: GatewayFile = {
      providers: {
        oa: { type: "openai", base_url: openaiMock.url, api_key_env: "TG_TEST_OPENAI_KEY" },
        an: { type: "anthropic", base_url: anthropicMock.url.replace(/\/v1$/, ""), api_key_env: "TG_TEST_ANTHROPIC_KEY" }
      },
      routes: [
        { name: "gpt", provider: "oa", upstream_model: "gpt-upstream", max_output_tokens: 300, auto: true },
        { name: "claude", provider: "an", upstream_model: "claude-upstream", max_output_tokens: 300, auto: true }
      ],
      rate_cards: [{ version: "rc_2020-01", effective_from: "2020-01-01T00:00:00Z", prices: { gpt: { input: 1000, output: 2000 }, claude: { input: 3000, cached_input: 300, output: 15000 } } }]
    }
    gw = await startGateway(file)
    client = new OpenAI({ baseURL: gw.url, apiKey: gw.devKey, maxRetries: 0 })
  })
  afterAll(async () => {
    await gw.close()
    await openaiMock.close()
    await anthropicMock.close()
  })

  it("chat over the Anthropic route: system prompt translated, reply and usage (with cache reads) come back OpenAI-shaped and priced", async () => {
    anthropicMock.pushBehavior({ reply: "Bonjour.", usage: { prompt_tokens: 40, cached_tokens: 30 } })
    const before = anthropicMock.requests.length
    const completion = await client.chat.completions.create({
      model: "claude",
      messages: [
        { role: "system", content: "Reply in French." },
        { role: "user", content: "Hello" }
      ]
    })
    expect(completion.choices[0]!.message.content).toBe("Bonjour.")
    expect(completion.choices[0]!.finish_reason).toBe("stop")
    const sent = anthropicMock.requests[before]!
    expect(sent.path).toBe("/v1/messages")
    expect((sent.body as any).system).toBe("Reply in French.")
    expect((sent.body as any).messages).toEqual([{ role: "user", content: "Hello" }])
    expect(completion.usage!.prompt_tokens_details?.cached_tokens).toBe(30)
    const g = (completion as any).governance
    const receipt: any = await (await fetch(`${gw.url}/requests/${g.request_id}/receipt`, { headers: { authorization: `Bearer ${gw.devKey}` } })).json()
    expect(receipt.tokens.cached_input).toBe(30)
    const t = receipt.tokens
    expect(receipt.credits_charged).toBe(Math.ceil((t.input * 3000 + t.cached_input * 300 + t.output * 15000) / 1_000_000))
  })

  it("streaming over the Anthropic route: text deltas and governance on the last chunk", async () => {
    anthropicMock.pushBehavior({ reply: "streamed from claude" })
    const stream = await client.chat.completions.create({ model: "claude", stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content: "s" }] })
    let text = ""
    let last: any
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? ""
      last = chunk
    }
    expect(text).toBe("streamed from claude")
    expect(last.usage.completion_tokens).toBeGreaterThan(0)
    expect(last.governance.status).toBe("completed")
  })

  it("the Responses API over the Anthropic route", async () => {
    anthropicMock.pushBehavior({ reply: "via responses" })
    const response = await client.responses.create({ model: "claude", input: "hi", instructions: "be brief" })
    expect(response.output_text).toBe("via responses")
  })

  it("upstreams receive the server's credentials and never the client's key", async () => {
    await client.chat.completions.create({ model: "gpt", messages: [{ role: "user", content: "creds" }] })
    const oa = openaiMock.requests.at(-1)!
    expect(oa.headers.authorization).toBe("Bearer sk-server-openai-123")
    const an = anthropicMock.requests.at(-1)!
    expect(an.headers["x-api-key"]).toBe("sk-ant-server-456")
    for (const r of [...openaiMock.requests, ...anthropicMock.requests]) {
      expect(JSON.stringify(r.headers)).not.toContain(gw.devKey)
      expect(JSON.stringify(r.body)).not.toContain(gw.devKey)
      expect(JSON.stringify(r.body)).not.toContain("idempotency_key")
    }
  })

  it("an Anthropic 529 (overloaded) on the named route is retried, then 503 route_unavailable naming the cause; nothing charged", async () => {
    anthropicMock.setBehavior({ status: 529 })
    const calls = anthropicMock.calls
    try {
      const error = await client.chat.completions.create({ model: "claude", messages: [{ role: "user", content: "x" }] }).catch((e) => e)
      expect(error.status).toBe(503)
      expect(error.code).toBe("route_unavailable")
      expect(error.message).toMatch(/529/)
      expect(anthropicMock.calls - calls).toBe(2)
    } finally {
      anthropicMock.setBehavior({})
    }
  })
})
