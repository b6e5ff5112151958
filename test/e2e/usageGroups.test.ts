/**
 * `/v1/usage?group_by=` (issue 41, item 4): the window's sums per model, per key and per end user,
 * through the official `openai` client and the wire. The invariant each breakdown keeps: its groups
 * partition the window's receipts — the groups' sums are the totals (for end users: the totals of the
 * calls that named one), and each group's figures are its own receipts' sums in the store.
 */
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile, useMockedGateway } from "../support/gateway.ts"
import { newKey, newProject } from "./helpers.ts"

interface Group {
  readonly model?: string
  readonly key_id?: string
  readonly end_user?: string
  readonly requests: number
  readonly credits: number
  readonly tokens: { input: number; cached_input: number; output: number; reasoning: number }
}
interface Usage {
  readonly requests: number
  readonly credits: number
  readonly by_model: ReadonlyArray<Group>
  readonly group_by?: string
  readonly groups?: ReadonlyArray<Group>
}

describe("/v1/usage?group_by=: the window's receipts per model, per key, per end user", () => {
  const env = useMockedGateway({ beforeAll, afterAll }, (url) =>
    mockGatewayFile(url, [
      { name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: true },
      { name: "gpt-other", provider: "mock", upstream_model: "mock-other", max_output_tokens: 256, auto: false }
    ]))
  const calls: Array<{ key: "a" | "b"; model: string; user?: string }> = [
    { key: "a", model: "gpt-test", user: "alice" },
    { key: "a", model: "gpt-test", user: "bob" },
    { key: "a", model: "gpt-other" },
    { key: "b", model: "gpt-other", user: "alice" },
    { key: "b", model: "gpt-test" }
  ]
  let keys: Record<"a" | "b", { id: string; secret: string }>

  const usage = async (query: string, secret = keys.a.secret) => {
    const res = await fetch(`${env.gateway.url}/usage${query}`, { headers: { authorization: `Bearer ${secret}` } })
    return { status: res.status, body: (await res.json()) as Usage & { error?: { param: string | null } } }
  }
  const sumOf = (groups: ReadonlyArray<Group>, f: (g: Group) => number) => groups.reduce((n, g) => n + f(g), 0)

  beforeAll(async () => {
    const p = await newProject(env.gateway, { name: "usage-groups" })
    keys = { a: { id: p.keyId, secret: p.key }, b: await newKey(env.gateway, p.projectId) }
    for (const c of calls) {
      const client = new OpenAI({ baseURL: env.gateway.url, apiKey: keys[c.key].secret, maxRetries: 0 })
      await client.chat.completions.create({ model: c.model, messages: [{ role: "user", content: `hello ${c.key} ${c.model}` }], ...(c.user === undefined ? {} : { user: c.user }) })
    }
  })

  it("group_by=key: one group per key, its own calls and charges; the groups sum to the totals", async () => {
    const { status, body } = await usage("?group_by=key")
    expect(status).toBe(200)
    expect(body.group_by).toBe("key")
    const byKey = new Map(body.groups!.map((g) => [g.key_id, g]))
    expect([...byKey.keys()].sort()).toEqual([keys.a.id, keys.b.id].sort())
    expect(byKey.get(keys.a.id)!.requests).toBe(calls.filter((c) => c.key === "a").length)
    expect(byKey.get(keys.b.id)!.requests).toBe(calls.filter((c) => c.key === "b").length)
    expect(sumOf(body.groups!, (g) => g.credits)).toBe(body.credits)
    expect(sumOf(body.groups!, (g) => g.tokens.output)).toBe(sumOf(body.by_model, (g) => g.tokens.output))
    // The store agrees: each key's credits are the sum of its requests' receipts.
    for (const k of [keys.a, keys.b]) {
      const [row] = env.gateway.query<{ credits: number }>(
        "SELECT SUM(r.credits_charged) AS credits FROM receipts r JOIN requests q ON q.id = r.request_id WHERE q.key_id = ?", k.id)
      expect(byKey.get(k.id)!.credits).toBe(Number(row!.credits))
    }
  })

  it("group_by=end_user: one group per end user named, its own calls; calls that named none are left out", async () => {
    const { status, body } = await usage("?group_by=end_user")
    expect(status).toBe(200)
    const named = calls.filter((c) => c.user !== undefined)
    const byUser = new Map(body.groups!.map((g) => [g.end_user, g]))
    expect([...byUser.keys()].sort()).toEqual([...new Set(named.map((c) => c.user!))].sort())
    for (const [user, g] of byUser) expect(g.requests).toBe(named.filter((c) => c.user === user).length)
    expect(sumOf(body.groups!, (g) => g.requests)).toBe(named.length)
    expect(sumOf(body.groups!, (g) => g.credits)).toBeLessThanOrEqual(body.credits)
  })

  it("group_by=model: the same figures as by_model", async () => {
    const { body } = await usage("?group_by=model")
    expect(body.groups).toEqual(body.by_model)
    expect(body.groups!.map((g) => g.model).sort()).toEqual(["gpt-other", "gpt-test"])
  })

  it("an unknown group_by is a 400 naming it; no group_by answers no groups", async () => {
    const bad = await usage("?group_by=team")
    expect([bad.status, bad.body.error?.param]).toEqual([400, "group_by"])
    const plain = await usage("")
    expect(plain.status).toBe(200)
    expect(plain.body.groups).toBeUndefined()
    expect(plain.body.requests).toBe(calls.length)
  })
})
