/**
 * Issue 41 item 3 through the official `openai` client against a started gateway and a real HTTP mock
 * upstream: a project's `rate_limit.tokens_per_minute` (its estimate taken at admission, corrected at
 * settlement; a 429 naming the limit with OpenAI's token headers, which successful answers carry too)
 * and `rate_limit.max_concurrent` (a 429 while N calls are in flight on a slow upstream, the slot back
 * once one ends); the admin fields' bounds (400 naming the field); an end user's own limits (migration
 * 0022: a 429 naming end_user.rate_limit.* while its key, its project and other end users have room).
 */
import { execFile } from "node:child_process"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, mockGatewayFile, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { clientFor, expectApiError, newKey, newProject } from "./helpers.ts"

const hello = [{ role: "user" as const, content: "Say hello." }]

/** Resolves once the mock upstream has received `n` requests in all (the calls are in flight there). */
const untilUpstreamSaw = async (mock: MockUpstream, n: number): Promise<void> => {
  for (let i = 0; i < 500 && mock.calls < n; i++) await new Promise((r) => setTimeout(r, 10))
  expect(mock.calls).toBeGreaterThanOrEqual(n)
}

describe("upstream limits: tokens per minute and calls in flight (one instance)", () => {
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

  const project = async (rate_limit: Record<string, unknown>) => {
    const created = await gw.admin("POST", "/admin/v1/projects", { name: "limits", budget_credits: 10_000_000, rate_limit: { requests_per_minute: 6000, ...rate_limit } })
    expect(created.status).toBe(201)
    const key = await newKey(gw, created.body.id)
    return { id: created.body.id as string, body: created.body, client: clientFor(gw, key.secret) }
  }

  it("tokens_per_minute: the estimate is taken while the call is in flight (a 429 naming the limit, with the token headers), and the settlement gives back what the call did not use", async () => {
    const p = await project({ tokens_per_minute: 300 })
    expect(p.body.rate_limit).toMatchObject({ tokens_per_minute: 300 })
    // An estimate of its prompt + 200: taken at admission, so a second one cannot fit meanwhile.
    const first = p.client.chat.completions.create({ model: "gpt-slow", messages: hello, max_tokens: 200 }).withResponse()
    await untilUpstreamSaw(mock, mock.calls + 1)
    const refused = await expectApiError(p.client.chat.completions.create({ model: "gpt-slow", messages: hello, max_tokens: 200 }), {
      status: 429,
      code: "rate_limited",
      type: "rate_limit_error",
      param: "project.rate_limit.tokens_per_minute",
      message: /300 tokens per minute/
    })
    expect(refused.headers?.get("x-ratelimit-limit-tokens")).toBe("300")
    const left = Number(refused.headers?.get("x-ratelimit-remaining-tokens"))
    expect(left).toBeLessThan(200)
    expect(refused.headers?.get("x-ratelimit-reset-tokens")).toMatch(/^(\d+ms|\d+s|\d+m\d+s)$/)
    expect(Number(refused.headers?.get("retry-after"))).toBeGreaterThanOrEqual(1)
    const ok = await first
    expect(ok.response.headers.get("x-ratelimit-limit-tokens")).toBe("300")
    expect(ok.response.headers.get("x-ratelimit-limit-requests")).toBe("6000")
    const used = ok.data.usage!.prompt_tokens + ok.data.usage!.completion_tokens
    expect(used).toBeLessThan(100)
    // Corrected to what it used: the next one of the same size fits at once (about 300 − used left).
    const again = await p.client.chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 200 }).withResponse()
    expect(again.response.status).toBe(200)
    expect(Number(again.response.headers.get("x-ratelimit-remaining-tokens"))).toBeLessThan(100)
  })

  it("tokens_per_minute: a request whose estimate exceeds the whole limit is refused, whatever is left, and told not to retry", async () => {
    const p = await project({ tokens_per_minute: 100 })
    const never = await expectApiError(p.client.chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 200 }), {
      status: 429,
      code: "rate_limited",
      param: "project.rate_limit.tokens_per_minute",
      message: /exceed the 100 tokens per minute/
    })
    // Waiting cannot help: an SDK must not retry it (the OpenAI SDKs honour x-should-retry).
    expect([never.headers?.get("x-should-retry"), never.headers?.get("retry-after")]).toEqual(["false", null])
    const small = await p.client.chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 20 }).withResponse()
    expect(small.response.headers.get("x-ratelimit-limit-tokens")).toBe("100")
  })

  it("max_concurrent: a 429 naming the limit while N calls are in flight, and the slot back once one ends", async () => {
    const p = await project({ max_concurrent: 2 })
    const before = mock.calls
    const inFlight = [0, 1].map(() => p.client.chat.completions.create({ model: "gpt-slow", messages: hello }))
    await untilUpstreamSaw(mock, before + 2)
    await expectApiError(p.client.chat.completions.create({ model: "gpt-test", messages: hello }), {
      status: 429,
      code: "rate_limited",
      param: "project.rate_limit.max_concurrent",
      message: /2 calls in flight/
    })
    expect(mock.calls).toBe(before + 2)
    await Promise.all(inFlight)
    // Both ended: both slots back, two at once again.
    const after = await Promise.all([0, 1].map(() => p.client.chat.completions.create({ model: "gpt-test", messages: hello })))
    expect(after).toHaveLength(2)
  })

  it("a key's own limits: its max_concurrent and tokens_per_minute refuse it (param key.rate_limit.*) while its project and a sibling key have room; a rotation keeps them", async () => {
    const p = await project({})
    const limited = await gw.admin("POST", `/admin/v1/projects/${p.id}/keys`, { environment: "development", rate_limit: { max_concurrent: 1, tokens_per_minute: 250 } })
    expect(limited.status).toBe(201)
    expect(limited.body.rate_limit).toEqual({ max_concurrent: 1, tokens_per_minute: 250 })
    const own = clientFor(gw, limited.body.secret)
    const before = mock.calls
    const first = own.chat.completions.create({ model: "gpt-slow", messages: hello, max_tokens: 20 })
    await untilUpstreamSaw(mock, before + 1)
    await expectApiError(own.chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 20 }), { status: 429, code: "rate_limited", param: "key.rate_limit.max_concurrent" })
    // The sibling key of the same project is not limited by it.
    await p.client.chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 20 })
    await first
    await expectApiError(own.chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 240 }), { status: 429, code: "rate_limited", param: "key.rate_limit.tokens_per_minute" })
    const rotated = await gw.admin("POST", `/admin/v1/keys/${limited.body.id}/rotate`, { grace_seconds: 0 })
    expect(rotated.status).toBe(201)
    expect(rotated.body.rate_limit).toEqual({ max_concurrent: 1, tokens_per_minute: 250 })
    for (const bad of [{ max_concurrent: 0 }, { tokens_per_minute: -5 }, { tokens_per_minute: 0.5 }]) {
      const res = await gw.admin("POST", `/admin/v1/projects/${p.id}/keys`, { environment: "development", rate_limit: bad })
      expect(res.status).toBe(400)
      expect(res.body.error.param).toBe(`rate_limit.${Object.keys(bad)[0]}`)
      const patch = await gw.admin("PATCH", `/admin/v1/keys/${rotated.body.id}`, { rate_limit: bad })
      expect(patch.status).toBe(400)
      expect(patch.body.error.param).toBe(`rate_limit.${Object.keys(bad)[0]}`)
    }
    // PATCH /admin/v1/keys/{id}: null removes the slot limit, the token limit raised; the next calls are limited by the new values at once (the key cached before).
    const fresh = clientFor(gw, rotated.body.secret)
    expect((await fresh.chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 20 }).withResponse()).response.headers.get("x-ratelimit-limit-tokens")).toBe("250")
    const patched = await gw.admin("PATCH", `/admin/v1/keys/${rotated.body.id}`, { rate_limit: { max_concurrent: null, tokens_per_minute: 100_000 } })
    expect(patched.status).toBe(200)
    expect(patched.body.rate_limit).toEqual({ tokens_per_minute: 100_000 })
    const seen = mock.calls
    const pair = [0, 1].map(() => fresh.chat.completions.create({ model: "gpt-slow", messages: hello, max_tokens: 20 }).withResponse())
    await untilUpstreamSaw(mock, seen + 2)
    for (const r of await Promise.all(pair)) expect(r.response.headers.get("x-ratelimit-limit-tokens")).toBe("100000")
  })

  it("the CLI sets them: projects create/update --tpm --max-concurrent (none removes), keys create --tpm --max-concurrent", async () => {
    const cli = (args: ReadonlyArray<string>) =>
      new Promise<any>((resolve, reject) =>
        execFile(process.execPath, ["bin/tollgate.mjs", ...args], { env: { ...process.env, TOLLGATE_URL: gw.origin, TOLLGATE_ADMIN_TOKEN: gw.adminToken } }, (err, stdout, stderr) =>
          err === null ? resolve(JSON.parse(stdout)) : reject(new Error(`${err.message}: ${stderr}`))
        )
      )
    const created = await cli(["projects", "create", "--name", "cli-limits", "--budget", "1000", "--rpm", "60", "--tpm", "9000", "--max-concurrent", "3"])
    expect(created.rate_limit).toEqual({ requests_per_minute: 60, burst: 6, tokens_per_minute: 9000, max_concurrent: 3 })
    const updated = await cli(["projects", "update", created.id, "--tpm", "none", "--max-concurrent", "5"])
    expect(updated.rate_limit).toEqual({ requests_per_minute: 60, burst: 6, max_concurrent: 5 })
    const key = await cli(["keys", "create", created.id, "--tpm", "400", "--max-concurrent", "1"])
    expect(key.rate_limit).toEqual({ tokens_per_minute: 400, max_concurrent: 1 })
  })

  it("a project with no token or concurrency limit answers no token headers", async () => {
    const p = await project({})
    expect(p.body.rate_limit).toEqual({ requests_per_minute: 6000, burst: 600 })
    const ok = await p.client.chat.completions.create({ model: "gpt-test", messages: hello }).withResponse()
    expect(ok.response.headers.get("x-ratelimit-limit-tokens")).toBeNull()
    expect(ok.response.headers.get("x-ratelimit-limit-requests")).toBe("6000")
  })

  it("the admin fields: bad values are a 400 naming the field; PATCH sets and null removes", async () => {
    for (const [field, value] of [
      ["tokens_per_minute", -1],
      ["tokens_per_minute", 1.5],
      ["tokens_per_minute", 1e12],
      ["max_concurrent", 0],
      ["max_concurrent", 2.5],
      ["max_concurrent", 1e9],
      ["max_concurrent", "3"]
    ] as const) {
      const res = await gw.admin("POST", "/admin/v1/projects", { name: "bad", budget_credits: 1, rate_limit: { requests_per_minute: 60, [field]: value } })
      expect(res.status, `${field}=${value}`).toBe(400)
      expect(res.body.error.param).toBe(`rate_limit.${field}`)
    }
    const p = await project({})
    const patched = await gw.admin("PATCH", `/admin/v1/projects/${p.id}`, { rate_limit: { tokens_per_minute: 5000, max_concurrent: 4 } })
    expect(patched.status).toBe(200)
    expect(patched.body.rate_limit).toMatchObject({ tokens_per_minute: 5000, max_concurrent: 4 })
    const bad = await gw.admin("PATCH", `/admin/v1/projects/${p.id}`, { rate_limit: { max_concurrent: -3 } })
    expect(bad.status).toBe(400)
    expect(bad.body.error.param).toBe("rate_limit.max_concurrent")
    const cleared = await gw.admin("PATCH", `/admin/v1/projects/${p.id}`, { rate_limit: { tokens_per_minute: null } })
    expect(cleared.status).toBe(200)
    expect(cleared.body.rate_limit).toEqual({ requests_per_minute: 6000, burst: 600, max_concurrent: 4 })
  })

  it("an end user's own limits (PUT …/end_users/{user} rate_limit; migration 0022): max_concurrent and tokens_per_minute refuse that end user (param end_user.rate_limit.*) while the others have room; a PUT without rate_limit removes them", async () => {
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

describe("route quotas: a route's rate_limit as the provider's quota", () => {
  let mock: MockUpstream
  let gw: TestGateway

  beforeAll(async () => {
    mock = await startMockUpstream()
    gw = await startGateway(
      mockGatewayFile(mock.url, [
        { name: "quota-rpm", provider: "mock", upstream_model: "model-rpm", max_output_tokens: 256, auto: true, rate_limit: { requests_per_minute: 1 } },
        { name: "quota-tpm", provider: "mock", upstream_model: "model-tpm", max_output_tokens: 256, auto: true, rate_limit: { tokens_per_minute: 100 } },
        { name: "spare", provider: "mock", upstream_model: "model-spare", max_output_tokens: 256, auto: true }
      ])
    )
  })
  afterAll(async () => {
    await gw?.close()
    await mock?.close()
  })

  it("auto falls back to the next route when one is at its quota; a call pinned to an exhausted route is a 429 naming the route's limit", async () => {
    const client = clientFor(gw, gw.devKey)
    const upstreamModel = () => (mock.requests.at(-1)?.body as { model?: string } | undefined)?.model
    // The first route's one request a minute: taken by the first call…
    await client.chat.completions.create({ model: "auto", messages: hello, max_tokens: 20 })
    expect(upstreamModel()).toBe("model-rpm")
    // …so the next goes to the second route (its 100 tokens a minute fit an estimate of ~30)…
    await client.chat.completions.create({ model: "auto", messages: hello, max_tokens: 20 })
    expect(upstreamModel()).toBe("model-tpm")
    // …and one whose estimate (~210) exceeds the second's quota goes on to the third.
    await client.chat.completions.create({ model: "auto", messages: hello, max_tokens: 200 })
    expect(upstreamModel()).toBe("model-spare")
    const calls = mock.calls
    const pinned = await expectApiError(client.chat.completions.create({ model: "quota-rpm", messages: hello, max_tokens: 20 }), {
      status: 429,
      code: "rate_limited",
      param: "route.rate_limit.requests_per_minute",
      message: /quota-rpm/
    })
    expect(pinned.headers?.get("x-ratelimit-limit-requests")).toBe("1")
    await expectApiError(client.chat.completions.create({ model: "quota-tpm", messages: hello, max_tokens: 200 }), {
      status: 429,
      code: "rate_limited",
      param: "route.rate_limit.tokens_per_minute"
    })
    expect(mock.calls).toBe(calls)
  })

})
