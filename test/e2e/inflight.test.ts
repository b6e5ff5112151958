/**
 * A call in flight keeps its hold and its idempotency claim alive however long it runs (issue 19,
 * finding 3): with a reservation TTL shorter than the upstream call, a retry with the same key
 * waits for the original and replays it — one upstream call, one charge — instead of running again.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile, useMockedGateway } from "../support/gateway.ts"
import { dbAll, governanceOf, ledgerState } from "./helpers.ts"

describe("a non-streamed call that outlives the reservation TTL", () => {
  // A 600 ms TTL: the call's hold and claim are pushed out every 200 ms while its 1.5 s upstream call runs.
  const h = useMockedGateway({ beforeAll, afterAll }, (url) => mockGatewayFile(url), { reservationTtlMs: 600 })

  it("keeps its hold and claim alive; a retry with the same key replays it, charged once", async () => {
    const { gateway, upstream } = h
    upstream.pushBehavior({ delayMs: 1_500 })
    const call = () =>
      fetch(`${gateway.url}/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${gateway.devKey}`, "content-type": "application/json", "idempotency-key": "slow-call-1" },
        body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "a slow answer" }] })
      })
    const first = call()
    // Past the first deadline (600 ms), while the upstream still works on the original.
    await new Promise((resolve) => setTimeout(resolve, 1_000))
    const held = dbAll<{ deadline: number; created_at: number }>(gateway, "SELECT deadline, created_at FROM reservations WHERE state = 'held'")
    expect(held).toHaveLength(1)
    expect(held[0]!.deadline).toBeGreaterThan(held[0]!.created_at + 600)
    const retry = call()
    const [a, b] = await Promise.all([first, retry])
    expect([a.status, b.status]).toEqual([200, 200])
    expect(b.headers.get("idempotent-replayed")).toBe("true")
    const [ga, gb] = [governanceOf(await a.json()), governanceOf(await b.json())]
    expect(gb.receipt_id).toBe(ga.receipt_id)
    expect(upstream.calls).toBe(1)
    const state = ledgerState(gateway, gateway.projectId)
    expect(state).toMatchObject({ reserved: 0, receipts: 1, spent: ga.credits_charged, reservations: { settled: 1 } })
  })
})

describe("a duplicate whose wait for its in-flight original runs out", () => {
  const h = useMockedGateway({ beforeAll, afterAll }, (url) => mockGatewayFile(url), { inflightWaitMs: 200 })

  it("is told to come back: 409 idempotency_conflict with Retry-After and x-should-retry: true, then the retry replays", async () => {
    const { gateway, upstream } = h
    upstream.pushBehavior({ delayMs: 1_200 })
    const call = () =>
      fetch(`${gateway.url}/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${gateway.devKey}`, "content-type": "application/json", "idempotency-key": "busy-1" },
        body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "still thinking" }] })
      })
    const first = call()
    await new Promise((resolve) => setTimeout(resolve, 300))
    const early = await call()
    expect(early.status).toBe(409)
    expect(early.headers.get("x-should-retry")).toBe("true")
    expect(Number(early.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
    expect(((await early.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: "idempotency_conflict", message: expect.stringMatching(/still in progress; retry after 1 s/) })
    expect((await first).status).toBe(200)
    const later = await call()
    expect(later.status).toBe(200)
    expect(later.headers.get("idempotent-replayed")).toBe("true")
    expect(upstream.calls).toBe(1)
  })
})
