/**
 * An end user's own upstream limits (DESIGN §9: an override is `{budget_credits, rate_limit?}`;
 * migration 0022) through the official `openai` client against a started gateway and a real HTTP mock
 * upstream: `PUT /admin/v1/projects/{id}/end_users/{user}` with `rate_limit: {max_concurrent,
 * tokens_per_minute}` refuses that end user's calls with a 429 naming `end_user.rate_limit.*` while its
 * key, its project and the other end users have room — from the next call on, the keys' cached rows
 * dropped by the write — and a PUT without `rate_limit` removes them. Runs on SQLite and, in the e2e-pg
 * project, on PostgreSQL + Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { clientFor, expectApiError, newProject } from "./helpers.ts"

const hello = [{ role: "user" as const, content: "Say hello." }]

const untilUpstreamSaw = async (mock: MockUpstream, n: number): Promise<void> => {
  for (let i = 0; i < 500 && mock.calls < n; i++) await new Promise((r) => setTimeout(r, 10))
  expect(mock.calls).toBeGreaterThanOrEqual(n)
}

describe("an end user's own upstream limits", () => {
  let mock: MockUpstream
  let gw: TestGateway

  beforeAll(async () => {
    mock = await startMockUpstream()
    mock.behaviorsByModel.set("slow-model", { delayMs: 600 })
    gw = await startGateway(
      mockGatewayFile(mock.url, [
        { name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: true },
        { name: "gpt-slow", provider: "mock", upstream_model: "slow-model", max_output_tokens: 256, auto: false }
      ])
    )
  })
  afterAll(async () => {
    await gw?.close()
    await mock?.close()
  })

  it("max_concurrent and tokens_per_minute refuse that end user (param end_user.rate_limit.*) while the others have room; a PUT without rate_limit removes them", async () => {
    const p = await newProject(gw, { name: "end-user-limits", budget: 10_000_000 })
    const client = clientFor(gw, p.key)
    // The key has served a call before the limits are set: its cached row must not hide them.
    await client.chat.completions.create({ model: "gpt-test", messages: hello, user: "zed" })

    const put = await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/zed`, { budget_credits: null, rate_limit: { max_concurrent: 1, tokens_per_minute: 250 } })
    expect([put.status, put.body.rate_limit]).toEqual([200, { max_concurrent: 1, tokens_per_minute: 250 }])
    expect((await gw.admin("GET", `/admin/v1/projects/${p.projectId}/end_users/zed`)).body.rate_limit).toEqual({ max_concurrent: 1, tokens_per_minute: 250 })

    const before = mock.calls
    const first = client.chat.completions.create({ model: "gpt-slow", messages: hello, max_tokens: 20, user: "zed" })
    await untilUpstreamSaw(mock, before + 1)
    await expectApiError(client.chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 20, user: "zed" }), {
      status: 429,
      code: "rate_limited",
      param: "end_user.rate_limit.max_concurrent",
      message: /1 calls in flight reached for this end user/
    })
    // Another end user, and a call naming none, of the same key: not limited by zed's.
    await client.chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 20, user: "amy" })
    await client.chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 20 })
    await first
    const refused = await expectApiError(client.chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 240, user: "zed" }), {
      status: 429,
      code: "rate_limited",
      param: "end_user.rate_limit.tokens_per_minute"
    })
    expect(refused.headers?.get("x-ratelimit-limit-tokens")).toBe("250")

    // Bad limits: a 400 naming the field, nothing written.
    for (const bad of [{ max_concurrent: 0 }, { tokens_per_minute: -5 }, { max_concurrent: 1.5 }]) {
      const r = await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/zed`, { budget_credits: null, rate_limit: bad })
      expect([r.status, r.body.error?.param]).toEqual([400, `rate_limit.${Object.keys(bad)[0]}`])
    }

    // Without rate_limit the override has none: zed's calls run again, two at once.
    const cleared = await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/zed`, { budget_credits: null })
    expect([cleared.status, cleared.body.rate_limit]).toEqual([200, undefined])
    const after = mock.calls
    const two = [0, 1].map(() => client.chat.completions.create({ model: "gpt-slow", messages: hello, max_tokens: 20, user: "zed" }))
    await untilUpstreamSaw(mock, after + 2)
    expect(await Promise.all(two)).toHaveLength(2)
  })
})
