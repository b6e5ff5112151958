/**
 * Every stable error code (docs/contract.md §9, 400 and 413 included) through the official OpenAI
 * SDK against a running gateway: status, the `{error:{message,type,code,param}}` body, the headers
 * that tell SDKs whether to retry, and that a rejected call changed nothing it should not have.
 */
import type OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { formatKey, parseKey } from "../../src/domain/apiKey.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import {
  clientFor,
  dbAll,
  dbGet,
  expectApiError,
  expectNoServerErrors,
  expectWireError,
  governanceOf,
  ledgerState,
  newProject,
  raw,
  type StatusLog
} from "./helpers.ts"

const MAX_BODY = 4096
const RETRIES = 1
const hello = [{ role: "user" as const, content: "hello there" }]

describe("errors: one test per stable code", () => {
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
          // Each deliberately failing scenario has its own route, so no route's breaker opens mid-file.
          { name: "flaky", provider: "mock", upstream_model: "flaky-model", max_output_tokens: 256, auto: false },
          { name: "flaky-too", provider: "mock", upstream_model: "flaky-model", max_output_tokens: 256, auto: false },
          { name: "resetting", provider: "mock", upstream_model: "reset-model", max_output_tokens: 256, auto: false },
          { name: "picky", provider: "mock", upstream_model: "picky-model", max_output_tokens: 256, auto: false }
        ],
        // 1 Credit per output token, 0.1 per input token: budgets are easy to reason about.
        { "gpt-test": { input: 100_000, output: 1_000_000 } }
      ),
      { maxBodyBytes: MAX_BODY, upstreamRetries: RETRIES }
    )
    mock.behaviorsByModel.set("flaky-model", { status: 500 })
    mock.behaviorsByModel.set("reset-model", { resetBeforeResponse: true })
    mock.behaviorsByModel.set("picky-model", { status: 400, reply: "Invalid value for 'temperature'." })
    client = clientFor(gw, gw.devKey, log)
  })

  afterAll(async () => {
    expectNoServerErrors(log)
    await gw.close()
    await mock.close()
  })

  const requestRows = () => dbGet<{ n: number }>(gw, "SELECT COUNT(*) AS n FROM requests")!.n

  /** Run `f`, and check it neither reached the upstream nor wrote a governed request. */
  const touchesNothing = async <T>(f: () => Promise<T>): Promise<T> => {
    const calls = mock.calls
    const rows = requestRows()
    const reservations = dbGet<{ n: number }>(gw, "SELECT COUNT(*) AS n FROM reservations")!.n
    const out = await f()
    expect(mock.calls).toBe(calls)
    expect(requestRows()).toBe(rows)
    expect(dbGet<{ n: number }>(gw, "SELECT COUNT(*) AS n FROM reservations")!.n).toBe(reservations)
    return out
  }

  describe("401 invalid_api_key", () => {
    const want = { status: 401, code: "invalid_api_key", type: "invalid_request_error", param: null, noRetry: true } as const

    it("missing key (SDK with the Authorization header removed, and a raw call)", async () => {
      await touchesNothing(async () => {
        await expectApiError(client.chat.completions.create({ model: "auto", messages: hello }, { headers: { Authorization: null } }), {
          ...want,
          message: /missing/i
        })
        await expectWireError(await raw(gw, "/v1/chat/completions", { body: JSON.stringify({ model: "auto", messages: hello }) }, log), want)
      })
    })

    it("malformed key: not a Tollgate token, or a Tollgate token whose checksum is broken", async () => {
      const last = gw.devKey.at(-1) === "a" ? "b" : "a"
      const damaged = gw.devKey.slice(0, -1) + last
      await touchesNothing(async () => {
        for (const key of ["sk-not-a-tollgate-key", damaged, `${gw.devKey} extra`]) {
          await expectApiError(clientFor(gw, key, log).chat.completions.create({ model: "auto", messages: hello }), { ...want, message: /malformed/i })
        }
      })
    })

    it("unknown key: well-formed with a valid checksum, but no such key id, a wrong secret, or the wrong environment", async () => {
      const dev = parseKey(gw.devKey)!
      expect(dev).toBeDefined()
      const unknownId = formatKey("key_aaaaaaaaaaaaaaaa", "development", dev.secret)
      const wrongSecret = formatKey(dev.keyId, "development", dev.secret === "a".repeat(32) ? "b".repeat(32) : "a".repeat(32))
      const wrongEnv = formatKey(dev.keyId, "production", dev.secret)
      await touchesNothing(async () => {
        for (const key of [unknownId, wrongSecret, wrongEnv]) {
          expect(parseKey(key)).toBeDefined()
          await expectApiError(clientFor(gw, key, log).chat.completions.create({ model: "auto", messages: hello }), { ...want, message: /unknown/i })
        }
      })
    })

    it("revoked key", async () => {
      const p = await newProject(gw)
      const c = clientFor(gw, p.key, log)
      await c.chat.completions.create({ model: "auto", messages: hello })
      const revoked = await gw.admin("POST", `/admin/v1/keys/${p.keyId}/revoke`)
      expect(revoked.status).toBe(200)
      await touchesNothing(() => expectApiError(c.chat.completions.create({ model: "auto", messages: hello }), { ...want, message: /revoked/i }))
    })

    it("metadata.project_id naming another project", async () => {
      const other = await newProject(gw)
      await touchesNothing(() =>
        expectApiError(client.chat.completions.create({ model: "auto", messages: hello, metadata: { project_id: other.projectId } }), {
          ...want,
          message: /project/
        })
      )
      // Control: the key's own project is accepted.
      const ok = await client.chat.completions.create({ model: "auto", messages: hello, metadata: { project_id: gw.projectId } })
      expect(governanceOf(ok).status).toBe("completed")
    })

    it("metadata.environment other than the key's", async () => {
      await touchesNothing(() =>
        expectApiError(client.chat.completions.create({ model: "auto", messages: hello, metadata: { environment: "production" } }), {
          ...want,
          message: /environment/
        })
      )
      const ok = await client.chat.completions.create({ model: "auto", messages: hello, metadata: { environment: "development" } })
      expect(governanceOf(ok).status).toBe("completed")
    })
  })

  describe("402 budget_exceeded", () => {
    const want = { status: 402, code: "budget_exceeded", noRetry: true } as const

    it("the project's cap: a zero budget, and a max_tokens whose worst case does not fit (param: the scope that refused)", async () => {
      const broke = await newProject(gw, { budget: 0 })
      const small = await newProject(gw, { budget: 10 })
      await touchesNothing(async () => {
        await expectApiError(clientFor(gw, broke.key, log).chat.completions.create({ model: "auto", messages: hello }), { ...want, param: "project", message: /project's remaining budget/ })
        await expectApiError(clientFor(gw, small.key, log).chat.completions.create({ model: "auto", messages: hello, max_tokens: 100 }), {
          ...want,
          param: "project"
        })
      })
      for (const p of [broke, small]) {
        expect(ledgerState(gw, p.projectId)).toMatchObject({ spent: 0, reserved: 0, receipts: 0, reservations: {}, requests: {} })
      }
    })

    it("metadata.max_credits below the worst case names metadata.max_credits", async () => {
      await touchesNothing(() =>
        expectApiError(
          client.chat.completions.create({ model: "auto", messages: hello, max_tokens: 100, metadata: { max_credits: "5" } }),
          { ...want, param: "metadata.max_credits", message: /max_credits/ }
        )
      )
    })

    it("X-Max-Credits below the worst case names X-Max-Credits", async () => {
      await touchesNothing(() =>
        expectApiError(client.chat.completions.create({ model: "auto", messages: hello, max_tokens: 100 }, { headers: { "X-Max-Credits": "5" } }), {
          ...want,
          param: "X-Max-Credits"
        })
      )
    })

    it("without max_tokens, X-Max-Credits caps the output instead: the charge stays within it", async () => {
      const limit = 12
      const { data, response } = await client.chat.completions
        .create({ model: "auto", messages: [{ role: "user", content: "tell me a long story" }] }, { headers: { "X-Max-Credits": String(limit) } })
        .withResponse()
      const g = governanceOf(data)
      const sent = mock.requests.at(-1)!.body as { max_tokens: number }
      expect(sent.max_tokens).toBeGreaterThanOrEqual(1)
      expect(sent.max_tokens).toBeLessThanOrEqual(limit)
      const reserved = dbGet<{ amount: number }>(gw, "SELECT amount FROM reservations WHERE request_id = ?", g.request_id)!.amount
      expect(reserved).toBeLessThanOrEqual(limit)
      expect(g.credits_charged).toBeGreaterThan(0)
      expect(g.credits_charged).toBeLessThanOrEqual(reserved)
      expect(response.headers.get("x-request-id")).toBe(g.request_id)
    })

    it("a max_credits that is not a decimal integer is a 400 naming the field", async () => {
      await touchesNothing(() =>
        expectApiError(client.chat.completions.create({ model: "auto", messages: hello, metadata: { max_credits: "ten" } }), {
          status: 400,
          code: "invalid_request_error",
          param: "metadata.max_credits"
        })
      )
    })
  })

  describe("404 request_not_found", () => {
    it("an unknown request id, on the status and the receipt endpoints", async () => {
      for (const path of ["/requests/req_doesnotexist000000000000", "/requests/req_doesnotexist000000000000/receipt", "/requests/nonsense"]) {
        await expectApiError(client.get(path), { status: 404, code: "request_not_found", type: "invalid_request_error", param: null, noRetry: true })
      }
    })

    it("a failed request has a status but no receipt", async () => {
      const err = await expectApiError(client.chat.completions.create({ model: "flaky-too", messages: hello }), { status: 503, code: "route_unavailable" })
      const id = err.headers!.get("x-request-id")!
      expect(id).toMatch(/^req_/)
      const status = (await client.get(`/requests/${id}`)) as { status: string }
      expect(status.status).toBe("failed")
      await expectApiError(client.get(`/requests/${id}/receipt`), { status: 404, code: "request_not_found" })
    })
  })

  describe("409 idempotency_conflict", () => {
    it("the same key with another payload is rejected and changes nothing", async () => {
      const key = `conflict-${Date.now()}`
      const first = await client.chat.completions.create({ model: "auto", messages: hello, metadata: { idempotency_key: key } })
      const before = ledgerState(gw, gw.projectId)
      const stored = dbGet<{ body: Buffer; request_id: string }>(gw, "SELECT body, request_id FROM idempotency WHERE key = ?", key)!
      await touchesNothing(() =>
        expectApiError(
          client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "something else" }], metadata: { idempotency_key: key } }),
          { status: 409, code: "idempotency_conflict", type: "invalid_request_error", param: null, noRetry: true }
        )
      )
      expect(ledgerState(gw, gw.projectId)).toEqual(before)
      const after = dbGet<{ body: Buffer; request_id: string }>(gw, "SELECT body, request_id FROM idempotency WHERE key = ?", key)!
      expect(after.request_id).toBe(stored.request_id)
      expect(Buffer.compare(after.body, stored.body)).toBe(0)
      expect(after.request_id).toBe(governanceOf(first).request_id)
    })
  })

  describe("422 unsupported_workflow", () => {
    const want = { status: 422, code: "unsupported_workflow", noRetry: true } as const

    it("an image_url content part", async () => {
      await touchesNothing(() =>
        expectApiError(
          client.chat.completions.create({
            model: "auto",
            messages: [{ role: "user", content: [{ type: "text", text: "what is this?" }, { type: "image_url", image_url: { url: "https://example.com/cat.png" } }] }]
          }),
          { ...want, param: "messages[0].content[1].type", message: /image_url/ }
        )
      )
    })

    it("modalities with audio, and an audio output request", async () => {
      await touchesNothing(async () => {
        await expectApiError(client.chat.completions.create({ model: "auto", messages: hello, modalities: ["text", "audio"] }), { ...want, param: "modalities" })
        await expectApiError(
          client.chat.completions.create({ model: "auto", messages: hello, modalities: ["text"], audio: { voice: "alloy", format: "mp3" } }),
          { ...want, param: "audio" }
        )
      })
    })

    it("touches no idempotency state: the key is still free afterwards", async () => {
      const key = `unsupported-${Date.now()}`
      await expectApiError(
        client.chat.completions.create({
          model: "auto",
          messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: "AAAA", format: "wav" } }] }],
          metadata: { idempotency_key: key }
        }),
        want
      )
      expect(dbAll(gw, "SELECT * FROM idempotency WHERE key = ?", key)).toEqual([])
      const ok = await client.chat.completions.create({ model: "auto", messages: hello, metadata: { idempotency_key: key } }).withResponse()
      expect(ok.response.headers.get("idempotent-replayed")).toBeNull()
      expect(governanceOf(ok.data).status).toBe("completed")
    })
  })

  describe("429 rate_limited", () => {
    it("a burst over the project's limit gets Retry-After, and nothing is governed", async () => {
      const p = await newProject(gw, { rpm: 1, burst: 1 })
      const c = clientFor(gw, p.key, log)
      const first = await c.chat.completions.create({ model: "auto", messages: hello }).withResponse()
      expect(first.response.headers.get("x-ratelimit-limit-requests")).toBe("1")
      expect(first.response.headers.get("x-ratelimit-remaining-requests")).toBe("0")
      const before = ledgerState(gw, p.projectId)
      const err = await touchesNothing(() =>
        expectApiError(c.chat.completions.create({ model: "auto", messages: hello }), { status: 429, code: "rate_limited", type: "rate_limit_error", param: "project.rate_limit.requests_per_minute" })
      )
      const retryAfter = err.headers!.get("retry-after")
      expect(retryAfter).toMatch(/^\d+$/)
      expect(Number(retryAfter)).toBeGreaterThanOrEqual(1)
      expect(Number(retryAfter)).toBeLessThanOrEqual(60)
      expect(ledgerState(gw, p.projectId)).toEqual(before)
      // The limit is per project: the default project is not affected.
      expect(governanceOf(await client.chat.completions.create({ model: "auto", messages: hello })).status).toBe("completed")
    })
  })

  describe("503 route_unavailable", () => {
    const want = { status: 503, code: "route_unavailable", type: "server_error", param: null } as const

    it("an unknown model: nothing is tried, and retrying cannot help", async () => {
      await touchesNothing(() =>
        expectApiError(client.chat.completions.create({ model: "no-such-model", messages: hello }), { ...want, noRetry: true, message: /no-such-model/ })
      )
    })

    const failedRoute = async (model: string, cause: RegExp) => {
      const calls = mock.calls
      const before = ledgerState(gw, gw.projectId)
      const err = await expectApiError(client.chat.completions.create({ model, messages: hello }), { ...want, message: cause })
      expect(mock.calls - calls).toBe(1 + RETRIES)
      const id = err.headers!.get("x-request-id")!
      expect(id).toMatch(/^req_/)
      const status = (await client.get(`/requests/${id}`)) as { status: string; credits_charged: number; attempts: Array<{ outcome: string; route: string }>; error: { code: string } }
      expect(status.status).toBe("failed")
      expect(status.credits_charged).toBe(0)
      expect(status.error.code).toBe("route_unavailable")
      expect(status.attempts).toHaveLength(1 + RETRIES)
      expect(status.attempts.every((a) => a.outcome === "error" && a.route === model)).toBe(true)
      const after = ledgerState(gw, gw.projectId)
      expect(after.spent).toBe(before.spent)
      expect(after.reserved).toBe(0)
      expect(after.receipts).toBe(before.receipts)
      expect(dbGet<{ state: string }>(gw, "SELECT state FROM reservations WHERE request_id = ?", id)!.state).toBe("voided")
      return status
    }

    it("the upstream answers 500 on every attempt", async () => {
      const status = await failedRoute("flaky", /500/)
      expect(status.attempts.every((a) => (a as { status?: number }).status === 500)).toBe(true)
    })

    it("the upstream resets the connection on every attempt", async () => {
      await failedRoute("resetting", /reach|socket|reset|closed|terminated|connect/i)
    })

    it("an upstream 4xx caused by the request is a 400, not retried, not charged", async () => {
      const calls = mock.calls
      const err = await expectApiError(client.chat.completions.create({ model: "picky", messages: hello }), {
        status: 400,
        code: "invalid_request_error",
        message: /temperature/
      })
      expect(mock.calls - calls).toBe(1)
      const status = (await client.get(`/requests/${err.headers!.get("x-request-id")!}`)) as { status: string; credits_charged: number }
      expect(status).toMatchObject({ status: "failed", credits_charged: 0 })
    })
  })

  describe("400 invalid_request_error", () => {
    const want = { status: 400, code: "invalid_request_error", type: "invalid_request_error", noRetry: true } as const
    const send = (body: unknown) => client.chat.completions.create(body as never)

    it("malformed JSON, an empty body and a non-object body", async () => {
      await touchesNothing(async () => {
        for (const body of ['{"model": "auto", "messages": [', "", "[1, 2, 3]", "null"]) {
          await expectWireError(await raw(gw, "/v1/chat/completions", { key: gw.devKey, body }, log), { ...want, param: null })
        }
      })
    })

    it("missing model, missing messages, empty messages", async () => {
      await touchesNothing(async () => {
        await expectApiError(send({ messages: hello }), { ...want, param: "model", message: /model/ })
        await expectApiError(send({ model: "auto" }), { ...want, param: "messages", message: /messages/ })
        await expectApiError(send({ model: "auto", messages: [] }), { ...want, param: "messages" })
      })
    })

    it("fields of the wrong type name the offending field", async () => {
      const cases: Array<[Record<string, unknown>, string]> = [
        [{ model: 123, messages: hello }, "model"],
        [{ model: "auto", messages: "hello" }, "messages"],
        [{ model: "auto", messages: ["hello"] }, "messages[0]"],
        [{ model: "auto", messages: [{ role: "user", content: 5 }] }, "messages[0].content"],
        [{ model: "auto", messages: [{ role: "wizard", content: "hi" }] }, "messages[0].role"],
        [{ model: "auto", messages: hello, max_tokens: "ten" }, "max_tokens"],
        [{ model: "auto", messages: hello, max_tokens: 0 }, "max_tokens"],
        [{ model: "auto", messages: hello, stream: "yes" }, "stream"],
        [{ model: "auto", messages: hello, metadata: { tier: 1 } }, "metadata.tier"],
        [{ model: "auto", messages: hello, metadata: { idempotency_key: "" } }, "metadata.idempotency_key"]
      ]
      await touchesNothing(async () => {
        for (const [body, param] of cases) await expectApiError(send(body), { ...want, param })
      })
    })
  })

  describe("413 for an oversized body", () => {
    const want = { status: 413, code: "request_too_large", param: null, noRetry: true } as const
    const big = [{ role: "user" as const, content: "x".repeat(MAX_BODY * 2) }]

    it("a body over the limit, declared by Content-Length", async () => {
      await touchesNothing(() => expectApiError(client.chat.completions.create({ model: "auto", messages: big }), { ...want, message: new RegExp(String(MAX_BODY)) }))
    })

    it("a chunked body over the limit, without Content-Length", async () => {
      const bytes = new TextEncoder().encode(JSON.stringify({ model: "auto", messages: big }))
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          for (let i = 0; i < bytes.length; i += 1024) controller.enqueue(bytes.slice(i, i + 1024))
          controller.close()
        }
      })
      await touchesNothing(async () => {
        const res = await fetch(`${gw.url}/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${gw.devKey}`, "content-type": "application/json" },
          body,
          duplex: "half"
        } as RequestInit)
        log.push(res.status)
        await expectWireError(res, want)
      })
    })

    it("a body just under the limit is served", async () => {
      const fits = [{ role: "user" as const, content: "y ".repeat(MAX_BODY / 4) }]
      expect(JSON.stringify({ model: "auto", messages: fits }).length).toBeLessThan(MAX_BODY)
      expect(governanceOf(await client.chat.completions.create({ model: "auto", messages: fits })).status).toBe("completed")
    })
  })
})
