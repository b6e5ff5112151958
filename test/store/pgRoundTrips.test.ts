/**
 * How many round trips a governed call costs on PostgreSQL (issue 40 counts them before and after
 * its one-statement transactions): measured through the counters /metrics exports
 * (`tollgate_store_round_trips_total`, `tollgate_store_checkouts_total`, src/store/pgPool.ts), over
 * sequential calls on a warm gateway. The bounds are today's counts: a change that adds a round trip
 * to the call fails here.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { pgRoundTrips } from "../../src/store/pgPool.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { startMockUpstream, type MockUpstream } from "../support/mockUpstream.ts"
import { freshSchema, onEngines, type TestSchema } from "../support/pg.ts"

describe.runIf(onEngines("test/store/pgRoundTrips.test.ts"))("round trips of a governed call on PostgreSQL", () => {
  let mock: MockUpstream
  let schema: TestSchema
  let gateway: TestGateway
  const background = { TOLLGATE_WEBHOOK_POLL_MS: "60000", TOLLGATE_CHECKPOINT_INTERVAL_MS: "0" } as const
  beforeAll(async () => {
    // The counters are the process's: the webhook worker's poll and the receipt log's round are not the
    // call's, so they are held off here (each is measured on its own: test/webhooks, test/e2e/receiptLog).
    Object.assign(process.env, background)
    mock = await startMockUpstream()
    schema = freshSchema()
    // As production runs (assertion mode adds a read of the window to each settlement).
    gateway = await startGateway(mockGatewayFile(mock.url), { databaseUrl: schema.url, assertInvariants: false })
    expect((await gateway.admin("PATCH", `/admin/v1/projects/${gateway.projectId}`, { rate_limit: { requests_per_minute: 60_000, burst: 1_000 } })).status).toBe(200)
  })
  afterAll(async () => {
    for (const k of Object.keys(background)) delete process.env[k]
    await gateway?.close()
    schema?.drop()
    await mock?.close()
  })

  const call = (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    fetch(`${gateway.url}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gateway.devKey}`, "content-type": "application/json", ...headers },
      body: JSON.stringify({ model: "auto", max_tokens: 16, messages: [{ role: "user", content: "count" }], ...body })
    }).then(async (r) => ({ status: r.status, text: await r.text() }))

  /** Round trips and checkouts per call over `n` sequential calls (the least of three samples: background beats only add). */
  const perCall = async (n: number, one: (i: number) => Promise<{ status: number }>) => {
    const samples = []
    for (let s = 0; s < 3; s++) {
      const before = { ...pgRoundTrips }
      for (let i = 0; i < n; i++) expect((await one(s * n + i)).status).toBe(200)
      samples.push({ roundTrips: (pgRoundTrips.roundTrips - before.roundTrips) / n, checkouts: (pgRoundTrips.checkouts - before.checkouts) / n })
    }
    return samples.reduce((a, b) => (b.roundTrips < a.roundTrips ? b : a))
  }

  it("a non-streamed call, a call with an idempotency key and a stream: today's round trips and checkouts a call", async () => {
    await call({}) // warm: the key cache, the rate card, the budget window
    const plain = await perCall(10, () => call({}))
    const keyed = await perCall(10, (i) => call({}, { "idempotency-key": `rt-${i}-${Date.now()}` }))
    const stream = await perCall(10, () => call({ stream: true }))
    console.log(`[issue 40] round trips a call: plain ${plain.roundTrips} in ${plain.checkouts} checkouts, with an idempotency key ${keyed.roundTrips} in ${keyed.checkouts}, stream ${stream.roundTrips} in ${stream.checkouts}`)
    for (const c of [plain, keyed, stream]) expect(c.roundTrips).toBeGreaterThan(0)
    // Three round trips, in three checkouts (docs/decisions/0043): the shared rate limit's upsert (1);
    // the reservation, one `tollgate_reserve_many` call with the claim, the guard, the request and the hold
    // (1); the settlement, one `tollgate_settle` call with the hold, the request, the idempotent result,
    // the window, the receipt and the head (1). Before migration 0008: 8, 9 and 8 (BEGIN and COMMIT
    // each a round trip, a statement each for the claim, the guard, the hold and the head, the receipt);
    // before that, 10, 11 and 10.
    expect(plain.roundTrips).toBeLessThanOrEqual(PLAIN_ROUND_TRIPS)
    expect(keyed.roundTrips).toBeLessThanOrEqual(KEYED_ROUND_TRIPS)
    expect(stream.roundTrips).toBeLessThanOrEqual(STREAM_ROUND_TRIPS)
  })

  it("/metrics shows the group commit: settlement batches, the settlements they carried, and refused batches split", async () => {
    for (let i = 0; i < 5; i++) expect((await call({})).status).toBe(200)
    const res = await fetch(`${gateway.origin}/metrics`, { headers: { authorization: `Bearer ${gateway.adminToken}` } })
    expect(res.status).toBe(200)
    const text = await res.text()
    const value = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, "m").exec(text)?.[1] ?? NaN)
    const batches = value("tollgate_store_settle_batches_total")
    const settlements = value("tollgate_store_batched_settlements_total")
    // Every settlement of this file's calls went in a batch (of one, called one at a time): at least these five.
    expect(batches).toBeGreaterThanOrEqual(5)
    expect(settlements).toBeGreaterThanOrEqual(batches)
    expect(value("tollgate_store_batch_splits_total")).toBe(0)
  })
})

const PLAIN_ROUND_TRIPS = 3
const KEYED_ROUND_TRIPS = 3
const STREAM_ROUND_TRIPS = 3
