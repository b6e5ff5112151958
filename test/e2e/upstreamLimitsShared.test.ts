/**
 * Issue 41 item 3, shared: instances on one PostgreSQL and one Redis keep one project's
 * tokens_per_minute and max_concurrent together (the Redis scripts of src/store/sharedGcra.ts), and
 * the slot of a call on an instance killed with SIGKILL comes back once its lease, no longer renewed,
 * runs out (the epoch recovery's staleness bound: 10 s here). Through the `openai` client; the killed
 * instance is the bundle `npm start` runs, in its own process. Runs when PostgreSQL and Redis answer.
 */
import { writeFileSync } from "node:fs"
import { APIError } from "openai"
import type { GatewayFile } from "../../src/domain/config.ts"
import { Option, Redacted } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { buildServer, newStore, type Proc, spawnGateway, type Store } from "../crash/support.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { freshSchema, onEngines, TEST_REDIS_URL, type TestSchema } from "../support/pg.ts"
import { clientFor, expectApiError, newKey } from "./helpers.ts"

const hello = [{ role: "user" as const, content: "Say hello." }]

/** The quota'd route's name, this run's own: its bucket in Redis outlives the run and is shared by every process on that Redis. */
const QUOTA_ROUTE = `quota-rpm-${process.pid}-${Date.now().toString(36)}`

const untilUpstreamSaw = async (mock: MockUpstream, n: number): Promise<void> => {
  for (let i = 0; i < 1000 && mock.calls < n; i++) await new Promise((r) => setTimeout(r, 10))
  expect(mock.calls).toBeGreaterThanOrEqual(n)
}

describe.runIf(onEngines("test/e2e/upstreamLimitsShared.test.ts", { pg: true, redis: true }))("upstream limits shared by instances on PostgreSQL and Redis", () => {
  let mock: MockUpstream
  let schema: TestSchema
  let a: TestGateway
  let b: TestGateway
  let file: GatewayFile
  const settings = () => ({ databaseUrl: schema.url, redisUrl: Option.some(Redacted.make(TEST_REDIS_URL)), heartbeatMs: 100 })

  let server: { main: string; dispose: () => void }
  let store: Store

  beforeAll(async () => {
    // Bundled first: the build blocks this process's loop, which the in-process instances share.
    server = await buildServer()
    mock = await startMockUpstream()
    mock.behaviorsByModel.set("slow-model", { delayMs: 800 })
    schema = freshSchema()
    file = mockGatewayFile(mock.url, [
      { name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: true },
      { name: "gpt-slow", provider: "mock", upstream_model: "slow-model", max_output_tokens: 256, auto: false },
      { name: QUOTA_ROUTE, provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: false, rate_limit: { requests_per_minute: 1 } }
    ])
    a = await startGateway(file, { ...settings(), instanceId: "limits-a" })
    b = await startGateway(file, { ...settings(), instanceId: "limits-b" })
    store = newStore(mock.url)
    // The same routes and rate card as the in-process instances (a card in use is immutable).
    writeFileSync(store.configPath, JSON.stringify(file))
  }, 120_000)
  afterAll(async () => {
    await b?.close()
    await a?.close()
    await mock?.close()
    schema?.drop()
    store?.dispose()
    server?.dispose()
  })

  const project = async (rate_limit: Record<string, unknown>) => {
    const created = await a.admin("POST", "/admin/v1/projects", { name: "shared-limits", budget_credits: 10_000_000, rate_limit: { requests_per_minute: 6000, ...rate_limit } })
    expect(created.status).toBe(201)
    const key = await newKey(a, created.body.id)
    return { id: created.body.id as string, secret: key.secret }
  }

  it("max_concurrent 1: a call in flight on one instance refuses the other's, whose call passes once it ended", async () => {
    const p = await project({ max_concurrent: 1 })
    const before = mock.calls
    const first = clientFor(a, p.secret).chat.completions.create({ model: "gpt-slow", messages: hello })
    await untilUpstreamSaw(mock, before + 1)
    await expectApiError(clientFor(b, p.secret).chat.completions.create({ model: "gpt-test", messages: hello }), {
      status: 429,
      code: "rate_limited",
      param: "project.rate_limit.max_concurrent"
    })
    await first
    const after = await clientFor(b, p.secret).chat.completions.create({ model: "gpt-test", messages: hello })
    expect(after.choices).toHaveLength(1)
  })

  it("tokens_per_minute: one instance's estimate in flight leaves the other too little, with the token headers", async () => {
    const p = await project({ tokens_per_minute: 300 })
    const before = mock.calls
    const first = clientFor(a, p.secret).chat.completions.create({ model: "gpt-slow", messages: hello, max_tokens: 200 }).withResponse()
    await untilUpstreamSaw(mock, before + 1)
    const refused = await expectApiError(clientFor(b, p.secret).chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 200 }), {
      status: 429,
      code: "rate_limited",
      param: "project.rate_limit.tokens_per_minute"
    })
    expect(refused.headers?.get("x-ratelimit-limit-tokens")).toBe("300")
    expect(Number(refused.headers?.get("x-ratelimit-remaining-tokens"))).toBeLessThan(200)
    const ok = await first
    expect(ok.response.headers.get("x-ratelimit-limit-tokens")).toBe("300")
    // Corrected on the shared bucket: the other instance's call of the same size fits now.
    const again = await clientFor(b, p.secret).chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 200 }).withResponse()
    expect(again.response.headers.get("x-ratelimit-limit-tokens")).toBe("300")
  })

  it("a route's quota is the instances' together: its one request a minute taken on one, the other's call to it is a 429 naming the route's limit", async () => {
    const p = await project({})
    await clientFor(a, p.secret).chat.completions.create({ model: QUOTA_ROUTE, messages: hello })
    await expectApiError(clientFor(b, p.secret).chat.completions.create({ model: QUOTA_ROUTE, messages: hello }), {
      status: 429,
      code: "rate_limited",
      param: "route.rate_limit.requests_per_minute"
    })
  })

  describe("an instance killed with SIGKILL while its call is in flight", () => {
    let killed: Proc | undefined

    afterAll(() => {
      killed?.child.kill("SIGKILL")
    })

    it("its slot comes back once its lease runs out, with nothing to recover; a survivor's call, living past a lease's length, keeps its own by renewal", async () => {
      const p = await project({ max_concurrent: 2 })
      killed = await spawnGateway(server.main, store, {
        DATABASE_URL: schema.url,
        REDIS_URL: TEST_REDIS_URL,
        TOLLGATE_RECEIPT_KEY_FILE: `${store.dir}/receipt-key.pem`,
        TOLLGATE_INSTANCE_ID: "limits-killed"
      })
      const before = mock.calls
      mock.pushBehavior({ delayMs: 120_000 })
      const doomed = fetch(`${killed.origin}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${p.secret}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "gpt-test", messages: hello })
      }).catch(() => "cut")
      await untilUpstreamSaw(mock, before + 1)
      killed.child.kill("SIGKILL")
      await killed.exited
      expect(await doomed).toBe("cut")
      // A survivor's call that outlives a lease (10 s): a stream of 8 chunks 2 s apart.
      mock.pushBehavior({ chunks: 8, chunkDelayMs: 2_000 })
      const longStart = Date.now()
      let longEnded = false
      const long = (async () => {
        const stream = await clientFor(a, p.secret).chat.completions.create({ model: "gpt-test", messages: hello, stream: true })
        for await (const _ of stream) void _
      })().finally(() => (longEnded = true))
      await untilUpstreamSaw(mock, before + 2)
      // Both slots taken — the dead instance's still leased, the long call's —: the other survivor refuses…
      const client = clientFor(b, p.secret)
      await expectApiError(client.chat.completions.create({ model: "gpt-test", messages: hello }), {
        status: 429,
        code: "rate_limited",
        param: "project.rate_limit.max_concurrent"
      })
      // …until the dead one's lease, renewed by nobody, expires (polled, bounded at 30 s).
      let refusals = 0
      for (let i = 0; i < 120; i++) {
        try {
          await client.chat.completions.create({ model: "gpt-test", messages: hello })
          break
        } catch (e) {
          if (!(e instanceof APIError) || e.status !== 429) throw e
          refusals++
          await new Promise((r) => setTimeout(r, 250))
        }
      }
      expect(refusals).toBeLessThan(120)
      expect(longEnded).toBe(false)
      // Past a lease's length since the long call began, its slot is still held (renewed every heartbeat): of two calls at once, one is refused.
      while (Date.now() < longStart + 11_000) await new Promise((r) => setTimeout(r, 100))
      const pair = await Promise.allSettled([0, 1].map(() => client.chat.completions.create({ model: "gpt-slow", messages: hello })))
      expect(longEnded).toBe(false)
      expect(pair.filter((r) => r.status === "rejected" && r.reason instanceof APIError && r.reason.status === 429)).toHaveLength(1)
      expect(pair.filter((r) => r.status === "fulfilled")).toHaveLength(1)
      await long
    }, 60_000)
  })
})

describe.runIf(onEngines("test/e2e/upstreamLimitsShared.test.ts (PostgreSQL alone)", { pg: true }))("upstream limits shared by instances on PostgreSQL without Redis", () => {
  let mock: MockUpstream
  let schema: TestSchema
  let a: TestGateway
  let b: TestGateway

  beforeAll(async () => {
    mock = await startMockUpstream()
    mock.behaviorsByModel.set("slow-model", { delayMs: 800 })
    schema = freshSchema()
    const file = mockGatewayFile(mock.url, [
      { name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: true },
      { name: "gpt-slow", provider: "mock", upstream_model: "slow-model", max_output_tokens: 256, auto: false },
      { name: QUOTA_ROUTE, provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: false, rate_limit: { requests_per_minute: 1 } }
    ])
    a = await startGateway(file, { databaseUrl: schema.url, redisUrl: Option.none(), instanceId: "pg-limits-a" })
    b = await startGateway(file, { databaseUrl: schema.url, redisUrl: Option.none(), instanceId: "pg-limits-b" })
  }, 60_000)
  afterAll(async () => {
    await b?.close()
    await a?.close()
    await mock?.close()
    schema?.drop()
  })

  it("max_concurrent and tokens_per_minute: a call in flight on one instance refuses the other's (token_buckets, concurrency_leases), which passes once it ended", async () => {
    const created = await a.admin("POST", "/admin/v1/projects", {
      name: "pg-limits",
      budget_credits: 10_000_000,
      rate_limit: { requests_per_minute: 6000, tokens_per_minute: 300, max_concurrent: 1 }
    })
    expect(created.status).toBe(201)
    const key = await newKey(a, created.body.id)
    const before = mock.calls
    const first = clientFor(a, key.secret).chat.completions.create({ model: "gpt-slow", messages: hello, max_tokens: 20 }).withResponse()
    await untilUpstreamSaw(mock, before + 1)
    await expectApiError(clientFor(b, key.secret).chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 20 }), {
      status: 429,
      code: "rate_limited",
      param: "project.rate_limit.max_concurrent"
    })
    const ok = await first
    expect(ok.response.headers.get("x-ratelimit-limit-tokens")).toBe("300")
    // An estimate of ~210 in flight on one instance: the other's of the same size does not fit (the bucket is checked before the slot).
    const big = clientFor(b, key.secret).chat.completions.create({ model: "gpt-slow", messages: hello, max_tokens: 200 })
    await untilUpstreamSaw(mock, before + 2)
    await expectApiError(clientFor(a, key.secret).chat.completions.create({ model: "gpt-test", messages: hello, max_tokens: 200 }), {
      status: 429,
      code: "rate_limited",
      param: "project.rate_limit.tokens_per_minute"
    })
    await big
    expect(a.query<{ n: number }>("SELECT COUNT(*)::int AS n FROM concurrency_leases")[0]!.n).toBe(0)
    // A route's quota too: its one request a minute taken on one instance, the other's is refused.
    await clientFor(a, key.secret).chat.completions.create({ model: QUOTA_ROUTE, messages: hello, max_tokens: 20 })
    await expectApiError(clientFor(b, key.secret).chat.completions.create({ model: QUOTA_ROUTE, messages: hello, max_tokens: 20 }), {
      status: 429,
      code: "rate_limited",
      param: "route.rate_limit.requests_per_minute"
    })
  })
})
