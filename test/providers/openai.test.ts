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

  it("closing a stream mid-body (client hung up) aborts the upstream request without an unhandled 'error' event", async () => {
    const provider = makeOpenAIProvider("p", { type: "openai", base_url: mock.url }, 5_000)
    const uncaught: Array<unknown> = []
    const onUncaught = (e: unknown) => uncaught.push(e)
    process.prependListener("uncaughtException", onUncaught)
    try {
      mock.pushBehavior({ reply: "one two three four five six seven eight nine ten eleven twelve", chunkDelayMs: 40 })
      const firstTwo = await Effect.runPromise(
        Effect.scoped(
          Effect.flatMap(provider.stream(route, { messages: [{ role: "user", content: "x" }], stream: true }), (events) =>
            Effect.promise(async () => {
              const got: Array<string> = []
              for await (const batch of events) {
                got.push(...batch)
                if (got.length >= 2) break // stops reading mid-body; the scope then closes the connection
              }
              return got
            })
          )
        )
      )
      expect(firstTwo.length).toBeGreaterThanOrEqual(2)
      await new Promise((r) => setTimeout(r, 150))
      expect(uncaught).toEqual([])
    } finally {
      process.removeListener("uncaughtException", onUncaught)
    }
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

  it("a slow upstream is a retryable timeout failure", async () => {
    const provider = makeOpenAIProvider("p", { type: "openai", base_url: mock.url, timeout_ms: 100 }, 5_000)
    mock.pushBehavior({ delayMs: 400 })
    const failure = await Effect.runPromise(Effect.flip(provider.complete(route, { messages: [{ role: "user", content: "x" }] })))
    expect(failure.reason).toBe("timeout")
    expect(failure.retryable).toBe(true)
  })
})
