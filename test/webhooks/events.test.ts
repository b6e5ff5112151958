/**
 * Issue 42 end to end, on SQLite and on PostgreSQL: a real gateway, the official `openai` client, and
 * a receiver on loopback that verifies every delivery with `standardwebhooks`.
 *
 * - every event type is delivered, signed, with `{id, type, created_at, data}` and webhook-id = the event id;
 * - a budget threshold crossed by concurrent calls is emitted exactly once per threshold (the store
 *   against spec/events.ts's rule), and budget.exhausted once for the window's 402s;
 * - the events are written in their cause's transaction: a key created appears with its event, and a
 *   rotation that loses its race writes no event.
 */
import { APIError } from "openai"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { crossedThresholds } from "../../spec/events.ts"
import { clientFor, newProject } from "../e2e/helpers.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { freshSchema, onEngines, type TestSchema } from "../support/pg.ts"
import { eventually, type Receiver, startReceiver } from "./receiver.ts"

process.env.TOLLGATE_WEBHOOK_ALLOW_PRIVATE = "1"
process.env.TOLLGATE_WEBHOOK_POLL_MS = "20"
process.env.TOLLGATE_WEBHOOK_RETRY_BASE_MS = "50"
process.env.TOLLGATE_WEBHOOK_KEY_FILE = join(mkdtempSync(join(tmpdir(), "tollgate-whkey-")), "webhook-secret-key")

const engines = [
  ["sqlite", true],
  ["pg", onEngines("test/webhooks/events.test.ts on PostgreSQL", { pg: true })]
] as const

describe.each(engines)("events and webhooks on %s", (engine, runs) => {
  let mock: MockUpstream
  let gw: TestGateway
  let receiver: Receiver
  let schema: TestSchema | undefined
  let endpointId: string

  beforeAll(async () => {
    if (!runs) return
    mock = await startMockUpstream({ behavior: { delayMs: 20 } })
    schema = engine === "pg" ? freshSchema() : undefined
    gw = await startGateway(mockGatewayFile(mock.url), schema === undefined ? {} : { databaseUrl: schema.url })
    receiver = await startReceiver()
    const created = await gw.admin("POST", "/admin/v1/webhooks", { url: receiver.url, events: ["*"], description: "all events" })
    expect(created.status).toBe(201)
    expect(created.body.secret).toMatch(/^whsec_/)
    receiver.secrets.push(created.body.secret)
    endpointId = created.body.id
  })

  afterAll(async () => {
    if (!runs) return
    await gw.close()
    await mock.close()
    await receiver.close()
    schema?.drop()
  })

  it.runIf(runs)("the secret is shown once and stored encrypted, never in clear", async () => {
    const got = await gw.admin("GET", `/admin/v1/webhooks/${endpointId}`)
    expect(got.status).toBe(200)
    expect(got.body.secret).toBeUndefined()
    const [row] = gw.query<{ secret: string }>("SELECT secret FROM webhook_endpoints WHERE id = ?", endpointId)
    expect(row!.secret).toMatch(/^v1\./)
    expect(row!.secret).not.toContain(receiver.secrets[0]!.slice(6))
  })

  it.runIf(runs)("a threshold crossed by concurrent calls is emitted once per threshold; budget.exhausted once for the window", async () => {
    const p = await newProject(gw, { budget: 1_000_000 })
    const client = clientFor(gw, p.key)
    const call = () => client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: "hi" }], max_tokens: 4 })
    // One call's price, then a cap of about 12 of them: 40 concurrent calls cross 50, 80 and 100% (or stop short of 100).
    const first = await call()
    const charge = (first as any).governance.credits_charged as number
    expect(charge).toBeGreaterThan(0)
    const cap = charge * 12
    expect((await gw.admin("PATCH", `/admin/v1/projects/${p.projectId}`, { budget_credits: cap })).status).toBe(200)
    const outcomes = await Promise.allSettled(Array.from({ length: 40 }, call))
    const refused = outcomes.filter((o) => o.status === "rejected")
    for (const o of refused) expect((o as PromiseRejectedResult).reason).toBeInstanceOf(APIError)
    expect(refused.length).toBeGreaterThan(0)
    const [w] = gw.query<{ spent: number }>("SELECT spent FROM budget_windows WHERE project_id = ?", p.projectId)
    const spent = Number(w!.spent)
    const events = gw.query<{ type: string; data: string }>("SELECT type, data FROM events WHERE project_id = ? ORDER BY seq", p.projectId)
    const thresholds = events.filter((e) => e.type === "budget.threshold_reached").map((e) => JSON.parse(e.data).threshold_percent as number)
    // Once each, exactly the thresholds spent has reached under the cap (the first call's spend was under a 1e6 cap).
    expect(thresholds.sort((a, b) => a - b)).toEqual(crossedThresholds(charge, spent, cap, [50, 80, 100]))
    expect(thresholds.length).toBeGreaterThanOrEqual(2)
    // Committed before the first 402 was answered: there when the answers are, no waiting.
    expect(gw.query("SELECT id FROM events WHERE project_id = ? AND type = 'budget.exhausted'", p.projectId)).toHaveLength(1)
    // More 402s in the same window write nothing more.
    await Promise.allSettled(Array.from({ length: 5 }, call))
    await new Promise((r) => setTimeout(r, 200))
    expect(gw.query("SELECT id FROM events WHERE project_id = ? AND type = 'budget.exhausted'", p.projectId)).toHaveLength(1)
    const all = gw.query<{ id: string }>("SELECT id FROM events WHERE project_id = ?", p.projectId)
    await eventually("every event of the project delivered", () => all.every((e) => receiver.acknowledged().get(e.id) === 1))
  })

  it.runIf(runs)("budget.exhausted in a key's and an end user's scope: the first 402 naming each has its event, with the scope's figures, before it is answered", async () => {
    const p = await newProject(gw, { budget: 1_000_000 })
    const client = clientFor(gw, p.key)
    const call = (user?: string) =>
      client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: "hi" }], max_tokens: 4, ...(user === undefined ? {} : { user }) })
    const charge = ((await call()) as any).governance.credits_charged as number
    const exhaustedOf = () =>
      gw.query<{ data: string }>("SELECT data FROM events WHERE project_id = ? AND type = 'budget.exhausted' ORDER BY seq", p.projectId).map((e) => JSON.parse(e.data))
    // An end user capped at one call: its second call is refused naming end_user.
    expect((await gw.admin("PUT", `/admin/v1/projects/${p.projectId}/end_users/carol`, { budget_credits: charge * 2 - 1 })).status).toBe(200)
    await call("carol")
    const eu = await call("carol").catch((e: unknown) => e)
    expect([(eu as APIError).status, (eu as any).error?.param]).toEqual([402, "end_user"])
    expect(exhaustedOf()).toEqual([expect.objectContaining({ scope: "end_user", scope_id: "carol", cap: charge * 2 - 1, spent: charge })])
    // The key capped below what it spent already: refused naming key.
    expect((await gw.admin("PATCH", `/admin/v1/keys/${p.keyId}`, { budget_credits: charge })).status).toBe(200)
    const key = await call().catch((e: unknown) => e)
    expect([(key as APIError).status, (key as any).error?.param]).toEqual([402, "key"])
    expect(exhaustedOf()).toEqual([
      expect.objectContaining({ scope: "end_user", scope_id: "carol" }),
      expect.objectContaining({ scope: "key", scope_id: p.keyId, cap: charge, spent: charge * 2 })
    ])
    // Their next 402s write nothing more; the project's budget was never exhausted.
    await Promise.allSettled([call(), call("carol")])
    expect(exhaustedOf()).toHaveLength(2)
  })

  it.runIf(runs)("key and project events, each in its cause's transaction; every type delivered, verified, once", async () => {
    const p = await newProject(gw, { budget: 5_000 })
    const rotated = await gw.admin("POST", `/admin/v1/keys/${p.keyId}/rotate`, { grace_seconds: 1 })
    expect(rotated.status).toBe(201)
    // A second rotation of the same key loses (409) and writes no event.
    expect((await gw.admin("POST", `/admin/v1/keys/${p.keyId}/rotate`, {})).status).toBe(409)
    expect((await gw.admin("POST", `/admin/v1/keys/${rotated.body.id}/revoke`)).status).toBe(200)
    expect((await gw.admin("POST", `/admin/v1/keys/${rotated.body.id}/revoke`)).status).toBe(200) // again: nothing new
    const patched = await gw.admin("PATCH", `/admin/v1/projects/${p.projectId}`, { budget_credits: 6_000, name: "renamed", alert_thresholds_percent: [25, 75] })
    expect(patched.status).toBe(200)
    expect(patched.body.alert_thresholds_percent).toEqual([25, 75])
    expect((await gw.admin("PATCH", `/admin/v1/projects/${p.projectId}`, { name: "renamed" })).status).toBe(200) // no change: no event
    // The old key's grace (1 s) ends: key.expired, once, by the sweep (every 5 s).
    await eventually("key.expired", () => gw.query("SELECT id FROM events WHERE type = 'key.expired' AND project_id = ?", p.projectId).length === 1, 15_000)
    const events = gw.query<{ id: string; type: string; data: string }>("SELECT id, type, data FROM events WHERE project_id = ? ORDER BY seq", p.projectId)
    expect(events.map((e) => e.type)).toEqual(["key.created", "key.rotated", "key.revoked", "project.updated", "key.expired"])
    const updated = JSON.parse(events[3]!.data)
    expect(updated.changes).toEqual({ name: ["e2e", "renamed"], budget_credits: [5000, 6000], alert_thresholds_percent: [[50, 80, 100], [25, 75]] })
    for (const e of events) expect(e.data).not.toMatch(/tg_|secret/)
    await eventually("all delivered", () => events.every((e) => receiver.acknowledged().get(e.id) === 1))
    for (const r of receiver.received) {
      expect(r.verified).toBe(true)
      expect(r.headers["webhook-id"]).toBe(r.event.id)
      expect(r.headers["webhook-signature"]).toMatch(/^v1,/)
      expect(Object.keys(r.event).sort()).toEqual(["created_at", "data", "id", "type"])
    }
    // The delivery log says the same (once the gateway has read the last answer: the receiver records it as it sends it).
    const logOf = () => gw.admin("GET", `/admin/v1/webhooks/${endpointId}/deliveries?limit=100`)
    await eventually("the log shows every delivery delivered", async () =>
      (await logOf()).body.data.filter((d: any) => events.some((e) => e.id === d.event_id)).every((d: any) => d.status === "delivered"))
    const log = await logOf()
    expect(log.status).toBe(200)
    const mine = log.body.data.filter((d: any) => events.some((e) => e.id === d.event_id))
    expect(mine).toHaveLength(events.length)
    for (const d of mine) expect(d).toMatchObject({ status: "delivered", attempts: 1, last_status_code: 200 })
    // The events list, filtered.
    const listed = await gw.admin("GET", `/admin/v1/events?type=key.rotated&since=2000-01-01T00:00:00Z&limit=100`)
    expect(listed.status).toBe(200)
    expect(listed.body.data.some((e: any) => e.id === events[1]!.id && e.data.replaced_by === rotated.body.id)).toBe(true)
    expect(listed.body.data.every((e: any) => e.type === "key.rotated")).toBe(true)
  })

  it.runIf(runs)("one real delivery of each of the seven types, as received (printed for the closing note)", () => {
    const byType = new Map<string, (typeof receiver.received)[number]>()
    for (const r of receiver.received) if (r.status === 200 && !byType.has(r.event.type)) byType.set(r.event.type, r)
    expect([...byType.keys()].sort()).toEqual(["budget.exhausted", "budget.threshold_reached", "key.created", "key.expired", "key.revoked", "key.rotated", "project.updated"])
    if (engine === "sqlite") {
      for (const [type, r] of byType) {
        const h = Object.fromEntries(["content-type", "user-agent", "webhook-id", "webhook-timestamp", "webhook-signature"].map((k) => [k, r.headers[k]]))
        console.log(`--- ${type}\n${JSON.stringify(h)}\n${r.body}`)
      }
    }
  })

  it.runIf(runs)("send again: the same event id, a new delivery", async () => {
    const log = await gw.admin("GET", `/admin/v1/webhooks/${endpointId}/deliveries?limit=1`)
    const last = log.body.data[0]
    const again = await gw.admin("POST", `/admin/v1/webhooks/${endpointId}/deliveries/${last.id}/retry`)
    expect(again.status).toBe(201)
    expect(again.body).toMatchObject({ event_id: last.event_id, status: "pending", attempts: 0 })
    expect(again.body.id).not.toBe(last.id)
    await eventually("sent again", () => receiver.acknowledged().get(last.event_id) === 2)
  })
})
