/**
 * The Anthropic adapter against the real-HTTP mock upstream (POST /v1/messages), plus a few
 * hand-written SSE servers for what the mock cannot send (error events, a stream cut cleanly).
 */
import { Effect, Either } from "effect"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import type { RouteConfig } from "../../src/domain/config.ts"
import { anthropicMessagesUrl, makeAnthropicProvider } from "../../src/providers/anthropic.ts"
import { toAnthropicRequest } from "../../src/providers/anthropic/request.ts"
import type { ChatProvider, UpstreamFailure } from "../../src/providers/Provider.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"

const KEY_ENV = "TOLLGATE_TEST_ANTHROPIC_KEY"
const KEY = "sk-ant-test-secret"
const route: RouteConfig = { name: "claude", provider: "anth", upstream_model: "claude-test", max_output_tokens: 4096, auto: false }

let mock: MockUpstream
beforeAll(async () => {
  process.env[KEY_ENV] = KEY
  mock = await startMockUpstream()
})
afterAll(async () => {
  await mock.close()
  delete process.env[KEY_ENV]
})
afterEach(() => mock.reset())

const withProvider = <A, E>(
  baseUrl: string,
  use: (p: ChatProvider) => Effect.Effect<A, E>,
  timeoutMs = 5000
): Promise<A> =>
  Effect.runPromise(use(makeAnthropicProvider("anth", { type: "anthropic", base_url: baseUrl, api_key_env: KEY_ENV }, timeoutMs)))

const complete = (body: Record<string, unknown>, baseUrl = mock.url) => withProvider(baseUrl, (p) => p.complete(route, body))
const completeFailure = (body: Record<string, unknown>, baseUrl = mock.url, timeoutMs = 5000) =>
  withProvider(baseUrl, (p) => Effect.flip(p.complete(route, body)), timeoutMs)

/** Opens the stream and drains it: the payloads received and how it ended. */
const streamAll = (body: Record<string, unknown>, baseUrl = mock.url) =>
  withProvider(baseUrl, (p) =>
    Effect.scoped(
      Effect.gen(function* () {
        const opened = yield* Effect.either(p.stream(route, body))
        if (Either.isLeft(opened)) return { opened: false as const, failure: opened.left, payloads: [] as Array<string> }
        const payloads: Array<string> = []
        const events = opened.right
        const failure = yield* Effect.promise(async () => {
          try {
            for await (const batch of events) payloads.push(...batch)
            return undefined
          } catch (e) {
            return e as UpstreamFailure
          }
        })
        return { opened: true as const, failure, payloads }
      })
    )
  )

const hello = { model: "claude", messages: [{ role: "user", content: "Say hello to the gateway" }], max_tokens: 256 }

describe("request translation", () => {
  it("sends system, merged messages, params and headers to POST /v1/messages", async () => {
    const reply = await complete({
      model: "claude",
      messages: [
        { role: "system", content: "You are terse." },
        { role: "developer", content: [{ type: "text", text: "Answer in English." }] },
        { role: "user", content: "first" },
        { role: "user", content: [{ type: "text", text: "second" }, { type: "text", text: "" }] },
        { role: "assistant", content: "ok" },
        { role: "user", content: "third" }
      ],
      max_completion_tokens: 300,
      max_tokens: 999,
      temperature: 1.5,
      top_p: 0.9,
      stop: "END",
      user: "u-42",
      stream_options: { include_usage: true },
      presence_penalty: 0.5
    })
    expect(reply.json.object).toBe("chat.completion")
    const req = mock.requests.at(-1)!
    expect(req.method).toBe("POST")
    expect(req.path).toBe("/v1/messages")
    expect(req.headers["x-api-key"]).toBe(KEY)
    expect(req.headers["anthropic-version"]).toBe("2023-06-01")
    expect(req.headers["authorization"]).toBeUndefined()
    expect(String(req.headers["content-type"])).toContain("application/json")
    expect(req.body).toEqual({
      model: "claude-test",
      max_tokens: 300,
      system: "You are terse.\n\nAnswer in English.",
      messages: [
        { role: "user", content: [{ type: "text", text: "first" }, { type: "text", text: "second" }] },
        { role: "assistant", content: "ok" },
        { role: "user", content: "third" }
      ],
      temperature: 1,
      top_p: 0.9,
      stop_sequences: ["END"],
      metadata: { user_id: "u-42" }
    })
  })

  it("works with a base_url given with or without /v1", async () => {
    const bare = mock.url.replace(/\/v1$/, "")
    expect(anthropicMessagesUrl(undefined)).toBe("https://api.anthropic.com/v1/messages")
    expect(anthropicMessagesUrl(`${bare}/`)).toBe(`${bare}/v1/messages`)
    await complete(hello, bare)
    await complete(hello, `${bare}/v1/`)
    expect(mock.requests.map((r) => r.path)).toEqual(["/v1/messages", "/v1/messages"])
  })

  it("falls back to the route's max_output_tokens when no cap is given", () => {
    expect(toAnthropicRequest(route, { messages: [{ role: "user", content: "x" }] }).max_tokens).toBe(4096)
  })

  it("translates function tools, tool calls and tool results", () => {
    const out = toAnthropicRequest(route, {
      messages: [
        { role: "user", content: "weather in Paris?" },
        { role: "assistant", content: null, tool_calls: [{ id: "toolu_1", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } }] },
        { role: "tool", tool_call_id: "toolu_1", content: "18C" },
        { role: "user", content: "and tomorrow?" }
      ],
      tools: [
        { type: "function", function: { name: "weather", description: "Weather now", parameters: { type: "object", properties: { city: { type: "string" } } } } },
        { type: "code_interpreter" }
      ],
      tool_choice: "required",
      parallel_tool_calls: false,
      max_tokens: 10
    })
    expect(out.messages).toEqual([
      { role: "user", content: "weather in Paris?" },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "weather", input: { city: "Paris" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "18C" }, { type: "text", text: "and tomorrow?" }] }
    ])
    expect(out.tools).toEqual([{ name: "weather", description: "Weather now", input_schema: { type: "object", properties: { city: { type: "string" } } } }])
    expect(out.tool_choice).toEqual({ type: "any", disable_parallel_tool_use: true })
  })
})

describe("non-streaming response", () => {
  it("is an OpenAI chat.completion with the mock's reply and usage", async () => {
    mock.pushBehavior({ reply: "Hello, gateway!", usage: { prompt_tokens: 40, completion_tokens: 5 } })
    const reply = await complete(hello)
    expect(JSON.parse(reply.raw)).toEqual(reply.json)
    expect(reply.json).toMatchObject({
      object: "chat.completion",
      model: "claude-test",
      choices: [{ index: 0, message: { role: "assistant", content: "Hello, gateway!" }, finish_reason: "stop" }],
      usage: { prompt_tokens: 40, completion_tokens: 5, total_tokens: 45, prompt_tokens_details: { cached_tokens: 0 } }
    })
    expect(String(reply.json.id)).toMatch(/^msg_/)
    expect(typeof reply.json.created).toBe("number")
    expect((reply.json.choices as Array<{ message: Record<string, unknown> }>)[0]!.message.tool_calls).toBeUndefined()
  })

  it("counts cache reads in prompt_tokens and reports them as cached_tokens", async () => {
    // mock: input_tokens = 100 - 60, cache_read_input_tokens = 60
    mock.pushBehavior({ usage: { prompt_tokens: 100, cached_tokens: 60, completion_tokens: 7 } })
    const reply = await complete(hello)
    expect(reply.json.usage).toMatchObject({ prompt_tokens: 100, completion_tokens: 7, total_tokens: 107, prompt_tokens_details: { cached_tokens: 60 } })
  })

  it("maps stop_reason max_tokens to finish_reason length", async () => {
    const reply = await complete({ ...hello, max_tokens: 3 })
    expect((mock.requests.at(-1)!.body as { max_tokens: number }).max_tokens).toBe(3)
    const choice = (reply.json.choices as Array<{ finish_reason: string }>)[0]!
    expect(choice.finish_reason).toBe("length")
    expect(reply.json.usage).toMatchObject({ completion_tokens: 3 })
  })

  it("has no usage when the upstream reports none", async () => {
    mock.pushBehavior({ omitUsage: true })
    const reply = await complete(hello)
    expect(reply.json.usage).toBeUndefined()
  })
})

describe("streaming response", () => {
  it("translates the event stream into OpenAI chunks ending with a usage chunk", async () => {
    mock.pushBehavior({ reply: "One two three four five six seven.", usage: { prompt_tokens: 50, cached_tokens: 20, completion_tokens: 9 } })
    const { opened, failure, payloads } = await streamAll({ ...hello, stream: true, stream_options: { include_usage: true } })
    expect(opened).toBe(true)
    expect(failure).toBeUndefined()
    expect((mock.requests.at(-1)!.body as { stream?: boolean }).stream).toBe(true)
    const chunks = payloads.map((p) => JSON.parse(p) as { id: string; object: string; model: string; choices: Array<{ delta: Record<string, unknown>; finish_reason: string | null }>; usage?: unknown })
    expect(chunks.length).toBeGreaterThanOrEqual(4)
    for (const c of chunks) {
      expect(c.object).toBe("chat.completion.chunk")
      expect(c.id).toBe(chunks[0]!.id)
      expect(c.model).toBe("claude-test")
    }
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "" })
    const content = chunks.slice(1, -2)
    expect(content.length).toBeGreaterThan(1)
    expect(content.every((c) => c.choices[0]!.finish_reason === null && typeof c.choices[0]!.delta.content === "string")).toBe(true)
    expect(content.map((c) => c.choices[0]!.delta.content).join("")).toBe("One two three four five six seven.")
    const finish = chunks.at(-2)!
    expect(finish.choices).toEqual([{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }])
    const usage = chunks.at(-1)!
    expect(usage.choices).toEqual([])
    expect(usage.usage).toEqual({
      prompt_tokens: 50,
      completion_tokens: 9,
      total_tokens: 59,
      prompt_tokens_details: { cached_tokens: 20 },
      completion_tokens_details: { reasoning_tokens: 0 }
    })
  })

  it("emits the usage chunk even without stream_options, and maps max_tokens to length", async () => {
    const { failure, payloads } = await streamAll({ ...hello, stream: true, max_tokens: 4 })
    expect(failure).toBeUndefined()
    const chunks = payloads.map((p) => JSON.parse(p) as { choices: Array<{ finish_reason: string | null }>; usage?: { completion_tokens: number } })
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe("length")
    expect(chunks.at(-1)!.usage?.completion_tokens).toBe(4)
  })

  it("sends no usage chunk when the upstream reports no usage", async () => {
    mock.pushBehavior({ omitUsage: true })
    const { failure, payloads } = await streamAll({ ...hello, stream: true })
    expect(failure).toBeUndefined()
    const last = JSON.parse(payloads.at(-1)!) as { choices: Array<{ finish_reason: string }>; usage?: unknown }
    expect(last.choices[0]!.finish_reason).toBe("stop")
    expect(payloads.some((p) => "usage" in JSON.parse(p))).toBe(false)
  })

  it("fails the stream when the connection is reset mid-stream", async () => {
    mock.pushBehavior({ resetAfterChunks: 2, chunkDelayMs: 30 })
    const { opened, failure, payloads } = await streamAll({ ...hello, stream: true })
    expect(opened).toBe(true)
    expect(failure).toMatchObject({ _tag: "UpstreamFailure", retryable: true })
    // role chunk + the content chunks that made it: the chunk written right before the reset can be
    // lost in transport (the OpenAI adapter sees the same), so 1 or 2 of the 2 written.
    expect(payloads.length).toBeGreaterThanOrEqual(2)
    expect(payloads.length).toBeLessThanOrEqual(3)
    expect((JSON.parse(payloads[0]!) as { choices: Array<{ delta: unknown }> }).choices[0]!.delta).toEqual({ role: "assistant", content: "" })
    expect(payloads.some((p) => "usage" in JSON.parse(p))).toBe(false)
    expect(payloads.some((p) => (JSON.parse(p) as { choices: Array<{ finish_reason: unknown }> }).choices[0]?.finish_reason === "stop")).toBe(false)
  })

  it("fails to open on an HTTP error status", async () => {
    mock.pushBehavior({ status: 529, reply: "Overloaded" })
    const { opened, failure } = await streamAll({ ...hello, stream: true })
    expect(opened).toBe(false)
    expect(failure).toMatchObject({ reason: "status", status: 529, retryable: true })
    expect(failure!.message).toContain("Overloaded")
  })
})

describe("failures", () => {
  it("529 and 500 are retryable status failures carrying the upstream message", async () => {
    for (const status of [529, 500, 429]) {
      mock.pushBehavior({ status, reply: `boom ${status}` })
      const f = await completeFailure(hello)
      expect(f).toMatchObject({ _tag: "UpstreamFailure", reason: "status", status, retryable: true })
      expect(f.isClientError).toBe(false)
      expect(f.message).toBe(`upstream answered ${status}: boom ${status}`)
    }
  })

  it("400 is a client error, not retryable", async () => {
    mock.pushBehavior({ status: 400, reply: "messages: roles must alternate" })
    const f = await completeFailure(hello)
    expect(f).toMatchObject({ reason: "status", status: 400, retryable: false })
    expect(f.isClientError).toBe(true)
    expect(f.message).toContain("messages: roles must alternate")
  })

  it("a connection reset is a retryable connect failure", async () => {
    mock.pushBehavior({ resetBeforeResponse: true })
    const f = await completeFailure(hello)
    expect(f).toMatchObject({ reason: "connect", retryable: true })
    mock.pushBehavior({ resetBeforeResponse: true })
    const s = await streamAll({ ...hello, stream: true })
    expect(s.opened).toBe(false)
    expect(s.failure).toMatchObject({ reason: "connect", retryable: true })
  })

  it("a slow upstream times out", async () => {
    mock.pushBehavior({ delayMs: 1000 })
    const f = await completeFailure(hello, mock.url, 150)
    expect(f).toMatchObject({ reason: "timeout", retryable: true })
  })

  it("never puts the API key in a failure message", async () => {
    mock.pushBehavior({ status: 401, reply: "invalid x-api-key" })
    const f = await completeFailure(hello)
    expect(f.message).not.toContain(KEY)
  })
})

/** A one-route server that answers 200 with the given body, then ends the response cleanly. */
const fixedServer = async (contentType: string, body: string): Promise<{ url: string; close: () => Promise<void> }> => {
  const server: Server = createServer((req, res) => {
    req.resume()
    req.on("end", () => {
      res.writeHead(200, { "content-type": contentType })
      res.end(body)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      })
  }
}

/** Writes the given Anthropic events as SSE. */
const sseServer = (events: ReadonlyArray<Record<string, unknown>>) =>
  fixedServer("text/event-stream", events.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`).join(""))

const messageStart = { type: "message_start", message: { id: "msg_x", type: "message", role: "assistant", model: "claude-x", content: [], usage: { input_tokens: 12, output_tokens: 1 } } }
const textDelta = (text: string) => ({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text } })

describe("stream events the mock does not send", () => {
  it("an error event before any token fails the stream before it is handed over (retryable when overloaded)", async () => {
    const srv = await sseServer([{ type: "ping" }, { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }])
    try {
      const s = await streamAll({ ...hello, stream: true }, srv.url)
      expect(s.opened).toBe(false)
      expect(s.failure).toMatchObject({ _tag: "UpstreamFailure", retryable: true })
      expect(s.failure!.message).toContain("Overloaded")
    } finally {
      await srv.close()
    }
  })

  it("an error event mid-stream fails the stream; invalid_request_error is not retryable", async () => {
    const srv = await sseServer([
      messageStart,
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      textDelta("partial"),
      { type: "error", error: { type: "invalid_request_error", message: "bad thing" } }
    ])
    try {
      const s = await streamAll({ ...hello, stream: true }, srv.url)
      expect(s.opened).toBe(true)
      expect(s.payloads.map((p) => (JSON.parse(p) as { choices: Array<{ delta: { content?: string } }> }).choices[0]!.delta.content)).toEqual(["", "partial"])
      expect(s.failure).toMatchObject({ _tag: "UpstreamFailure", retryable: false })
      expect(s.failure!.message).toContain("bad thing")
    } finally {
      await srv.close()
    }
  })

  it("a stream that ends without message_stop is a failure, not a complete answer", async () => {
    const srv = await sseServer([messageStart, textDelta("cut here")])
    try {
      const s = await streamAll({ ...hello, stream: true }, srv.url)
      expect(s.opened).toBe(true)
      expect(s.payloads).toHaveLength(2)
      expect(s.failure).toMatchObject({ reason: "protocol", retryable: true })
    } finally {
      await srv.close()
    }
  })

  it("translates tool_use blocks into tool_calls deltas and finish_reason tool_calls", async () => {
    const srv = await sseServer([
      messageStart,
      { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: "toolu_9", name: "weather", input: {} } },
      { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: '{"city":' } },
      { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: '"Paris"}' } },
      { type: "content_block_stop", index: 0 },
      { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 15 } },
      { type: "message_stop" }
    ])
    try {
      const s = await streamAll({ ...hello, stream: true }, srv.url)
      expect(s.failure).toBeUndefined()
      const chunks = s.payloads.map((p) => JSON.parse(p) as { choices: Array<{ delta: { tool_calls?: Array<{ index: number; id?: string; function: { name?: string; arguments: string } }> }; finish_reason: string | null }>; usage?: { prompt_tokens: number; completion_tokens: number } })
      const calls = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])
      expect(calls[0]).toMatchObject({ index: 0, id: "toolu_9", type: "function", function: { name: "weather", arguments: "" } })
      expect(calls.map((c) => c.function.arguments).join("")).toBe('{"city":"Paris"}')
      expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe("tool_calls")
      expect(chunks.at(-1)!.usage).toMatchObject({ prompt_tokens: 12, completion_tokens: 15 })
    } finally {
      await srv.close()
    }
  })
})

describe("non-streaming responses the mock does not send", () => {
  it("translates tool_use blocks into tool_calls with finish_reason tool_calls", async () => {
    const srv = await fixedServer(
      "application/json",
      JSON.stringify({
        id: "msg_t",
        type: "message",
        role: "assistant",
        model: "claude-x",
        content: [
          { type: "thinking", thinking: "hmm", signature: "sig" },
          { type: "text", text: "Checking." },
          { type: "tool_use", id: "toolu_2", name: "weather", input: { city: "Oslo" } }
        ],
        stop_reason: "tool_use",
        stop_sequence: null,
        usage: { input_tokens: 10, cache_creation_input_tokens: 5, cache_read_input_tokens: 3, output_tokens: 20 }
      })
    )
    try {
      const reply = await complete(hello, srv.url)
      expect(reply.json).toMatchObject({
        id: "msg_t",
        model: "claude-x",
        choices: [
          {
            message: { role: "assistant", content: "Checking.", tool_calls: [{ id: "toolu_2", type: "function", function: { name: "weather", arguments: '{"city":"Oslo"}' } }] },
            finish_reason: "tool_calls"
          }
        ],
        usage: { prompt_tokens: 18, completion_tokens: 20, total_tokens: 38, prompt_tokens_details: { cached_tokens: 3 } }
      })
    } finally {
      await srv.close()
    }
  })

  it("a 200 body that is not a message is a protocol failure", async () => {
    const srv = await fixedServer("application/json", "<html>gateway</html>")
    try {
      const f = await completeFailure(hello, srv.url)
      expect(f).toMatchObject({ reason: "protocol", retryable: true })
    } finally {
      await srv.close()
    }
  })
})
