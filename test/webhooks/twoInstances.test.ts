/**
 * Issue 42 on PostgreSQL: two gateway instances on one store, both delivering. Their claims are
 * `FOR UPDATE SKIP LOCKED` on the head of each endpoint's queue, so each attempt is made by one
 * instance: with every receiver answering 200, each (endpoint, event) is received exactly once, in
 * the order of the endpoint's queue.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { newProject } from "../e2e/helpers.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { freshSchema, onEngines, type TestSchema } from "../support/pg.ts"
import { eventually, type Receiver, startReceiver } from "./receiver.ts"

process.env.TOLLGATE_WEBHOOK_ALLOW_PRIVATE = "1"
process.env.TOLLGATE_WEBHOOK_POLL_MS = "15"
process.env.TOLLGATE_WEBHOOK_KEY_FILE = join(mkdtempSync(join(tmpdir(), "tollgate-whkey-")), "webhook-secret-key")

describe.runIf(onEngines("test/webhooks/twoInstances.test.ts", { pg: true }))("two instances on PostgreSQL", () => {
  let mock: MockUpstream
  let schema: TestSchema
  let a: TestGateway
  let b: TestGateway
  const receivers: Array<Receiver> = []

  beforeAll(async () => {
    mock = await startMockUpstream({})
    schema = freshSchema()
    a = await startGateway(mockGatewayFile(mock.url), { databaseUrl: schema.url, instanceId: "instance-a" })
    b = await startGateway(mockGatewayFile(mock.url), { databaseUrl: schema.url, instanceId: "instance-b" })
  })

  afterAll(async () => {
    await a?.close()
    await b?.close()
    await mock?.close()
    for (const r of receivers) await r.close()
    schema?.drop()
  })

  it("deliver each attempt once", async () => {
    const endpoints: Array<string> = []
    for (let i = 0; i < 4; i++) {
      const r = await startReceiver(`/hook-${i}`)
      r.answer = () => new Promise((resolve) => setTimeout(() => resolve(200), 5))
      receivers.push(r)
      const created = await (i % 2 === 0 ? a : b).admin("POST", "/admin/v1/webhooks", { url: r.url, events: ["*"] })
      expect(created.status).toBe(201)
      r.secrets.push(created.body.secret)
      endpoints.push(created.body.id)
    }
    // Events made through both instances, interleaved.
    const p = await newProject(a)
    for (let i = 0; i < 30; i++) expect((await (i % 2 === 0 ? a : b).admin("POST", `/admin/v1/projects/${p.projectId}/keys`, { environment: "staging" })).status).toBe(201)
    const events = a.query<{ id: string }>("SELECT id FROM events WHERE project_id = ? ORDER BY seq", p.projectId).map((e) => e.id)
    expect(events).toHaveLength(31)
    await eventually("every endpoint has every event", () => receivers.every((r) => events.every((id) => r.acknowledged().has(id))), 60_000)
    await new Promise((r) => setTimeout(r, 300))
    for (const r of receivers) {
      expect(r.received.map((x) => x.event.id)).toEqual(events) // once each, in order
      for (const x of r.received) expect(x.verified).toBe(true)
    }
    const byInstance = a.query<{ claimed_by: string; n: number }>("SELECT claimed_by, COUNT(*)::INTEGER AS n FROM webhook_deliveries GROUP BY claimed_by ORDER BY claimed_by")
    const attempts = a.query<{ total: number }>("SELECT SUM(attempts)::INTEGER AS total FROM webhook_deliveries")[0]!.total
    console.log(`webhooks two instances: ${events.length} events x ${endpoints.length} endpoints = ${attempts} attempts, by epoch ${JSON.stringify(byInstance)}`)
    expect(attempts).toBe(events.length * endpoints.length)
    expect(byInstance).toHaveLength(2) // both instances delivered
  }, 120_000)
})
