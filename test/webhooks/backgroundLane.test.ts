/**
 * Issue 42 on PostgreSQL: background work never takes the governed calls' connections
 * (src/services/BackgroundLane.ts). Eight deliveries finish at once while the deliveries table is
 * locked by another session, so each of their outcomes waits in the store; with a pool of 3, the
 * worker's statements must hold one connection between them (the others wait their turn in the
 * process), and calls made meanwhile must be served, not wait for the pool until they answer 503.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { clientFor, newKey } from "../e2e/helpers.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { freshSchema, onEngines, type TestSchema } from "../support/pg.ts"
import { eventually, type Receiver, startReceiver } from "./receiver.ts"

process.env.TOLLGATE_WEBHOOK_ALLOW_PRIVATE = "1"
process.env.TOLLGATE_WEBHOOK_POLL_MS = "15"
process.env.TOLLGATE_WEBHOOK_KEY_FILE = join(mkdtempSync(join(tmpdir(), "tollgate-whkey-")), "webhook-secret-key")

const ENDPOINTS = 8

describe.runIf(onEngines("test/webhooks/backgroundLane.test.ts", { pg: true }))("background work and the pool on PostgreSQL", () => {
  let mock: MockUpstream
  let schema: TestSchema
  let gw: TestGateway
  const receivers: Array<Receiver> = []
  let locker: pg.Client | undefined
  let observer: pg.Client | undefined

  beforeAll(async () => {
    mock = await startMockUpstream({})
    schema = freshSchema()
    gw = await startGateway(mockGatewayFile(mock.url), { databaseUrl: schema.url, pgPoolSize: 3, pgAcquireTimeoutMs: 3000 })
  })

  afterAll(async () => {
    await locker?.end().catch(() => undefined)
    await observer?.end().catch(() => undefined)
    await gw?.close()
    await mock?.close()
    for (const r of receivers) await r.close()
    schema?.drop()
  })

  it("eight delivery outcomes stalled on a lock hold one connection of three; calls made meanwhile answer 200", async () => {
    const project = await gw.admin("POST", "/admin/v1/projects", { name: "lane", budget_credits: 1_000_000, rate_limit: { requests_per_minute: 6000, burst: 600 } })
    expect(project.status).toBe(201)
    // Every receiver holds its answer until the table is locked.
    let open: () => void = () => {}
    const gate = new Promise<void>((resolve) => (open = resolve))
    let arrived = 0
    for (let i = 0; i < ENDPOINTS; i++) {
      const r = await startReceiver(`/lane-${i}`)
      r.answer = async () => {
        arrived++
        await gate
        return 200
      }
      receivers.push(r)
      const created = await gw.admin("POST", "/admin/v1/webhooks", { url: r.url, events: ["key.created"], project_id: project.body.id })
      expect(created.status).toBe(201)
      r.secrets.push(created.body.secret)
    }
    // One event (the key's creation), one delivery to each endpoint: the worker POSTs all eight at once.
    const key = await newKey(gw, project.body.id)
    await eventually("all eight deliveries in flight", () => arrived === ENDPOINTS)

    locker = new pg.Client({ connectionString: schema.url })
    await locker.connect()
    await locker.query("BEGIN")
    await locker.query("LOCK TABLE webhook_deliveries IN EXCLUSIVE MODE")
    // Read from another session: the locker's transaction would see one snapshot of the server's activity.
    observer = new pg.Client({ connectionString: schema.url })
    await observer.connect()
    /** The sessions waiting for the lock on this schema's deliveries table. */
    const waiting = async () =>
      Number((await observer!.query<{ n: string }>("SELECT COUNT(*) AS n FROM pg_locks WHERE NOT granted AND relation = 'webhook_deliveries'::regclass")).rows[0]!.n)
    open()
    await eventually("an outcome waits on the lock", async () => (await waiting()) >= 1)

    const client = clientFor(gw, key.secret)
    const statuses = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: `lane ${i}` }], max_tokens: 4 }).then(
          () => 200,
          (e: { status?: number }) => e.status ?? 0
        )
      )
    )
    const stalled = await waiting()
    console.log(`background lane: ${stalled} worker statement(s) waiting on the lock; calls meanwhile ${JSON.stringify(statuses)}`)
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200])
    expect(stalled).toBe(1)

    await locker.query("COMMIT")
    await eventually("every delivery recorded delivered", async () => {
      const log = await gw.admin("GET", "/admin/v1/events?type=key.created")
      const eventId = log.body.data.find((e: any) => e.data.key_id === key.id)?.id
      const rows = gw.query<{ status: string }>("SELECT status FROM webhook_deliveries WHERE event_id = ?", eventId)
      return rows.length === ENDPOINTS && rows.every((r) => r.status === "delivered")
    })
  }, 120_000)
})
