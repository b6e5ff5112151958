/**
 * Streams through the OpenAI SDK (docs/contract.md §6): where governance rides, what is charged when the
 * upstream omits usage, breaks mid-stream or fails before any token, and when the client aborts.
 */
import OpenAI, { APIError, APIUserAbortError } from "openai"
import type { ChatCompletionChunk } from "openai/resources/chat/completions"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chargeFor } from "../../spec/pricing.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { clientFor, dbAll, eventually, expectApiError, expectNoServerErrors, governanceOf, ledgerState, raw, reservationOf, type StatusLog } from "./helpers.ts"

const PRICES = { input: 100_000, output: 1_000_000 } // 1 Credit per output token: partial charges are visible
const RETRIES = 1

interface StoredReceipt {
  request_id: string
  credits_charged: number
  credits_reserved: number
  usage_source: "reported" | "counted"
  tokens: { input: number; cached_input: number; output: number; reasoning: number }
  verification: { state: string; failed_checks: Array<string> }
}

describe("streaming", () => {
  let mock: MockUpstream
  let gw: TestGateway
  let client: OpenAI
  const log: StatusLog = []

  beforeAll(async () => {
    mock = await startMockUpstream()
    gw = await startGateway(
      mockGatewayFile(
        mock.url,
        [
          { name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: true },
          // Routes that always fail, one per scenario, so the working route's breaker never opens.
          { name: "broken-500", provider: "mock", upstream_model: "broken-500-model", max_output_tokens: 256, auto: false },
          { name: "broken-reset", provider: "mock", upstream_model: "broken-reset-model", max_output_tokens: 256, auto: false }
        ],
        { "gpt-test": PRICES }
      ),
      { upstreamRetries: RETRIES }
    )
    client = clientFor(gw, gw.devKey, log)
    mock.behaviorsByModel.set("broken-500-model", { status: 500 })
    mock.behaviorsByModel.set("broken-reset-model", { resetBeforeResponse: true })
  })

  afterAll(async () => {
    expectNoServerErrors(log)
    await gw.close()
    await mock.close()
  })

  const receiptOf = (requestId: string): StoredReceipt | undefined => {
    const row = dbAll<{ body: string }>(gw, "SELECT body FROM receipts WHERE request_id = ?", requestId)[0]
    return row === undefined ? undefined : (JSON.parse(row.body) as StoredReceipt)
  }

  /** Open a stream and read it to the end (or to its error); returns chunks, request id and the error if any. */
  const consume = async (content: string, extra: Record<string, unknown> = {}) => {
    const { data: stream, response } = await client.chat.completions
      .create({ model: "auto", stream: true, messages: [{ role: "user", content }], ...extra } as OpenAI.ChatCompletionCreateParamsStreaming)
      .withResponse()
    expect(response.headers.get("content-type")).toMatch(/text\/event-stream/)
    const requestId = response.headers.get("x-request-id")!
    expect(requestId).toMatch(/^req_/)
    const chunks: Array<ChatCompletionChunk & { governance?: unknown }> = []
    let error: unknown
    try {
      for await (const c of stream) chunks.push(c)
    } catch (e) {
      error = e
    }
    return { chunks, requestId, error }
  }

  const text = (chunks: ReadonlyArray<ChatCompletionChunk>) => chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")

  it("include_usage: governance rides on the usage chunk, the last before [DONE], and matches the receipt", async () => {
    const { chunks, requestId, error } = await consume("stream with usage", { stream_options: { include_usage: true } })
    expect(error).toBeUndefined()
    expect(mock.requests.at(-1)!.body).toMatchObject({ stream: true, stream_options: { include_usage: true } })
    const last = chunks.at(-1)!
    expect(last.choices).toEqual([])
    expect(last.usage!.completion_tokens).toBeGreaterThan(0)
    expect(chunks.slice(0, -1).every((c) => c.governance === undefined && (c.usage ?? null) === null)).toBe(true)
    expect(chunks.some((c) => c.choices[0]?.finish_reason === "stop")).toBe(true)
    expect(text(chunks).length).toBeGreaterThan(0)

    const g = governanceOf(last)
    expect(g.request_id).toBe(requestId)
    expect(g.status).toBe("completed")
    expect(g.verification.state).toBe("verified")
    const receipt = receiptOf(requestId)!
    expect(receipt.usage_source).toBe("reported")
    expect(receipt.tokens.output).toBe(last.usage!.completion_tokens)
    expect(receipt.tokens.input).toBe(last.usage!.prompt_tokens)
    expect(g.credits_charged).toBe(receipt.credits_charged)
    expect(receipt.credits_charged).toBe(chargeFor(receipt.tokens, PRICES))

    // On the wire: the governance chunk is immediately followed by [DONE].
    const res = await raw(gw, "/v1/chat/completions", {
      key: gw.devKey,
      body: JSON.stringify({ model: "auto", stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content: "wire check" }] })
    }, log)
    const events = (await res.text()).split("\n\n").filter((e) => e.length > 0)
    expect(events.at(-1)).toBe("data: [DONE]")
    expect(JSON.parse(events.at(-2)!.slice(6)).governance.request_id).toBe(res.headers.get("x-request-id"))
    expect(events.slice(0, -2).every((e) => !e.includes('"governance"'))).toBe(true)
  })

  for (const variant of [{ label: "stream_options.include_usage false", extra: { stream_options: { include_usage: false } } }, { label: "no stream_options", extra: {} }]) {
    it(`${variant.label}: governance rides on the finish_reason chunk and no usage is sent`, async () => {
      const { chunks, requestId, error } = await consume("stream without usage", variant.extra)
      expect(error).toBeUndefined()
      // The upstream is always asked for usage, so the charge is still the reported one.
      expect(mock.requests.at(-1)!.body).toMatchObject({ stream_options: { include_usage: true } })
      expect(chunks.every((c) => !("usage" in c))).toBe(true)
      expect(chunks.every((c) => c.choices.length === 1)).toBe(true)
      const last = chunks.at(-1)!
      expect(last.choices[0]!.finish_reason).toBe("stop")
      expect(chunks.filter((c) => c.governance !== undefined)).toHaveLength(1)
      const g = governanceOf(last)
      expect(g.request_id).toBe(requestId)
      const receipt = receiptOf(requestId)!
      expect(receipt.usage_source).toBe("reported")
      expect(g.credits_charged).toBe(receipt.credits_charged)
      expect(g.credits_charged).toBeGreaterThan(0)
    })
  }

  for (const includeUsage of [true, false]) {
    it(`upstream omits usage (include_usage ${includeUsage}): charged the counted tokens, > 0 and ≤ reserved`, async () => {
      mock.pushBehavior({ omitUsage: true })
      const { chunks, requestId, error } = await consume("count my tokens please", { stream_options: { include_usage: includeUsage } })
      expect(error).toBeUndefined()
      const last = chunks.at(-1)!
      const g = governanceOf(last)
      const receipt = receiptOf(requestId)!
      expect(receipt.usage_source).toBe("counted")
      expect(receipt.tokens.output).toBeGreaterThan(0)
      expect(receipt.credits_charged).toBeGreaterThan(0)
      expect(receipt.credits_charged).toBeLessThanOrEqual(receipt.credits_reserved)
      expect(receipt.credits_charged).toBe(chargeFor(receipt.tokens, PRICES))
      expect(g.credits_charged).toBe(receipt.credits_charged)
      if (includeUsage) {
        // The client asked for usage: it gets the counted usage on the final chunk.
        expect(last.usage).toMatchObject({ completion_tokens: receipt.tokens.output, prompt_tokens: receipt.tokens.input })
      } else {
        expect(chunks.every((c) => !("usage" in c) || c.usage === null)).toBe(true)
      }
    })
  }

  it("upstream resets mid-stream: iteration throws, and the delivered tokens are charged (counted)", async () => {
    const content = "a stream that will break"
    const whole = await consume(content, { stream_options: { include_usage: true } })
    const fullOutput = whole.chunks.at(-1)!.usage!.completion_tokens

    // Chunks are spaced so those written before the reset reach the gateway ahead of it (bytes that
    // arrive in the same read as the reset are dropped by the HTTP client, and so never delivered).
    mock.pushBehavior({ resetAfterChunks: 3, chunkDelayMs: 20 })
    const before = ledgerState(gw, gw.projectId)
    const { chunks, requestId, error } = await consume(content, { stream_options: { include_usage: true } })
    expect(error).toBeInstanceOf(APIError)
    expect(text(chunks).length).toBeGreaterThan(0)
    expect(text(chunks).length).toBeLessThan(text(whole.chunks).length)

    const receipt = receiptOf(requestId)!
    expect(receipt.usage_source).toBe("counted")
    expect(receipt.tokens.output).toBeGreaterThan(0)
    expect(receipt.tokens.output).toBeLessThan(fullOutput)
    expect(receipt.credits_charged).toBeGreaterThan(0)
    expect(receipt.credits_charged).toBeLessThanOrEqual(receipt.credits_reserved)
    expect(receipt.verification.state).toBe("unverified")
    expect(reservationOf(gw, requestId)).toMatchObject({ state: "settled", charge: receipt.credits_charged })
    const after = ledgerState(gw, gw.projectId)
    expect(after.spent - before.spent).toBe(receipt.credits_charged)
    expect(after.reserved).toBe(0)
    const status = (await client.get(`/requests/${requestId}`)) as { credits_charged: number; receipt_id: string }
    expect(status.credits_charged).toBe(receipt.credits_charged)
  })

  it("upstream fails after the role chunk, before any token: iteration throws, nothing is charged", async () => {
    mock.pushBehavior({ resetAfterChunks: 0 })
    const before = ledgerState(gw, gw.projectId)
    const { chunks, requestId, error } = await consume("no tokens for you", { stream_options: { include_usage: true } })
    expect(error).toBeInstanceOf(APIError)
    expect(text(chunks)).toBe("")
    expect(receiptOf(requestId)).toBeUndefined()
    expect(reservationOf(gw, requestId)).toMatchObject({ state: "voided", charge: 0 })
    const after = ledgerState(gw, gw.projectId)
    expect(after.spent).toBe(before.spent)
    expect(after.reserved).toBe(0)
    expect(after.receipts).toBe(before.receipts)
    const status = (await client.get(`/requests/${requestId}`)) as { status: string; credits_charged: number }
    expect(status).toMatchObject({ status: "failed", credits_charged: 0 })
  })

  for (const failure of [{ label: "answers 500", model: "broken-500" }, { label: "resets the connection", model: "broken-reset" }]) {
    it(`upstream ${failure.label} before the stream opens: 503, nothing charged, reservation voided`, async () => {
      const before = ledgerState(gw, gw.projectId)
      const calls = mock.calls
      const err = await expectApiError(
        client.chat.completions.create({ model: failure.model, stream: true, messages: [{ role: "user", content: "never opens" }] }),
        { status: 503, code: "route_unavailable" }
      )
      expect(mock.calls - calls).toBe(1 + RETRIES)
      const requestId = err.headers!.get("x-request-id")!
      expect(reservationOf(gw, requestId)).toMatchObject({ state: "voided", charge: 0 })
      expect(receiptOf(requestId)).toBeUndefined()
      const after = ledgerState(gw, gw.projectId)
      expect(after.spent).toBe(before.spent)
      expect(after.reserved).toBe(0)
    })
  }

  it("client aborts mid-stream: the hold is resolved (not left 'held'), charged ≤ reserved for what was delivered", async () => {
    // A slow stream, so the abort lands long before the upstream would finish.
    mock.pushBehavior({ chunkDelayMs: 250 })
    const ac = new AbortController()
    const { data: stream, response } = await client.chat.completions
      .create({ model: "auto", stream: true, messages: [{ role: "user", content: "abort me midway" }] }, { signal: ac.signal })
      .withResponse()
    const requestId = response.headers.get("x-request-id")!
    let delivered = ""
    let error: unknown
    try {
      for await (const c of stream) {
        delivered += c.choices[0]?.delta?.content ?? ""
        if (delivered.length > 0) ac.abort()
      }
    } catch (e) {
      error = e
    }
    // The SDK ends an aborted stream quietly (or with its abort error), never with an API error.
    expect(error === undefined || error instanceof APIUserAbortError).toBe(true)
    expect(ac.signal.aborted).toBe(true)
    expect(delivered.length).toBeGreaterThan(0)

    const resolved = await eventually(() => reservationOf(gw, requestId)!, (r) => r.state !== "held", `reservation of ${requestId} to be resolved`)
    expect(resolved.state).toBe("settled")
    expect(resolved.charge!).toBeGreaterThan(0)
    expect(resolved.charge!).toBeLessThanOrEqual(resolved.amount)
    const receipt = receiptOf(requestId)!
    // Settled on the disconnect, from the tokens the gateway had delivered — not after the upstream finished.
    expect(receipt.usage_source).toBe("counted")
    expect(receipt.credits_charged).toBe(resolved.charge)
    await eventually(() => ledgerState(gw, gw.projectId).reserved, (r) => r === 0, "no Credits left reserved")
  })
})
