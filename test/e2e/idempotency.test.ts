/**
 * Idempotency (docs/contract.md §5) end to end: a replay returns the original bytes with
 * `Idempotent-Replayed: true` and costs neither an upstream call nor a Credit; a conflict changes
 * nothing; concurrent duplicates share one upstream call; a failure that charged nothing frees the key.
 */
import type OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { clientFor, dbAll, dbGet, expectApiError, expectNoServerErrors, governanceOf, ledgerState, raw, type StatusLog } from "./helpers.ts"

const RETRIES = 1
let seq = 0
const freshKey = (label: string) => `${label}-${process.pid}-${++seq}-${Math.random().toString(36).slice(2)}`

describe("idempotency", () => {
  let mock: MockUpstream
  let gw: TestGateway
  let client: OpenAI
  const log: StatusLog = []

  beforeAll(async () => {
    mock = await startMockUpstream()
    gw = await startGateway(mockGatewayFile(mock.url), { upstreamRetries: RETRIES })
    client = clientFor(gw, gw.devKey, log)
  })

  afterAll(async () => {
    expectNoServerErrors(log)
    await gw.close()
    await mock.close()
  })

  const body = (key: string, content = "idempotent hello") => ({
    model: "auto",
    messages: [{ role: "user" as const, content }],
    metadata: { idempotency_key: key }
  })

  it("a replay is byte-identical, flagged, and costs no upstream call and no Credit", async () => {
    const key = freshKey("replay")
    const first = await client.chat.completions.create(body(key)).asResponse()
    expect(first.status).toBe(200)
    expect(first.headers.get("idempotent-replayed")).toBeNull()
    const firstText = await first.text()
    const g = governanceOf(JSON.parse(firstText))
    expect(g.credits_charged).toBeGreaterThan(0)
    const calls = mock.calls
    const before = ledgerState(gw, gw.projectId)

    for (let i = 0; i < 2; i++) {
      const again = await client.chat.completions.create(body(key)).asResponse()
      expect(again.status).toBe(200)
      expect(again.headers.get("idempotent-replayed")).toBe("true")
      expect(again.headers.get("x-request-id")).toBe(g.request_id)
      expect(await again.text()).toBe(firstText)
    }
    expect(mock.calls).toBe(calls)
    expect(ledgerState(gw, gw.projectId)).toEqual(before)
    expect(dbAll(gw, "SELECT id FROM receipts WHERE request_id = ?", g.request_id)).toHaveLength(1)
  })

  it("the Idempotency-Key header works like metadata.idempotency_key, and the SDK sees the same completion", async () => {
    const key = freshKey("header")
    const req = { model: "auto", messages: [{ role: "user" as const, content: "header keyed" }] }
    const first = await client.chat.completions.create(req, { headers: { "Idempotency-Key": key } })
    const calls = mock.calls
    const again = await client.chat.completions.create(req, { headers: { "Idempotency-Key": key } }).withResponse()
    expect(again.response.headers.get("idempotent-replayed")).toBe("true")
    expect(again.data).toEqual(first)
    expect(mock.calls).toBe(calls)
    // A different body under the same header key is a conflict.
    await expectApiError(client.chat.completions.create({ ...req, temperature: 0.5 }, { headers: { "Idempotency-Key": key } }), {
      status: 409,
      code: "idempotency_conflict",
      noRetry: true
    })
  })

  it("a key is canonical over JSON key order: the same payload reordered is a replay, not a conflict", async () => {
    const key = freshKey("canonical")
    const a = await raw(gw, "/v1/chat/completions", { key: gw.devKey, body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "order" }], metadata: { idempotency_key: key } }) }, log)
    const aText = await a.text()
    const calls = mock.calls
    const b = await raw(gw, "/v1/chat/completions", { key: gw.devKey, body: JSON.stringify({ metadata: { idempotency_key: key }, messages: [{ content: "order", role: "user" }], model: "auto" }) }, log)
    expect(b.status).toBe(200)
    expect(b.headers.get("idempotent-replayed")).toBe("true")
    expect(await b.text()).toBe(aText)
    expect(mock.calls).toBe(calls)
  })

  it("a conflict changes nothing: no call, no charge, and the original still replays", async () => {
    const key = freshKey("conflict")
    const original = await client.chat.completions.create(body(key)).asResponse()
    const originalText = await original.text()
    const calls = mock.calls
    const before = ledgerState(gw, gw.projectId)
    const requests = dbGet<{ n: number }>(gw, "SELECT COUNT(*) AS n FROM requests")!.n
    await expectApiError(client.chat.completions.create(body(key, "a different payload")), { status: 409, code: "idempotency_conflict", noRetry: true })
    expect(mock.calls).toBe(calls)
    expect(ledgerState(gw, gw.projectId)).toEqual(before)
    expect(dbGet<{ n: number }>(gw, "SELECT COUNT(*) AS n FROM requests")!.n).toBe(requests)
    const replay = await client.chat.completions.create(body(key)).asResponse()
    expect(replay.headers.get("idempotent-replayed")).toBe("true")
    expect(await replay.text()).toBe(originalText)
  })

  it("N concurrent identical requests make exactly one upstream call and all get the same body", async () => {
    const key = freshKey("concurrent")
    const n = 6
    const calls = mock.calls
    const before = ledgerState(gw, gw.projectId)
    // Only the call that reaches the upstream is slow, so the duplicates overlap it.
    mock.pushBehavior({ delayMs: 400 })
    const responses = await Promise.all(
      Array.from({ length: n }, () => client.chat.completions.create(body(key, "concurrent hello")).asResponse())
    )
    const texts = await Promise.all(responses.map((r) => r.text()))
    expect(responses.map((r) => r.status)).toEqual(Array(n).fill(200))
    expect(mock.calls - calls).toBe(1)
    expect(new Set(texts).size).toBe(1)
    expect(responses.filter((r) => r.headers.get("idempotent-replayed") === "true")).toHaveLength(n - 1)
    const g = governanceOf(JSON.parse(texts[0]!))
    expect(new Set(responses.map((r) => r.headers.get("x-request-id")))).toEqual(new Set([g.request_id]))
    const after = ledgerState(gw, gw.projectId)
    expect(after.receipts - before.receipts).toBe(1)
    expect(after.spent - before.spent).toBe(g.credits_charged)
    expect(after.reserved).toBe(0)
    expect(dbAll(gw, "SELECT id FROM requests WHERE idempotency_key = ?", key)).toHaveLength(1)
  })

  it("a failure that charged nothing releases the key: the retry runs again and succeeds", async () => {
    const key = freshKey("released")
    const calls = mock.calls
    for (let i = 0; i <= RETRIES; i++) mock.pushBehavior({ status: 500 })
    const err = await expectApiError(client.chat.completions.create(body(key, "flaky once")), { status: 503, code: "route_unavailable" })
    expect(mock.calls - calls).toBe(1 + RETRIES)
    const failedId = err.headers!.get("x-request-id")!
    expect(dbAll(gw, "SELECT * FROM idempotency WHERE key = ?", key)).toEqual([])
    expect(dbGet<{ state: string }>(gw, "SELECT state FROM reservations WHERE request_id = ?", failedId)!.state).toBe("voided")
    expect(dbAll(gw, "SELECT id FROM receipts WHERE request_id = ?", failedId)).toEqual([])

    const retried = await client.chat.completions.create(body(key, "flaky once")).withResponse()
    expect(retried.response.headers.get("idempotent-replayed")).toBeNull()
    expect(mock.calls - calls).toBe(2 + RETRIES)
    const g = governanceOf(retried.data)
    expect(g.request_id).not.toBe(failedId)
    expect(g.credits_charged).toBeGreaterThan(0)
    expect(dbGet<{ state: string; request_id: string }>(gw, "SELECT state, request_id FROM idempotency WHERE key = ?", key)).toEqual({
      state: "finished",
      request_id: g.request_id
    })
  })

  it("a streamed response replays byte for byte as the same event stream", async () => {
    const key = freshKey("stream")
    const req = JSON.stringify({ ...body(key, "stream me"), stream: true, stream_options: { include_usage: true } })
    const first = await raw(gw, "/v1/chat/completions", { key: gw.devKey, body: req }, log)
    expect(first.headers.get("content-type")).toMatch(/text\/event-stream/)
    const firstText = await first.text()
    expect(firstText.endsWith("data: [DONE]\n\n")).toBe(true)
    const calls = mock.calls
    const before = ledgerState(gw, gw.projectId)
    const again = await raw(gw, "/v1/chat/completions", { key: gw.devKey, body: req }, log)
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect(again.headers.get("content-type")).toMatch(/text\/event-stream/)
    expect(await again.text()).toBe(firstText)
    expect(mock.calls).toBe(calls)
    expect(ledgerState(gw, gw.projectId)).toEqual(before)

    // The SDK reads the replay like a live stream: same chunks, governance on the last one.
    const chunks: Array<unknown> = []
    for await (const c of await client.chat.completions.create({ ...body(key, "stream me"), stream: true, stream_options: { include_usage: true } })) chunks.push(c)
    const live = firstText
      .split("\n\n")
      .filter((e) => e.startsWith("data: ") && e !== "data: [DONE]")
      .map((e) => JSON.parse(e.slice(6)))
    expect(chunks).toEqual(live)
    expect(governanceOf(chunks.at(-1)).credits_charged).toBeGreaterThan(0)
  })
})
