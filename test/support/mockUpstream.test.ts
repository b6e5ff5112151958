import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import OpenAI from "openai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { defaultReply, splitIntoChunks, startMockUpstream } from "./mockUpstream.ts"
import type { MockUpstream } from "./mockUpstream.ts"

let mock: MockUpstream
let client: OpenAI

beforeAll(async () => {
  mock = await startMockUpstream()
  client = new OpenAI({ baseURL: mock.url, apiKey: "x", maxRetries: 0 })
})

afterAll(async () => {
  await mock.close()
})

beforeEach(() => {
  mock.reset()
})

const user = (content: string) => [{ role: "user" as const, content }]

/** Reads a raw SSE response body into `{ event?, data }` records. */
const readSse = async (res: Response): Promise<Array<{ event?: string; data: string }>> => {
  const text = await res.text()
  return text
    .split("\n\n")
    .filter((block) => block.trim().length > 0)
    .map((block) => {
      const out: { event?: string; data: string } = { data: "" }
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) out.event = line.slice(7)
        else if (line.startsWith("data: ")) out.data += line.slice(6)
      }
      return out
    })
}

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${mock.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body)
  })

describe("helpers", () => {
  it("default reply is deterministic and ~30 tokens", async () => {
    const { encode } = await import("gpt-tokenizer")
    const a = defaultReply("What is the capital of France?")
    expect(defaultReply("What is the capital of France?")).toBe(a)
    expect(a).toContain("What is the capital of")
    expect(defaultReply("something else")).not.toBe(a)
    const n = encode(a).length
    expect(n).toBeGreaterThanOrEqual(25)
    expect(n).toBeLessThanOrEqual(35)
  })

  it("splitIntoChunks preserves text", () => {
    const text = "  one two  three four five six seven eight nine ten "
    const chunks = splitIntoChunks(text)
    expect(chunks.join("")).toBe(text)
    expect(chunks.length).toBeGreaterThanOrEqual(4)
    expect(chunks.length).toBeLessThanOrEqual(6)
    expect(splitIntoChunks("")).toEqual([])
  })
})

describe("chat completions via the openai SDK", () => {
  it("non-streaming returns a realistic chat.completion", async () => {
    const r = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "system", content: "You are terse." }, ...user("Hello mock")]
    })
    expect(r.id).toMatch(/^chatcmpl-/)
    expect(r.object).toBe("chat.completion")
    expect(r.model).toBe("gpt-4o-mini")
    expect(typeof r.created).toBe("number")
    const choice = r.choices[0]!
    expect(choice.message.role).toBe("assistant")
    expect(choice.message.content).toBe(defaultReply("Hello mock"))
    expect(choice.finish_reason).toBe("stop")
    const u = r.usage!
    expect(u.prompt_tokens).toBeGreaterThan(5)
    expect(u.completion_tokens).toBeGreaterThan(20)
    expect(u.total_tokens).toBe(u.prompt_tokens + u.completion_tokens)
    expect(u.prompt_tokens_details?.cached_tokens).toBe(0)
    expect(u.completion_tokens_details?.reasoning_tokens).toBe(0)

    expect(mock.calls).toBe(1)
    expect(mock.requests).toHaveLength(1)
    const rec = mock.requests[0]!
    expect(rec.method).toBe("POST")
    expect(rec.path).toBe("/v1/chat/completions")
    expect(rec.headers["authorization"]).toBe("Bearer x")
    expect(rec.body).toMatchObject({ model: "gpt-4o-mini", messages: [{ role: "system" }, { role: "user", content: "Hello mock" }] })
  })

  it("honours reply, usage overrides and omitUsage", async () => {
    mock.setBehavior({ reply: "Fixed answer.", usage: { prompt_tokens: 100, cached_tokens: 40, reasoning_tokens: 7 } })
    const r = await client.chat.completions.create({ model: "m", messages: user("hi") })
    expect(r.choices[0]!.message.content).toBe("Fixed answer.")
    expect(r.usage).toMatchObject({
      prompt_tokens: 100,
      completion_tokens: 3 + 7,
      total_tokens: 110,
      prompt_tokens_details: { cached_tokens: 40 },
      completion_tokens_details: { reasoning_tokens: 7 }
    })

    mock.setBehavior({ omitUsage: true })
    const r2 = await client.chat.completions.create({ model: "m", messages: user("hi") })
    expect(r2.usage).toBeUndefined()
  })

  it("streams without usage when include_usage is not requested", async () => {
    mock.setBehavior({ reply: "one two three four five six seven eight nine ten" })
    const stream = await client.chat.completions.create({ model: "gpt-4o", messages: user("hi"), stream: true })
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = []
    for await (const c of stream) chunks.push(c)

    expect(chunks.length).toBeGreaterThanOrEqual(1 + 4 + 1)
    const first = chunks[0]!
    expect(first.object).toBe("chat.completion.chunk")
    expect(first.id).toMatch(/^chatcmpl-/)
    expect(first.model).toBe("gpt-4o")
    expect(first.choices[0]!.delta).toMatchObject({ role: "assistant", content: "" })
    const last = chunks.at(-1)!
    expect(last.choices[0]!.finish_reason).toBe("stop")
    expect(last.choices[0]!.delta).toEqual({})
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")
    expect(text).toBe("one two three four five six seven eight nine ten")
    for (const c of chunks) {
      expect(c.id).toBe(first.id)
      expect("usage" in c).toBe(false)
    }
  })

  it("streams a final usage chunk with include_usage, usage:null on the others", async () => {
    const stream = await client.chat.completions.create({
      model: "gpt-4o",
      messages: user("count to ten"),
      stream: true,
      stream_options: { include_usage: true }
    })
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = []
    for await (const c of stream) chunks.push(c)
    const last = chunks.at(-1)!
    expect(last.choices).toEqual([])
    expect(last.usage?.completion_tokens).toBeGreaterThan(20)
    expect(last.usage?.total_tokens).toBe(last.usage!.prompt_tokens + last.usage!.completion_tokens)
    for (const c of chunks.slice(0, -1)) expect(c.usage).toBeNull()
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe("stop")
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")
    expect(text).toBe(defaultReply("count to ten"))

    // same usage as non-streaming
    const r = await client.chat.completions.create({ model: "gpt-4o", messages: user("count to ten") })
    expect(r.usage?.prompt_tokens).toBe(last.usage?.prompt_tokens)
    expect(r.usage?.completion_tokens).toBe(last.usage?.completion_tokens)
  })

  it("cuts a streamed reply into `chunks` content events (default 5), the same text either way", async () => {
    const contentEvents = async () => {
      const stream = await client.chat.completions.create({ model: "gpt-4o", messages: user("count to ten please, slowly"), stream: true })
      const parts: Array<string> = []
      for await (const c of stream) if ((c.choices[0]?.delta.content ?? "") !== "") parts.push(c.choices[0]!.delta.content!)
      return parts
    }
    const five = await contentEvents()
    mock.setBehavior({ chunks: 20 })
    const twenty = await contentEvents()
    expect(five.length).toBeLessThanOrEqual(5)
    expect(twenty.length).toBeGreaterThan(five.length)
    expect(twenty.join("")).toBe(five.join(""))
  })

  it("omitUsage suppresses the usage chunk even when include_usage is requested", async () => {
    mock.setBehavior({ omitUsage: true })
    const stream = await client.chat.completions.create({
      model: "gpt-4o",
      messages: user("hi"),
      stream: true,
      stream_options: { include_usage: true }
    })
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = []
    for await (const c of stream) chunks.push(c)
    expect(chunks.every((c) => c.choices.length === 1 && c.usage == null)).toBe(true)
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe("stop")
  })

  it("wire format: separate SSE events ending in [DONE]", async () => {
    const res = await post("/chat/completions", { model: "m", messages: user("hi"), stream: true })
    expect(res.status).toBe(200)
    expect(res.headers.get("content-type")).toBe("text/event-stream")
    const events = await readSse(res)
    expect(events.at(-1)!.data).toBe("[DONE]")
    expect(events.length).toBeGreaterThanOrEqual(6)
  })

  it("500 status makes the SDK throw an APIError with an OpenAI-shaped body", async () => {
    mock.setBehavior({ status: 500 })
    const err = await client.chat.completions.create({ model: "m", messages: user("hi") }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.InternalServerError)
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(500)
    expect((err as InstanceType<typeof OpenAI.APIError>).type).toBe("server_error")

    mock.setBehavior({ status: 429, reply: "slow down" })
    const res = await post("/chat/completions", { model: "m", messages: user("hi") })
    expect(res.status).toBe(429)
    expect(await res.json()).toEqual({
      error: { message: "slow down", type: "requests", param: null, code: "rate_limit_exceeded" }
    })
    expect(mock.calls).toBe(2)
  })

  it("per-model behaviour, with one-shot behaviours taking precedence", async () => {
    mock.setBehavior({ reply: "default" })
    mock.behaviorsByModel.set("special", { reply: "special reply" })
    const ask = async (model: string) =>
      (await client.chat.completions.create({ model, messages: user("hi") })).choices[0]!.message.content

    expect(await ask("special")).toBe("special reply")
    expect(await ask("other")).toBe("default")

    mock.pushBehavior({ reply: "once-1" })
    mock.pushBehavior({ reply: "once-2" })
    expect(await ask("special")).toBe("once-1")
    expect(await ask("other")).toBe("once-2")
    expect(await ask("special")).toBe("special reply")

    const models = await client.models.list()
    expect(models.data.map((m) => m.id).sort()).toEqual(["mock-model", "special"])
    expect(mock.calls).toBe(5) // models.list is not a completion call
  })

  it("resetAfterChunks mid-stream makes SDK iteration throw", async () => {
    mock.setBehavior({ reply: "a b c d e f g h i j", resetAfterChunks: 2, chunkDelayMs: 5 })
    const stream = await client.chat.completions.create({ model: "m", messages: user("hi"), stream: true })
    const got: string[] = []
    const err = await (async () => {
      for await (const c of stream) got.push(c.choices[0]?.delta.content ?? "")
    })().catch((e: unknown) => e)
    expect(err).toBeInstanceOf(Error)
    expect(got.join("").length).toBeGreaterThan(0)
    expect(got.join("")).not.toBe("a b c d e f g h i j")
  })

  it("resetBeforeResponse makes the SDK throw a connection error", async () => {
    mock.pushBehavior({ resetBeforeResponse: true })
    const err = await client.chat.completions.create({ model: "m", messages: user("hi") }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.APIConnectionError)
    // the next request is served normally
    const r = await client.chat.completions.create({ model: "m", messages: user("hi") })
    expect(r.choices[0]!.finish_reason).toBe("stop")
  })

  it("truncates by max_tokens / max_completion_tokens with finish_reason length", async () => {
    const full = defaultReply("truncate me")
    const r = await client.chat.completions.create({ model: "m", messages: user("truncate me"), max_tokens: 5 })
    expect(r.choices[0]!.finish_reason).toBe("length")
    expect(r.usage?.completion_tokens).toBe(5)
    const content = r.choices[0]!.message.content!
    expect(full.startsWith(content)).toBe(true)
    expect(content.length).toBeLessThan(full.length)

    const r2 = await client.chat.completions.create({ model: "m", messages: user("truncate me"), max_completion_tokens: 1000 })
    expect(r2.choices[0]!.finish_reason).toBe("stop")
    expect(r2.choices[0]!.message.content).toBe(full)

    const stream = await client.chat.completions.create({
      model: "m",
      messages: user("truncate me"),
      max_completion_tokens: 5,
      stream: true,
      stream_options: { include_usage: true }
    })
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = []
    for await (const c of stream) chunks.push(c)
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe("length")
    expect(chunks.at(-1)!.usage?.completion_tokens).toBe(5)
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe(content)
  })

  it("delayMs and chunkDelayMs slow the response", async () => {
    mock.setBehavior({ delayMs: 60 })
    let t = performance.now()
    await client.chat.completions.create({ model: "m", messages: user("hi") })
    expect(performance.now() - t).toBeGreaterThanOrEqual(50)

    mock.setBehavior({ chunkDelayMs: 20, reply: "a b c d e" })
    t = performance.now()
    const stream = await client.chat.completions.create({ model: "m", messages: user("hi"), stream: true })
    const arrivals: number[] = []
    for await (const _ of stream) arrivals.push(performance.now() - t)
    // role chunk + 5 content chunks + finish chunk, 20ms apart
    expect(arrivals.at(-1)!).toBeGreaterThanOrEqual(100)
  })
})

describe("anthropic messages", () => {
  it("non-streaming message with usage and system prompt", async () => {
    mock.setBehavior({ usage: { cached_tokens: 3 } })
    const res = await post("/messages", {
      model: "claude-test",
      max_tokens: 1024,
      system: "You are terse.",
      messages: [{ role: "user", content: [{ type: "text", text: "Hello claude" }] }]
    }, { "x-api-key": "k", "anthropic-version": "2023-06-01" })
    expect(res.status).toBe(200)
    const body = (await res.json()) as Record<string, any>
    expect(body).toMatchObject({
      type: "message",
      role: "assistant",
      model: "claude-test",
      stop_reason: "end_turn",
      stop_sequence: null,
      content: [{ type: "text", text: defaultReply("Hello claude") }]
    })
    expect(body["id"]).toMatch(/^msg_/)
    expect(body["usage"].input_tokens).toBeGreaterThan(0)
    expect(body["usage"].cache_read_input_tokens).toBe(3)
    expect(body["usage"].cache_creation_input_tokens).toBe(0)
    expect(body["usage"].output_tokens).toBeGreaterThan(20)
    expect(mock.calls).toBe(1)
    expect(mock.requests[0]!.headers["x-api-key"]).toBe("k")
  })

  it("max_tokens truncation gives stop_reason max_tokens", async () => {
    const res = await post("/messages", { model: "c", max_tokens: 4, messages: user("hi") })
    const body = (await res.json()) as Record<string, any>
    expect(body["stop_reason"]).toBe("max_tokens")
    expect(body["usage"].output_tokens).toBe(4)
  })

  it("streams the Anthropic event sequence", async () => {
    mock.setBehavior({ reply: "alpha beta gamma delta epsilon zeta" })
    const res = await post("/messages", { model: "c", max_tokens: 100, stream: true, messages: user("hi") })
    expect(res.headers.get("content-type")).toBe("text/event-stream")
    const events = await readSse(res)
    const names = events.map((e) => e.event)
    expect(names.slice(0, 3)).toEqual(["message_start", "content_block_start", "ping"])
    expect(names.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"])
    const deltas = events.filter((e) => e.event === "content_block_delta").map((e) => JSON.parse(e.data))
    expect(deltas.length).toBeGreaterThanOrEqual(3)
    expect(deltas.map((d) => d.delta.text).join("")).toBe("alpha beta gamma delta epsilon zeta")
    expect(deltas[0].delta.type).toBe("text_delta")
    const start = JSON.parse(events[0]!.data)
    expect(start.message.usage.input_tokens).toBeGreaterThan(0)
    const md = JSON.parse(events.at(-2)!.data)
    expect(md.delta.stop_reason).toBe("end_turn")
    expect(md.usage.output_tokens).toBeGreaterThan(0)
  })

  it("errors are Anthropic-shaped", async () => {
    mock.setBehavior({ status: 529 })
    const res = await post("/messages", { model: "c", max_tokens: 10, messages: user("hi") })
    expect(res.status).toBe(529)
    expect(await res.json()).toMatchObject({ type: "error", error: { type: "overloaded_error" } })
  })
})

describe("misc endpoints and options", () => {
  it("unknown path -> 404, malformed JSON -> 400", async () => {
    const r404 = await fetch(`${mock.url}/embeddings`, { method: "POST", body: "{}" })
    expect(r404.status).toBe(404)
    expect(((await r404.json()) as any).error.type).toBe("invalid_request_error")

    const r400 = await post("/chat/completions", "{not json")
    expect(r400.status).toBe(400)
    expect(((await r400.json()) as any).error.message).toMatch(/parse/)
    expect(mock.requests.at(-1)!.body).toBe("{not json")
  })

  it("record:false skips storing requests; reset clears state", async () => {
    const quiet = await startMockUpstream({ record: false, behavior: { reply: "q" } })
    try {
      const c = new OpenAI({ baseURL: quiet.url, apiKey: "x", maxRetries: 0 })
      const r = await c.chat.completions.create({ model: "m", messages: user("hi") })
      expect(r.choices[0]!.message.content).toBe("q")
      expect(quiet.calls).toBe(1)
      expect(quiet.requests).toHaveLength(0)
      quiet.pushBehavior({ status: 500 })
      quiet.behaviorsByModel.set("m", { reply: "by model" })
      quiet.reset()
      expect(quiet.calls).toBe(0)
      const r2 = await c.chat.completions.create({ model: "m", messages: user("hi") })
      expect(r2.choices[0]!.message.content).toBe(defaultReply("hi"))
    } finally {
      await quiet.close()
    }
  })

  it("handles concurrent requests on keep-alive connections", async () => {
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        client.chat.completions.create({ model: "m", messages: user(`q ${i}`) }).then((r) => r.choices[0]!.message.content)
      )
    )
    expect(new Set(results).size).toBeGreaterThan(1)
    expect(mock.calls).toBe(200)
  })

  it("runs standalone and prints its URL", async () => {
    const script = fileURLToPath(new URL("./mockUpstream.ts", import.meta.url))
    const tsxCli = fileURLToPath(new URL("../../node_modules/tsx/dist/cli.mjs", import.meta.url))
    const child = spawn(process.execPath, [tsxCli, script, "--port", "0", "--delay", "1"], { stdio: ["ignore", "pipe", "pipe"] })
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = ""
        child.stdout.on("data", (d: Buffer) => {
          out += d.toString()
          const m = /(http:\/\/\S+\/v1)/.exec(out)
          if (m) resolve(m[1]!)
        })
        child.on("exit", (code) => reject(new Error(`exited ${code}: ${out}`)))
      })
      const c = new OpenAI({ baseURL: url, apiKey: "x", maxRetries: 0 })
      const r = await c.chat.completions.create({ model: "m", messages: user("hi") })
      expect(r.choices[0]!.message.content).toBe(defaultReply("hi"))
    } finally {
      child.kill("SIGTERM")
    }
  })
})
