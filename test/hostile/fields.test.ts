/**
 * Issue 19, finding 7 (smaller): wrongly typed known fields were passed upstream unchecked, and an
 * idempotency key in the header with a different one in metadata was accepted silently.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { useMockedGateway } from "../support/gateway.ts"

describe("request fields (finding 7)", () => {
  const env = useMockedGateway({ beforeAll, afterAll })
  const post = async (body: Record<string, unknown>, headers: Record<string, string> = {}, path = "/v1/chat/completions") => {
    const res = await fetch(`${env.gateway.origin}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${env.gateway.devKey}`, "content-type": "application/json", ...headers },
      body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "hi" }], ...body })
    })
    return { status: res.status, body: (await res.json()) as { error?: Record<string, unknown> } }
  }

  const wrong: ReadonlyArray<readonly [string, unknown]> = [
    ["temperature", "hot"],
    ["top_p", "0.9"],
    ["presence_penalty", true],
    ["frequency_penalty", {}],
    ["n", "1"],
    ["seed", 1.5],
    ["max_tokens", "16"],
    ["max_completion_tokens", -3],
    ["stream", "yes"],
    ["stop", 42],
    ["stop", ["ok", 1]],
    ["logit_bias", { "50256": "-100" }],
    ["logprobs", "true"],
    ["top_logprobs", "5"],
    ["tools", "none"],
    ["tool_choice", 3],
    ["response_format", "json"],
    ["parallel_tool_calls", 1],
    ["user", 12345],
    ["stream_options", { include_usage: "yes" }]
  ]

  it("a wrongly typed known field is a 400 invalid_request_error whose param names it, and never reaches the upstream", async () => {
    const calls = env.upstream.calls
    for (const [field, value] of wrong) {
      const res = await post({ [field]: value })
      expect(res.status, `${field}: ${JSON.stringify(value)}`).toBe(400)
      expect(res.body.error).toMatchObject({ type: "invalid_request_error", code: "invalid_request_error", param: field })
    }
    expect(env.upstream.calls).toBe(calls)
  })

  it("/v1/responses checks the same fields", async () => {
    const res = await fetch(`${env.gateway.url}/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${env.gateway.devKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "auto", input: "hi", temperature: "hot" })
    })
    expect(res.status).toBe(400)
    expect(((await res.json()) as { error: unknown }).error).toMatchObject({ param: "temperature" })
  })

  it("well-typed known fields, null ones and unknown fields of any type pass through to the upstream", async () => {
    const res = await post({ temperature: 0.2, top_p: null, stop: ["\n"], seed: 7, x_vendor_flag: "anything", x_other: [1, { a: null }] })
    expect(res.status).toBe(200)
    expect(env.upstream.requests.at(-1)!.body).toMatchObject({ temperature: 0.2, top_p: null, stop: ["\n"], seed: 7, x_vendor_flag: "anything", x_other: [1, { a: null }] })
  })

  it("an Idempotency-Key header and a different metadata.idempotency_key: 400 naming the metadata field; the same key in both is fine", async () => {
    const calls = env.upstream.calls
    const mismatch = await post({ metadata: { idempotency_key: "key-a" } }, { "idempotency-key": "key-b" })
    expect(mismatch.status).toBe(400)
    expect(mismatch.body.error).toMatchObject({ code: "invalid_request_error", param: "metadata.idempotency_key" })
    expect(env.upstream.calls).toBe(calls)
    const same = await post({ metadata: { idempotency_key: "key-c" } }, { "idempotency-key": "key-c" })
    expect(same.status).toBe(200)
  })
})
