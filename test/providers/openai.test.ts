import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeOpenAIProvider } from "../../src/providers/openai.ts"
import { startMockUpstream, type MockUpstream } from "../support/mockUpstream.ts"

const route = { name: "r", provider: "p", upstream_model: "m", max_output_tokens: 100, auto: true } as const

describe("OpenAI-compatible provider (undici)", () => {
  let mock: MockUpstream
  beforeAll(async () => {
    mock = await startMockUpstream()
  })
  afterAll(async () => {
    await mock.close()
  })

  it("a whole completion: the upstream's raw body, parsed, with the route's upstream model and the server's key", async () => {
    process.env.TG_OPENAI_UNIT_KEY = "sk-unit"
    const provider = makeOpenAIProvider("p", { type: "openai", base_url: mock.url, api_key_env: "TG_OPENAI_UNIT_KEY" }, 5_000)
    mock.pushBehavior({ reply: "hi" })
    const reply = await Effect.runPromise(provider.complete(route, { model: "client-model", messages: [{ role: "user", content: "x" }] }))
    expect((reply.json as any).choices[0].message.content).toBe("hi")
    expect(JSON.parse(reply.raw)).toEqual(reply.json)
    const sent = mock.requests.at(-1)!
    expect((sent.body as any).model).toBe("m")
    expect(sent.headers.authorization).toBe("Bearer sk-unit")
  })
})
