/**
 * Issue 42, delivery (SQLite; the same worker and statements run on PostgreSQL in
 * test/webhooks/events.test.ts and twoInstances.test.ts):
 * - a receiver that answers 500 for a while, then 200, gets every event once acknowledged, in order,
 *   with the same webhook-id on every attempt;
 * - a redirect is not followed (a failed attempt);
 * - the URL rules: http and private addresses refused at registration without
 *   TOLLGATE_WEBHOOK_ALLOW_PRIVATE=1; a DNS name that resolves to loopback (`vm`, /etc/hosts) passes
 *   registration and is refused at delivery, nothing sent; retries run out into `failed`, and the
 *   endpoint's next event goes.
 */
import { mkdtempSync } from "node:fs"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { newKey, newProject } from "../e2e/helpers.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { eventually, startReceiver } from "./receiver.ts"

const keyFile = join(mkdtempSync(join(tmpdir(), "tollgate-whkey-")), "webhook-secret-key")

/** A gateway with the webhook settings `env` (read when its layers are built). */
const gatewayWith = async (mock: MockUpstream, env: Record<string, string>): Promise<TestGateway> => {
  Object.assign(process.env, { TOLLGATE_WEBHOOK_POLL_MS: "20", TOLLGATE_WEBHOOK_RETRY_BASE_MS: "40", TOLLGATE_WEBHOOK_KEY_FILE: keyFile, ...env })
  try {
    return await startGateway(mockGatewayFile(mock.url))
  } finally {
    for (const k of Object.keys(env)) delete process.env[k]
  }
}

describe("webhook delivery", () => {
  const closers: Array<() => Promise<void>> = []
  afterAll(async () => {
    for (const close of closers.reverse()) await close()
  })

  it("a receiver down for a while (500) gets every event once acknowledged, in order, the same id on every attempt", async () => {
    const mock = await startMockUpstream({})
    closers.push(() => mock.close())
    const gw = await gatewayWith(mock, { TOLLGATE_WEBHOOK_ALLOW_PRIVATE: "1" })
    closers.push(() => gw.close())
    const receiver = await startReceiver()
    closers.push(() => receiver.close())
    let down = true
    receiver.answer = () => (down ? 500 : 200)
    const created = await gw.admin("POST", "/admin/v1/webhooks", { url: receiver.url, events: ["key.created", "key.revoked"] })
    expect(created.status).toBe(201)
    receiver.secrets.push(created.body.secret)
    const p = await newProject(gw)
    for (let i = 0; i < 5; i++) await newKey(gw, p.projectId, "development")
    expect((await gw.admin("POST", `/admin/v1/keys/${p.keyId}/revoke`)).status).toBe(200)
    // Events before the endpoint existed (the first start's key) are not sent to it.
    const events = gw.query<{ id: string }>("SELECT id FROM events WHERE type IN ('key.created', 'key.revoked') AND project_id = ? ORDER BY seq", p.projectId)
    expect(events).toHaveLength(7) // the project's first key, five more, one revocation
    await eventually("a few refused attempts", () => receiver.received.length >= 3)
    // Only the head of the endpoint's queue is tried while it fails: every refused attempt carries the first event.
    expect(new Set(receiver.received.map((r) => r.event.id))).toEqual(new Set([events[0]!.id]))
    down = false
    await eventually("every event acknowledged", () => events.every((e) => receiver.acknowledged().has(e.id)))
    await new Promise((r) => setTimeout(r, 200))
    const acked = receiver.received.filter((r) => r.status === 200)
    expect(acked.map((r) => r.event.id)).toEqual(events.map((e) => e.id)) // once each, in order
    for (const r of receiver.received) {
      expect(r.verified).toBe(true)
      expect(r.headers["webhook-id"]).toBe(r.event.id)
    }
    const log = await gw.admin("GET", `/admin/v1/webhooks/${created.body.id}/deliveries?limit=100`)
    const first = log.body.data.find((d: any) => d.event_id === events[0]!.id)
    expect(first.attempts).toBeGreaterThanOrEqual(4)
    expect(first).toMatchObject({ status: "delivered", last_status_code: 200, last_error: null })
    const metrics = await (await fetch(`${gw.origin}/metrics`, { headers: { authorization: `Bearer ${gw.adminToken}` } })).text()
    expect(metrics).toMatch(/tollgate_webhook_attempts_total\{outcome="retry"\} [1-9]/)
    expect(metrics).toMatch(/tollgate_webhook_outbox_oldest_age_seconds 0/)
  })

  it("a redirect is not followed: the attempt fails and the target hears nothing", async () => {
    const mock = await startMockUpstream({})
    closers.push(() => mock.close())
    const gw = await gatewayWith(mock, { TOLLGATE_WEBHOOK_ALLOW_PRIVATE: "1" })
    closers.push(() => gw.close())
    const target = await startReceiver()
    closers.push(() => target.close())
    const redirector = createServer((_req, res) => {
      res.writeHead(307, { location: target.url })
      res.end()
    })
    await new Promise<void>((resolve) => redirector.listen(0, "127.0.0.1", resolve))
    closers.push(() => new Promise((resolve) => redirector.close(() => resolve())))
    const created = await gw.admin("POST", "/admin/v1/webhooks", { url: `http://127.0.0.1:${(redirector.address() as AddressInfo).port}/`, events: ["*"] })
    expect(created.status).toBe(201)
    await newProject(gw)
    await eventually("an attempt answered 307", async () => {
      const log = await gw.admin("GET", `/admin/v1/webhooks/${created.body.id}/deliveries`)
      return log.body.data.some((d: any) => d.last_status_code === 307 && d.status === "pending")
    })
    expect(target.received).toHaveLength(0)
  })

  it("URL rules without TOLLGATE_WEBHOOK_ALLOW_PRIVATE: refused at registration, and at delivery for a name resolving to loopback", async () => {
    const mock = await startMockUpstream({})
    closers.push(() => mock.close())
    const gw = await gatewayWith(mock, { TOLLGATE_WEBHOOK_MAX_AGE_MS: "400" })
    closers.push(() => gw.close())
    const refused = async (body: unknown, param: string) => {
      const res = await gw.admin("POST", "/admin/v1/webhooks", body)
      expect([res.status, res.body.error?.type, res.body.error?.param]).toEqual([400, "invalid_request_error", param])
      return res.body.error.message as string
    }
    expect(await refused({ url: "http://example.com/hook", events: ["*"] }, "url")).toMatch(/https/)
    for (const url of ["https://127.0.0.1/hook", "https://10.1.2.3/", "https://169.254.169.254/latest", "https://[::1]/", "https://[::ffff:192.168.0.1]/", "https://localhost/", "https://100.64.0.1/"]) {
      expect(await refused({ url, events: ["*"] }, "url")).toMatch(/private|loopback/)
    }
    await refused({ url: "not a url", events: ["*"] }, "url")
    await refused({ url: "https://user:pw@example.com/", events: ["*"] }, "url")
    await refused({ url: "https://example.com/", events: [] }, "events")
    await refused({ url: "https://example.com/", events: ["key.created", "nope"] }, "events[1]")
    await refused({ url: "https://example.com/", events: ["*"], project_id: "prj_nope" }, "project_id")
    await refused({ url: "https://example.com/", events: ["*"], description: "x".repeat(300) }, "description")
    const missing = await gw.admin("POST", "/admin/v1/webhooks", { events: ["*"] })
    expect([missing.status, missing.body.error?.param]).toEqual([400, "url"])
    // `vm` is in /etc/hosts as 127.0.0.1: a name, so registration cannot tell; delivery resolves it and refuses.
    const sneaky = await gw.admin("POST", "/admin/v1/webhooks", { url: "https://vm/hook", events: ["key.created"] })
    expect(sneaky.status).toBe(201)
    const p = await newProject(gw)
    await eventually("the delivery refused, retried, then failed", async () => {
      const log = await gw.admin("GET", `/admin/v1/webhooks/${sneaky.body.id}/deliveries`)
      return log.body.data[0]?.status === "failed"
    })
    const log = await gw.admin("GET", `/admin/v1/webhooks/${sneaky.body.id}/deliveries`)
    expect(log.body.data[0]).toMatchObject({ status: "failed", last_status_code: null, next_attempt_at: null })
    expect(log.body.data[0].last_error).toMatch(/vm resolves to 127\.0\.0\.1/)
    expect(log.body.data[0].attempts).toBeGreaterThanOrEqual(1)
    // The queue moves on after a failure: the next event is tried too.
    await newKey(gw, p.projectId, "staging")
    await eventually("the next event tried", async () => (await gw.admin("GET", `/admin/v1/webhooks/${sneaky.body.id}/deliveries`)).body.data.length === 2)
    // A project's thresholds: 1 to 10 distinct whole percents, 1 to 100, else a 400 naming the field.
    for (const bad of [[], [0], [101], [50, 50], [12.5], Array.from({ length: 11 }, (_, i) => i + 1)]) {
      const res = await gw.admin("PATCH", `/admin/v1/projects/${p.projectId}`, { alert_thresholds_percent: bad })
      expect(res.status).toBe(400)
      expect(res.body.error?.param).toMatch(/^alert_thresholds_percent/)
    }
    // An unknown id is a 404; a malformed delivery id, event type or instant a 400 naming it.
    expect((await gw.admin("GET", "/admin/v1/webhooks/whe_nope")).status).toBe(404)
    expect((await gw.admin("POST", `/admin/v1/webhooks/${sneaky.body.id}/deliveries/nope/retry`)).body.error?.param).toBe("delivery_id")
    expect((await gw.admin("GET", "/admin/v1/events?type=nope")).body.error?.param).toBe("type")
    expect((await gw.admin("GET", "/admin/v1/events?since=yesterday")).body.error?.param).toBe("since")
  })
})
