/**
 * Bench child: a lean OpenAI-compatible upstream on loopback (POST /v1/chat/completions, JSON and
 * SSE). Same wire shapes as test/support/mockUpstream.ts, but built to cost the shared CPU as little
 * as possible: token counts are real (o200k via gpt-tokenizer, chat-aware like the test mock) but
 * memoised per distinct prompt, so a benchmark whose bodies differ only in their metadata pays the
 * tokenizer once. The test mock tokenises every request (≈ 400 µs of CPU each on a 2-core box),
 * which would starve the targets it is meant to measure.
 *
 * Flags: --delay MS (before headers, default 20), --chunk-delay MS (between SSE events, default 1),
 *        --chunks N (content events per stream, default 20), --reply TEXT, --port N.
 * Prints one JSON line `{"ready":true,"port":N}` when listening.
 */
import { encode, encodeChat } from "gpt-tokenizer"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { defaultReply, splitIntoChunks } from "../../test/support/mockUpstream.ts"
import { arg, numArg } from "../lib/args.ts"

const delayMs = numArg("--delay", 20)
const chunkDelayMs = numArg("--chunk-delay", 1)
const chunkCount = numArg("--chunks", 20)
const fixedReply = arg("--reply")

type Msg = { role: string; content: string }

const memo = <V>(max: number, compute: (k: string) => V) => {
  const m = new Map<string, V>()
  return (k: string): V => {
    let v = m.get(k)
    if (v === undefined) {
      v = compute(k)
      if (m.size >= max) m.delete(m.keys().next().value!)
      m.set(k, v)
    }
    return v
  }
}

const promptTokens = memo(1024, (key) => {
  const msgs = JSON.parse(key) as Array<Msg>
  try {
    return encodeChat(msgs as Parameters<typeof encodeChat>[0], "gpt-4o").length
  } catch {
    return msgs.reduce((n, m) => n + 3 + encode(m.content).length, 3)
  }
})

const replyFor = memo(1024, (lastUser) => {
  const text = fixedReply ?? defaultReply(lastUser)
  return { text, tokens: encode(text).length, chunks: splitIntoChunks(text, chunkCount) }
})

const sleep = (ms: number) => new Promise<void>((r) => (ms > 0 ? setTimeout(r, ms) : setImmediate(r)))
let seq = 0

const usageOf = (prompt: number, completion: number) => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  total_tokens: prompt + completion,
  prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
  completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 }
})

const fail = (res: ServerResponse, status: number, message: string) => {
  const body = JSON.stringify({ error: { message, type: "invalid_request_error", param: null, code: "invalid_request" } })
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  res.end(body)
}

const handle = async (req: IncomingMessage, res: ServerResponse, raw: string) => {
  if (req.method !== "POST" || !(req.url ?? "").startsWith("/v1/chat/completions")) return fail(res, 404, `no route ${req.method} ${req.url}`)
  let body: { model?: unknown; messages?: unknown; stream?: unknown; stream_options?: { include_usage?: unknown } }
  try {
    body = JSON.parse(raw)
  } catch {
    return fail(res, 400, "body is not JSON")
  }
  if (!Array.isArray(body.messages)) return fail(res, 400, "messages must be an array")
  const msgs: Array<Msg> = body.messages.map((m: { role?: unknown; content?: unknown }) => ({
    role: typeof m?.role === "string" ? m.role : "user",
    content: typeof m?.content === "string" ? m.content : ""
  }))
  const prompt = promptTokens(JSON.stringify(msgs))
  const lastUser = [...msgs].reverse().find((m) => m.role === "user")?.content ?? ""
  const reply = replyFor(lastUser)
  const n = ++seq
  const id = `chatcmpl-bench${n.toString(36)}`
  const created = Math.floor(Date.now() / 1000)
  const model = typeof body.model === "string" ? body.model : "mock-model"
  await sleep(delayMs)
  if (res.destroyed) return
  if (body.stream !== true) {
    const out = JSON.stringify({
      id,
      object: "chat.completion",
      created,
      model,
      choices: [{ index: 0, message: { role: "assistant", content: reply.text, refusal: null, annotations: [] }, logprobs: null, finish_reason: "stop" }],
      usage: usageOf(prompt, reply.tokens),
      service_tier: "default",
      system_fingerprint: "fp_bench"
    })
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(out), "x-request-id": `req_bench_${n}` })
    return res.end(out)
  }
  const includeUsage = body.stream_options?.include_usage === true
  const head = `{"id":"${id}","object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"system_fingerprint":"fp_bench","choices":`
  const tail = includeUsage ? `,"usage":null}` : "}"
  const event = (choices: string) => `data: ${head}${choices}${tail}\n\n`
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", "x-request-id": `req_bench_${n}` })
  res.write(event(`[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]`))
  for (const c of reply.chunks) {
    await sleep(chunkDelayMs)
    if (res.destroyed) return
    res.write(event(`[{"index":0,"delta":{"content":${JSON.stringify(c)}},"logprobs":null,"finish_reason":null}]`))
  }
  let end = event(`[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]`)
  if (includeUsage) end += `data: ${head}[],"usage":${JSON.stringify(usageOf(prompt, reply.tokens))}}\n\n`
  res.end(`${end}data: [DONE]\n\n`)
}

const server = createServer({ keepAlive: true }, (req, res) => {
  const chunks: Array<Buffer> = []
  req.on("data", (c: Buffer) => chunks.push(c))
  req.on("end", () => {
    const raw = chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8")
    handle(req, res, raw).catch((e: unknown) => (res.headersSent ? res.destroy() : fail(res, 500, String(e))))
  })
})
// Many keep-alive sockets from several clients: do not let idle ones time out mid-run.
server.keepAliveTimeout = 60_000
server.headersTimeout = 61_000
server.listen(numArg("--port", 0), "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ ready: true, port: (server.address() as AddressInfo).port }) + "\n")
})
const stop = () => {
  server.close(() => process.exit(0))
  server.closeAllConnections()
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
