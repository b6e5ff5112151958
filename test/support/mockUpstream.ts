/**
 * A real HTTP mock upstream (node:http, no framework) that stands in for model
 * providers in end-to-end tests and benchmarks.
 *
 * Endpoints (relative to `mock.url`, which ends in `/v1`):
 *   POST /v1/chat/completions  OpenAI Chat Completions (JSON and SSE streaming)
 *   POST /v1/messages          Anthropic Messages API (JSON and SSE streaming)
 *   GET  /v1/models            OpenAI-style model list
 *   anything else              404 OpenAI-shaped error
 *
 * Standalone (for benchmarks):
 *   npx tsx test/support/mockUpstream.ts --port 9100 --delay 20
 */
import { createServer } from "node:http"
import type { IncomingMessage, Server, ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { pathToFileURL } from "node:url"
import { decode, encode, encodeChat } from "gpt-tokenizer"

export interface MockBehavior {
  /** Wait before sending response headers (default 0). */
  delayMs?: number
  /** Default 200; any >= 400 returns a provider-shaped error body. */
  status?: number
  /** Assistant text (or the error message when status >= 400). Default: deterministic text (~30 tokens) derived from the last user message. */
  reply?: string
  /** Streaming: delay between chunks (default 0). */
  chunkDelayMs?: number
  /** Non-stream: omit `usage`; stream: never send usage even if include_usage was requested. */
  omitUsage?: boolean
  /** Stream: destroy the socket abruptly after N content chunks were written (no [DONE]). Ignored for non-streaming requests. */
  resetAfterChunks?: number
  /** Destroy the socket without any response (after `delayMs`). */
  resetBeforeResponse?: boolean
  /** Override reported usage. */
  usage?: {
    prompt_tokens?: number
    completion_tokens?: number
    cached_tokens?: number
    reasoning_tokens?: number
  }
}

export interface RecordedRequest {
  method: string
  path: string
  headers: Record<string, string | string[] | undefined>
  body: unknown
}

export interface MockUpstream {
  /** Base URL ending in /v1, e.g. "http://127.0.0.1:PORT/v1". */
  url: string
  port: number
  /** Number of completion requests received (chat + messages). */
  calls: number
  /** Every request, in order (last 1000 only). Empty when started with `record: false`. */
  requests: RecordedRequest[]
  /** Default behaviour for all requests. */
  setBehavior(b: MockBehavior): void
  /** One-shot behaviours consumed FIFO before anything else. */
  pushBehavior(b: MockBehavior): void
  /** Per `model` in the request body; takes precedence over the default (the one-shot queue still comes first). */
  behaviorsByModel: Map<string, MockBehavior>
  /** Clears calls, requests, the one-shot queue, behaviorsByModel and the default behaviour. */
  reset(): void
  close(): Promise<void>
}

export interface StartMockUpstreamOptions {
  /** 0 (default) picks a free port. */
  port?: number
  /** Default "127.0.0.1". */
  host?: string
  /** Initial default behaviour. */
  behavior?: MockBehavior
  /** Store requests in `requests` (default true). */
  record?: boolean
}

const MAX_RECORDED = 1000
const DEFAULT_MODEL = "mock-model"
/** Model used for gpt-tokenizer's chat-aware counting (o200k_base). */
const TOKENIZER_MODEL = "gpt-4o"
const FILLER_WORDS = [
  " the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog", " and", " then",
  " runs", " away", " from", " home", " today", " with", " great", " speed", " into", " light"
] as const
const DEFAULT_REPLY_TOKENS = 30

// ---------------------------------------------------------------------------
// helpers

type Json = Record<string, unknown>

const isObject = (u: unknown): u is Json => typeof u === "object" && u !== null && !Array.isArray(u)

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

let idCounter = 0
const randomId = (prefix: string): string => {
  idCounter = (idCounter + 1) % 1_000_000_000
  return prefix + Date.now().toString(36) + idCounter.toString(36).padStart(6, "0") + Math.random().toString(36).slice(2, 10)
}

const fnv1a = (s: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}

/** Flattens OpenAI / Anthropic message content (string or array of parts) into text. */
const contentToText = (content: unknown): string => {
  if (typeof content === "string") return content
  if (Array.isArray(content)) {
    let out = ""
    for (const part of content) {
      if (typeof part === "string") out += part
      else if (isObject(part)) {
        if (typeof part["text"] === "string") out += part["text"]
        else if (part["type"] === "tool_result") out += contentToText(part["content"])
        else if (part["type"] === "tool_use" && part["input"] !== undefined) out += JSON.stringify(part["input"])
      }
    }
    return out
  }
  return ""
}

/** Deterministic ~30-token reply derived from the last user message. */
export const defaultReply = (lastUser: string): string => {
  const words = lastUser.trim().split(/\s+/).filter((w) => w.length > 0)
  let snippet = words.slice(0, 6).join(" ")
  if (snippet.length > 40) snippet = snippet.slice(0, 40)
  if (snippet.length === 0) snippet = "nothing"
  const prefix = `Mock reply to "${snippet}":`
  const prefixTokens = encode(prefix).length
  const fillerCount = Math.max(3, DEFAULT_REPLY_TOKENS - prefixTokens - 1)
  let h = fnv1a(lastUser)
  let out = prefix
  for (let i = 0; i < fillerCount; i++) {
    out += FILLER_WORDS[h % FILLER_WORDS.length]
    h = Math.imul(h ^ (h >>> 13), 0x5bd1e995) >>> 0
  }
  return out + "."
}

/** Splits text into ~5 chunks on word boundaries; concatenation equals the input. */
export const splitIntoChunks = (text: string, target = 5): string[] => {
  if (text.length === 0) return []
  const pieces = text.match(/\S+\s*|\s+/g) ?? [text]
  const per = Math.max(1, Math.ceil(pieces.length / target))
  const chunks: string[] = []
  for (let i = 0; i < pieces.length; i += per) chunks.push(pieces.slice(i, i + per).join(""))
  return chunks
}

/** Small bounded cache: raw request body -> prompt token count. Benchmarks repeat bodies a lot. */
const promptTokenCache = new Map<string, number>()
const PROMPT_CACHE_MAX = 512
const cachedCount = (key: string, compute: () => number): number => {
  const hit = promptTokenCache.get(key)
  if (hit !== undefined) return hit
  const n = compute()
  if (promptTokenCache.size >= PROMPT_CACHE_MAX) {
    const oldest = promptTokenCache.keys().next()
    if (oldest.done !== true) promptTokenCache.delete(oldest.value)
  }
  promptTokenCache.set(key, n)
  return n
}

interface ChatMsg { role: string; content: string }

const countChat = (messages: ChatMsg[]): number => {
  try {
    return encodeChat(messages, TOKENIZER_MODEL).length
  } catch {
    let n = 3
    for (const m of messages) n += 3 + encode(m.content).length
    return n
  }
}

const toChatMsgs = (messages: unknown[]): ChatMsg[] =>
  messages.map((m) => {
    if (!isObject(m)) return { role: "user", content: "" }
    const role = typeof m["role"] === "string" ? m["role"] : "user"
    let content = contentToText(m["content"])
    if (Array.isArray(m["tool_calls"])) content += JSON.stringify(m["tool_calls"])
    return { role, content }
  })

const lastUserText = (messages: unknown[]): string => {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]
    if (isObject(m) && m["role"] === "user") return contentToText(m["content"])
  }
  return ""
}

interface ReplyPlan {
  text: string
  completionTokens: number // text tokens only
  truncated: boolean
}

const planReply = (behavior: MockBehavior, lastUser: string, maxTokens: number | undefined): ReplyPlan => {
  const full = behavior.reply ?? defaultReply(lastUser)
  const tokens = encode(full)
  if (maxTokens !== undefined && maxTokens >= 0 && tokens.length > maxTokens) {
    return { text: decode(tokens.slice(0, maxTokens)), completionTokens: maxTokens, truncated: true }
  }
  return { text: full, completionTokens: tokens.length, truncated: false }
}

const numberOrUndefined = (u: unknown): number | undefined =>
  typeof u === "number" && Number.isFinite(u) ? Math.floor(u) : undefined

interface UsageNumbers {
  prompt: number
  completion: number
  cached: number
  reasoning: number
}

const resolveUsage = (behavior: MockBehavior, countPrompt: () => number, plan: ReplyPlan): UsageNumbers => {
  const o = behavior.usage ?? {}
  const reasoning = o.reasoning_tokens ?? 0
  return {
    prompt: o.prompt_tokens ?? countPrompt(),
    // As with OpenAI, reasoning tokens are part of completion tokens.
    completion: o.completion_tokens ?? plan.completionTokens + reasoning,
    cached: o.cached_tokens ?? 0,
    reasoning
  }
}

const openAIUsage = (u: UsageNumbers) => ({
  prompt_tokens: u.prompt,
  completion_tokens: u.completion,
  total_tokens: u.prompt + u.completion,
  prompt_tokens_details: { cached_tokens: u.cached, audio_tokens: 0 },
  completion_tokens_details: {
    reasoning_tokens: u.reasoning,
    audio_tokens: 0,
    accepted_prediction_tokens: 0,
    rejected_prediction_tokens: 0
  }
})

/** Anthropic semantics: input_tokens excludes cache reads, so total input = input_tokens + cache_read_input_tokens. */
const anthropicUsage = (u: UsageNumbers) => ({
  input_tokens: Math.max(0, u.prompt - u.cached),
  cache_creation_input_tokens: 0,
  cache_read_input_tokens: u.cached,
  output_tokens: u.completion
})

const openAIErrorFor = (status: number, message: string) => {
  let type = "invalid_request_error"
  let code: string = "mock_error"
  if (status === 400) code = "invalid_request"
  else if (status === 401) code = "invalid_api_key"
  else if (status === 403) { type = "permission_error"; code = "permission_denied" }
  else if (status === 404) code = "not_found"
  else if (status === 429) { type = "requests"; code = "rate_limit_exceeded" }
  else if (status >= 500) { type = "server_error"; code = "server_error" }
  return { error: { message, type, param: null, code } }
}

const anthropicErrorFor = (status: number, message: string) => {
  let type = "invalid_request_error"
  if (status === 401) type = "authentication_error"
  else if (status === 403) type = "permission_error"
  else if (status === 404) type = "not_found_error"
  else if (status === 413) type = "request_too_large"
  else if (status === 429) type = "rate_limit_error"
  else if (status === 529) type = "overloaded_error"
  else if (status >= 500) type = "api_error"
  return { type: "error", error: { type, message } }
}

/** True once the client connection is gone (or we destroyed it). */
const gone = (res: ServerResponse): boolean => res.destroyed || res.socket === null || res.socket.destroyed

const sendJson = (res: ServerResponse, status: number, body: unknown, requestId: string): void => {
  const payload = JSON.stringify(body)
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(payload),
    "x-request-id": requestId
  })
  res.end(payload)
}

const readBody = (req: IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve(chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8")))
    req.on("error", reject)
  })

// ---------------------------------------------------------------------------
// server

class MockUpstreamImpl implements MockUpstream {
  url = ""
  port = 0
  calls = 0
  requests: RecordedRequest[] = []
  behaviorsByModel = new Map<string, MockBehavior>()
  private defaultBehavior: MockBehavior
  private queue: MockBehavior[] = []
  private readonly record: boolean
  private requestSeq = 0
  readonly server: Server

  constructor(opts: StartMockUpstreamOptions) {
    this.defaultBehavior = opts.behavior ?? {}
    this.record = opts.record ?? true
    this.server = createServer({ keepAlive: true }, (req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        if (!res.headersSent && !res.destroyed) {
          sendJson(res, 500, openAIErrorFor(500, `mock upstream internal error: ${String(err)}`), "req_mock_err")
        } else {
          res.destroy()
        }
      })
    })
    this.server.keepAliveTimeout = 65_000
    this.server.headersTimeout = 66_000
    this.server.requestTimeout = 0
  }

  setBehavior(b: MockBehavior): void {
    this.defaultBehavior = b
  }

  pushBehavior(b: MockBehavior): void {
    this.queue.push(b)
  }

  reset(): void {
    this.calls = 0
    this.requests.length = 0
    this.queue.length = 0
    this.behaviorsByModel.clear()
    this.defaultBehavior = {}
  }

  close(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.close((err) => (err ? reject(err) : resolve()))
      this.server.closeAllConnections()
    })
  }

  private nextBehavior(model: string | undefined): MockBehavior {
    const queued = this.queue.shift()
    if (queued !== undefined) return queued
    if (model !== undefined) {
      const byModel = this.behaviorsByModel.get(model)
      if (byModel !== undefined) return byModel
    }
    return this.defaultBehavior
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? "GET"
    const rawUrl = req.url ?? "/"
    const q = rawUrl.indexOf("?")
    let path = q === -1 ? rawUrl : rawUrl.slice(0, q)
    if (path.length > 1 && path.endsWith("/")) path = path.slice(0, -1)
    const raw = await readBody(req)
    const requestId = `req_mock_${(++this.requestSeq).toString(36)}`

    let body: unknown = undefined
    let parseError = false
    if (raw.length > 0) {
      try {
        body = JSON.parse(raw)
      } catch {
        body = raw
        parseError = true
      }
    }
    if (this.record) {
      this.requests.push({ method, path, headers: { ...req.headers }, body })
      if (this.requests.length > MAX_RECORDED) this.requests.splice(0, this.requests.length - MAX_RECORDED)
    }

    const isChat = method === "POST" && path === "/v1/chat/completions"
    const isMessages = method === "POST" && path === "/v1/messages"

    if (isChat || isMessages) {
      this.calls++
      const errorShape = isMessages ? anthropicErrorFor : openAIErrorFor
      if (parseError || !isObject(body)) {
        const msg = parseError ? "We could not parse the JSON body of your request." : "Request body must be a JSON object."
        sendJson(res, 400, errorShape(400, msg), requestId)
        return
      }
      if (!Array.isArray(body["messages"])) {
        sendJson(res, 400, errorShape(400, "'messages' is a required property"), requestId)
        return
      }
      const model = typeof body["model"] === "string" ? body["model"] : undefined
      const behavior = this.nextBehavior(model)
      if (isChat) await this.chat(res, body, raw, model ?? DEFAULT_MODEL, behavior, requestId)
      else await this.messages(res, body, raw, model ?? DEFAULT_MODEL, behavior, requestId)
      return
    }

    if (method === "GET" && path === "/v1/models") {
      const created = 1_700_000_000
      const ids = new Set<string>([DEFAULT_MODEL, ...this.behaviorsByModel.keys()])
      sendJson(res, 200, {
        object: "list",
        data: [...ids].map((id) => ({ id, object: "model", created, owned_by: "mock-upstream" }))
      }, requestId)
      return
    }

    sendJson(res, 404, openAIErrorFor(404, `Unknown request URL: ${method} ${path}.`), requestId)
  }

  /** Applies delay / reset / error behaviour. Returns true when the request has been fully handled. */
  private async preamble(
    res: ServerResponse,
    behavior: MockBehavior,
    requestId: string,
    errorShape: (status: number, message: string) => unknown
  ): Promise<boolean> {
    if (behavior.delayMs !== undefined && behavior.delayMs > 0) await sleep(behavior.delayMs)
    if (gone(res)) return true
    if (behavior.resetBeforeResponse === true) {
      res.socket?.destroy()
      res.destroy()
      return true
    }
    const status = behavior.status ?? 200
    if (status >= 400) {
      sendJson(res, status, errorShape(status, behavior.reply ?? `Mock upstream error (status ${status})`), requestId)
      return true
    }
    return false
  }

  private startSse(res: ServerResponse, status: number, requestId: string): void {
    res.writeHead(status, {
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      "x-request-id": requestId
    })
    res.flushHeaders()
  }

  /** Writes SSE events, honouring chunkDelayMs and resetAfterChunks; stops quietly if the client went away. */
  private async writeStream(
    res: ServerResponse,
    behavior: MockBehavior,
    head: string[],
    content: string[],
    tail: string[]
  ): Promise<void> {
    const delay = behavior.chunkDelayMs ?? 0
    const resetAfter = behavior.resetAfterChunks
    let first = true
    const write = async (event: string): Promise<boolean> => {
      if (!first && delay > 0) await sleep(delay)
      first = false
      if (gone(res)) return false
      res.write(event)
      return true
    }
    for (const e of head) if (!(await write(e))) return
    let written = 0
    for (const e of content) {
      if (resetAfter !== undefined && written >= resetAfter) {
        res.socket?.destroy()
        res.destroy()
        return
      }
      if (!(await write(e))) return
      written++
    }
    if (resetAfter !== undefined && written >= resetAfter) {
      res.socket?.destroy()
      res.destroy()
      return
    }
    for (const e of tail) if (!(await write(e))) return
    if (!gone(res)) res.end()
  }

  private async chat(
    res: ServerResponse,
    body: Json,
    raw: string,
    model: string,
    behavior: MockBehavior,
    requestId: string
  ): Promise<void> {
    if (await this.preamble(res, behavior, requestId, openAIErrorFor)) return
    const messages = body["messages"] as unknown[]
    const maxTokens = numberOrUndefined(body["max_completion_tokens"]) ?? numberOrUndefined(body["max_tokens"])
    const plan = planReply(behavior, lastUserText(messages), maxTokens)
    const usage = resolveUsage(behavior, () => cachedCount("c" + raw, () => countChat(toChatMsgs(messages))), plan)
    const id = randomId("chatcmpl-")
    const created = Math.floor(Date.now() / 1000)
    const finishReason = plan.truncated ? "length" : "stop"
    const status = behavior.status ?? 200

    if (body["stream"] !== true) {
      const out: Json = {
        id,
        object: "chat.completion",
        created,
        model,
        choices: [{
          index: 0,
          message: { role: "assistant", content: plan.text, refusal: null, annotations: [] },
          logprobs: null,
          finish_reason: finishReason
        }]
      }
      if (behavior.omitUsage !== true) out["usage"] = openAIUsage(usage)
      out["service_tier"] = "default"
      out["system_fingerprint"] = "fp_mock"
      sendJson(res, status, out, requestId)
      return
    }

    const streamOptions = body["stream_options"]
    const includeUsage = isObject(streamOptions) && streamOptions["include_usage"] === true
    const base = `{"id":"${id}","object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"service_tier":"default","system_fingerprint":"fp_mock","choices":`
    const usageTail = includeUsage ? `,"usage":null}` : `}`
    const chunk = (delta: Json, finish: string | null): string =>
      `data: ${base}[{"index":0,"delta":${JSON.stringify(delta)},"logprobs":null,"finish_reason":${finish === null ? "null" : `"${finish}"`}}]${usageTail}\n\n`

    const head = [chunk({ role: "assistant", content: "", refusal: null }, null)]
    const content = splitIntoChunks(plan.text).map((c) => chunk({ content: c }, null))
    const tail = [chunk({}, finishReason)]
    if (includeUsage && behavior.omitUsage !== true) {
      tail.push(`data: ${base}[],"usage":${JSON.stringify(openAIUsage(usage))}}\n\n`)
    }
    tail.push("data: [DONE]\n\n")
    this.startSse(res, status, requestId)
    await this.writeStream(res, behavior, head, content, tail)
  }

  private async messages(
    res: ServerResponse,
    body: Json,
    raw: string,
    model: string,
    behavior: MockBehavior,
    requestId: string
  ): Promise<void> {
    if (await this.preamble(res, behavior, requestId, anthropicErrorFor)) return
    const messages = body["messages"] as unknown[]
    const maxTokens = numberOrUndefined(body["max_tokens"])
    const plan = planReply(behavior, lastUserText(messages), maxTokens)
    const countPrompt = (): number =>
      cachedCount("m" + raw, () => {
        const msgs = toChatMsgs(messages)
        const system = contentToText(body["system"])
        if (system.length > 0) msgs.unshift({ role: "system", content: system })
        return countChat(msgs)
      })
    const usage = resolveUsage(behavior, countPrompt, plan)
    const id = randomId("msg_mock")
    const stopReason = plan.truncated ? "max_tokens" : "end_turn"
    const status = behavior.status ?? 200

    if (body["stream"] !== true) {
      const out: Json = {
        id,
        type: "message",
        role: "assistant",
        model,
        content: [{ type: "text", text: plan.text }],
        stop_reason: stopReason,
        stop_sequence: null
      }
      if (behavior.omitUsage !== true) out["usage"] = anthropicUsage(usage)
      sendJson(res, status, out, requestId)
      return
    }

    const event = (name: string, data: unknown): string => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`
    const startMessage: Json = {
      id,
      type: "message",
      role: "assistant",
      content: [],
      model,
      stop_reason: null,
      stop_sequence: null
    }
    if (behavior.omitUsage !== true) startMessage["usage"] = { ...anthropicUsage(usage), output_tokens: 1 }
    const head = [
      event("message_start", { type: "message_start", message: startMessage }),
      event("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
      event("ping", { type: "ping" })
    ]
    const content = splitIntoChunks(plan.text).map((text) =>
      event("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } })
    )
    const messageDelta: Json = { type: "message_delta", delta: { stop_reason: stopReason, stop_sequence: null } }
    if (behavior.omitUsage !== true) messageDelta["usage"] = { output_tokens: usage.completion }
    const tail = [
      event("content_block_stop", { type: "content_block_stop", index: 0 }),
      event("message_delta", messageDelta),
      event("message_stop", { type: "message_stop" })
    ]
    this.startSse(res, status, requestId)
    await this.writeStream(res, behavior, head, content, tail)
  }
}

export function startMockUpstream(opts: StartMockUpstreamOptions = {}): Promise<MockUpstream> {
  const mock = new MockUpstreamImpl(opts)
  const host = opts.host ?? "127.0.0.1"
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => reject(err)
    mock.server.once("error", onError)
    mock.server.listen(opts.port ?? 0, host, () => {
      mock.server.off("error", onError)
      const addr = mock.server.address() as AddressInfo
      mock.port = addr.port
      const urlHost = host.includes(":") ? `[${host}]` : host === "0.0.0.0" ? "127.0.0.1" : host
      mock.url = `http://${urlHost}:${addr.port}/v1`
      resolve(mock)
    })
  })
}

// ---------------------------------------------------------------------------
// standalone entry point

const isEntryPoint = (): boolean => {
  const entry = process.argv[1]
  if (entry === undefined) return false
  try {
    return import.meta.url === pathToFileURL(entry).href
  } catch {
    return false
  }
}

if (isEntryPoint()) {
  const args = process.argv.slice(2)
  const opt = (name: string): string | undefined => {
    const i = args.indexOf(name)
    return i === -1 ? undefined : args[i + 1]
  }
  const num = (name: string): number | undefined => {
    const v = opt(name)
    if (v === undefined) return undefined
    const n = Number(v)
    if (!Number.isFinite(n)) throw new Error(`${name} expects a number, got ${v}`)
    return n
  }
  if (args.includes("--help") || args.includes("-h")) {
    console.log(
      "Usage: tsx test/support/mockUpstream.ts [--port 9100] [--host 127.0.0.1] [--delay MS] " +
        "[--chunk-delay MS] [--status N] [--reply TEXT] [--omit-usage] [--record]"
    )
    process.exit(0)
  }
  const behavior: MockBehavior = {}
  const delay = num("--delay")
  if (delay !== undefined) behavior.delayMs = delay
  const chunkDelay = num("--chunk-delay")
  if (chunkDelay !== undefined) behavior.chunkDelayMs = chunkDelay
  const status = num("--status")
  if (status !== undefined) behavior.status = status
  const reply = opt("--reply")
  if (reply !== undefined) behavior.reply = reply
  if (args.includes("--omit-usage")) behavior.omitUsage = true
  const startOpts: StartMockUpstreamOptions = { behavior, record: args.includes("--record") }
  const port = num("--port")
  if (port !== undefined) startOpts.port = port
  const host = opt("--host")
  if (host !== undefined) startOpts.host = host
  startMockUpstream(startOpts).then(
    (mock) => {
      console.log(`mock upstream listening on ${mock.url}`)
      const shutdown = (): void => {
        mock.close().then(() => process.exit(0), () => process.exit(1))
      }
      process.once("SIGINT", shutdown)
      process.once("SIGTERM", shutdown)
    },
    (err: unknown) => {
      console.error(err)
      process.exit(1)
    }
  )
}
