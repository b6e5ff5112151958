import { Either } from "effect"
import fc from "fast-check"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parseChatRequest } from "../../src/domain/chat.ts"
import { responsesToChat } from "../../src/services/surfaces/responses.ts"
import { useMockedGateway } from "../support/gateway.ts"

/** Chat-only names: a /v1/responses client never sent them, so no error of that endpoint may name them. */
const CHAT_ONLY = /\b(messages|max_tokens|max_completion_tokens|response_format|stream_options)\b/

describe("POST /v1/responses through the official SDK", () => {
  const env = useMockedGateway({ beforeAll, afterAll })
  let client: OpenAI
  beforeAll(() => {
    client = new OpenAI({ baseURL: env.gateway.url, apiKey: env.gateway.devKey, maxRetries: 0 })
  })

  it("responses.create: string input and instructions reach the upstream as messages; output_text and governance come back", async () => {
    env.upstream.pushBehavior({ reply: "Paris is the capital of France." })
    const before = env.upstream.requests.length
    const response = await client.responses.create({
      model: "gpt-test",
      instructions: "Answer briefly.",
      input: "What is the capital of France?",
      max_output_tokens: 50
    })
    expect(response.output_text).toBe("Paris is the capital of France.")
    expect(response.status).toBe("completed")
    const sent = env.upstream.requests[before]!.body as { messages: Array<{ role: string; content: string }>; max_tokens: number }
    expect(sent.messages).toEqual([
      { role: "system", content: "Answer briefly." },
      { role: "user", content: "What is the capital of France?" }
    ])
    expect(sent.max_tokens).toBe(50)
    const governance = (response as unknown as { governance: any }).governance
    expect(governance.status).toBe("completed")
    expect(response.usage!.output_tokens).toBeGreaterThan(0)
    const receipt: any = await (await fetch(`${env.gateway.url}/requests/${governance.request_id}/receipt`, { headers: { authorization: `Bearer ${env.gateway.devKey}` } })).json()
    expect(receipt.credits_charged).toBe(governance.credits_charged)
    expect(receipt.tokens.input + receipt.tokens.cached_input).toBe(response.usage!.input_tokens)
    const status: any = await (await fetch(`${env.gateway.url}/requests/${governance.request_id}`, { headers: { authorization: `Bearer ${env.gateway.devKey}` } })).json()
    expect(status.endpoint).toBe("/v1/responses")
  })

  it("responses.create: message items with input_text parts; truncation by max_output_tokens is 'incomplete'", async () => {
    env.upstream.pushBehavior({ reply: "one two three four five six seven eight nine ten eleven twelve" })
    const response = await client.responses.create({
      model: "auto",
      input: [{ role: "user", content: [{ type: "input_text", text: "count" }] }],
      max_output_tokens: 3
    })
    expect(response.status).toBe("incomplete")
    expect(response.incomplete_details?.reason).toBe("max_output_tokens")
    expect(response.usage!.output_tokens).toBe(3)
  })

  it("responses.stream: the SDK accumulates the event sequence into the final response, which carries governance", async () => {
    env.upstream.pushBehavior({ reply: "Streaming through the gateway works." })
    const stream = client.responses.stream({ model: "gpt-test", input: "stream it" })
    const deltas: Array<string> = []
    stream.on("response.output_text.delta", (e) => deltas.push(e.delta))
    const final = await stream.finalResponse()
    expect(deltas.join("")).toBe("Streaming through the gateway works.")
    expect(final.output_text).toBe("Streaming through the gateway works.")
    expect(final.status).toBe("completed")
    const governance = (final as unknown as { governance: any }).governance
    expect(governance.credits_charged).toBeGreaterThan(0)
    expect(final.usage!.total_tokens).toBe(final.usage!.input_tokens + final.usage!.output_tokens)
  })

  it("responses.create with stream: true yields the documented events in order", async () => {
    const events: Array<string> = []
    const stream = await client.responses.create({ model: "gpt-test", input: "hello", stream: true })
    for await (const e of stream) events.push(e.type)
    expect(events.slice(0, 4)).toEqual(["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"])
    expect(events).toContain("response.output_text.delta")
    expect(events.slice(-4)).toEqual(["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"])
  })

  it("an image input is 422 unsupported_workflow; previous_response_id is 422; missing input is 400", async () => {
    const post = (body: unknown) =>
      fetch(`${env.gateway.url}/responses`, { method: "POST", headers: { authorization: `Bearer ${env.gateway.devKey}`, "content-type": "application/json" }, body: JSON.stringify(body) })
    const image = await post({ model: "auto", input: [{ role: "user", content: [{ type: "input_image", image_url: "https://x/y.png" }] }] })
    expect(image.status).toBe(422)
    expect(((await image.json()) as any).error.code).toBe("unsupported_workflow")
    const prev = await post({ model: "auto", input: "hi", previous_response_id: "resp_1" })
    expect(prev.status).toBe(422)
    const missing = await post({ model: "auto" })
    expect(missing.status).toBe(400)
    expect(((await missing.json()) as any).error.param).toBe("input")
  })

  it("idempotent replay of a Responses call returns the same bytes and calls the upstream once", async () => {
    const body = JSON.stringify({ model: "gpt-test", input: "once", metadata: { idempotency_key: "resp-once-1" } })
    const post = () =>
      fetch(`${env.gateway.url}/responses`, { method: "POST", headers: { authorization: `Bearer ${env.gateway.devKey}`, "content-type": "application/json" }, body })
    const calls = env.upstream.calls
    const first = await post()
    const second = await post()
    expect(await second.text()).toBe(await first.text())
    expect(second.headers.get("idempotent-replayed")).toBe("true")
    expect(env.upstream.calls - calls).toBe(1)
  })

  it("a refused Responses field is named as the Responses API names it (issue 38, finding 7): max_output_tokens, input, input[i].role, tools", async () => {
    const post = (body: Record<string, unknown>) =>
      fetch(`${env.gateway.url}/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${env.gateway.devKey}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "auto", ...body })
      })
    const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
      [{ input: "hi", max_output_tokens: 0 }, "max_output_tokens"],
      [{ input: "hi", max_output_tokens: -5 }, "max_output_tokens"],
      [{ input: "hi", max_output_tokens: "16" }, "max_output_tokens"],
      [{ input: "hi", max_output_tokens: 1.5 }, "max_output_tokens"],
      [{ input: [] }, "input"],
      [{ instructions: "Be brief.", input: [{ role: "robot", content: "hi" }] }, "input[0].role"],
      [{ input: [{ role: "user", content: "a" }, { role: "tool", content: "b" }] }, "input[1].role"],
      [{ input: [{ type: "function_call_output", output: "42" }] }, "input[0].call_id"],
      [{ input: [{ type: "function_call", call_id: "c1", name: "f" }] }, "input[0].arguments"],
      [{ input: "hi", tools: "none" }, "tools"]
    ]
    const calls = env.upstream.calls
    for (const [body, param] of cases) {
      const res = await post(body)
      const error = ((await res.json()) as { error: { message: string; param: string } }).error
      expect(res.status, JSON.stringify(body)).toBe(400)
      expect(error.param, JSON.stringify(body)).toBe(param)
      expect(error.message).toContain(param)
      expect(error.message).not.toMatch(CHAT_ONLY)
    }
    expect(env.upstream.calls).toBe(calls)
  })

  it("property: a Responses body the gateway refuses is refused in the Responses API's words — no param or message names a chat-only field", () => {
    const anyValue = fc.oneof(fc.integer({ min: -3, max: 3 }), fc.double(), fc.string({ maxLength: 3 }), fc.boolean(), fc.constant(null), fc.constant([]), fc.constant({}))
    const item = fc.record(
      {
        type: fc.constantFrom("message", "function_call", "function_call_output"),
        role: fc.oneof(fc.constantFrom("user", "assistant", "system", "developer", "tool", "function", "robot"), anyValue),
        content: fc.oneof(fc.string({ maxLength: 3 }), anyValue),
        call_id: fc.oneof(fc.constant("call_1"), anyValue),
        name: fc.oneof(fc.constant("f"), anyValue),
        arguments: fc.oneof(fc.constant("{}"), anyValue),
        output: anyValue
      },
      { requiredKeys: [] }
    )
    const body = fc.record(
      {
        model: fc.oneof(fc.constant("auto"), anyValue),
        instructions: fc.oneof(fc.string({ maxLength: 3 }), anyValue),
        input: fc.oneof(fc.string({ maxLength: 3 }), fc.array(item, { maxLength: 3 }), anyValue),
        max_output_tokens: fc.oneof(fc.integer({ min: -2, max: 100 }), anyValue),
        tools: fc.oneof(fc.constant([{ type: "function", name: "f" }]), anyValue),
        text: fc.oneof(fc.constant({ format: { type: "json_object" } }), anyValue),
        stream: anyValue,
        temperature: anyValue
      },
      { requiredKeys: [] }
    )
    fc.assert(
      fc.property(body, (b) => {
        // What the gateway runs on a /v1/responses body: the translation, then the chat parser (admitRequest).
        const refused = Either.flatMap(responsesToChat(b), (chat) => Either.map(parseChatRequest(chat), () => chat))
        if (Either.isRight(refused)) return
        expect(refused.left.param ?? "").not.toMatch(CHAT_ONLY)
        expect(refused.left.message).not.toMatch(CHAT_ONLY)
      }),
      { numRuns: 2000 }
    )
  })
})
