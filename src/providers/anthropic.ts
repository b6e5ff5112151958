/**
 * Anthropic Messages API upstream: POST {base_url}/v1/messages with `x-api-key`. The Gateway speaks
 * OpenAI, so this adapter translates the chat completion request to a Messages request, and the
 * Message (or its SSE event stream) back to an OpenAI `chat.completion` (or chunk payloads).
 *
 * Translation, in short:
 * - `system`/`developer` messages → top-level `system` (joined with a blank line), wherever they are.
 * - user/assistant text → `messages`; consecutive same-role messages are merged; empty text is dropped
 *   (Anthropic rejects empty text blocks), and a message left with nothing is dropped.
 * - assistant `tool_calls` → `tool_use` blocks; `tool` messages → `tool_result` blocks in a user turn;
 *   function `tools` → Anthropic tools; `tool_choice` and `parallel_tool_calls` mapped; legacy
 *   `function` role / `function_call` and non-function tools are dropped.
 * - `max_tokens` = max_completion_tokens ?? max_tokens ?? route.max_output_tokens; temperature
 *   (clamped to Anthropic's 0..1), top_p, stop → stop_sequences, user / metadata.user_id →
 *   metadata.user_id. Every other OpenAI field is dropped (Anthropic rejects unknown fields).
 * - Usage: prompt_tokens = input + cache read + cache creation tokens (Anthropic's input_tokens
 *   excludes both), cached_tokens = cache reads. No usage upstream → no usage here (the Gateway counts).
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { Chunk, Clock, Duration, Effect, Either, Option, Redacted, Stream } from "effect"
import type { ProviderConfig, RouteConfig } from "../domain/config.ts"
import { catchTransport, type ChatProvider, dataEventsOf, statusFailure, timeoutFailure, UpstreamFailure, upstreamErrorDetail } from "./Provider.ts"
import { sseData } from "./sse.ts"

type AnthropicConfig = Extract<ProviderConfig, { type: "anthropic" }>
type Json = Record<string, unknown>

export const ANTHROPIC_VERSION = "2023-06-01"
export const DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"

const isObject = (u: unknown): u is Json => u !== null && typeof u === "object" && !Array.isArray(u)
const num = (u: unknown): number | undefined => (typeof u === "number" && Number.isFinite(u) ? u : undefined)

// ---------------------------------------------------------------------------
// request: OpenAI chat body → Anthropic Messages body

/** The text of OpenAI message content: a string, or text / refusal parts. */
const textOf = (content: unknown): string => {
  if (typeof content === "string") return content
  if (!Array.isArray(content)) return ""
  let out = ""
  for (const part of content) {
    if (typeof part === "string") out += part
    else if (isObject(part)) {
      if (typeof part.text === "string") out += part.text
      else if (typeof part.refusal === "string") out += part.refusal
    }
  }
  return out
}

/** Text blocks for OpenAI content, one per non-empty part. */
const textBlocks = (content: unknown): Array<Json> => {
  const parts = Array.isArray(content) ? content : [content]
  const out: Array<Json> = []
  for (const part of parts) {
    const text = textOf(typeof part === "string" ? part : [part])
    if (text.length > 0) out.push({ type: "text", text })
  }
  return out
}

const parseArguments = (args: unknown): Json => {
  if (isObject(args)) return args
  if (typeof args !== "string" || args.trim() === "") return {}
  try {
    const parsed: unknown = JSON.parse(args)
    return isObject(parsed) ? parsed : { value: parsed }
  } catch {
    return {}
  }
}

const toolUseBlocks = (toolCalls: unknown): Array<Json> => {
  if (!Array.isArray(toolCalls)) return []
  const out: Array<Json> = []
  for (const call of toolCalls) {
    if (!isObject(call) || !isObject(call.function) || typeof call.function.name !== "string") continue
    if (typeof call.id !== "string") continue
    out.push({ type: "tool_use", id: call.id, name: call.function.name, input: parseArguments(call.function.arguments) })
  }
  return out
}

const translateTools = (tools: unknown): Array<Json> | undefined => {
  if (!Array.isArray(tools)) return undefined
  const out: Array<Json> = []
  for (const t of tools) {
    if (!isObject(t) || t.type !== "function" || !isObject(t.function) || typeof t.function.name !== "string") continue
    const f = t.function
    const tool: Json = { name: f.name, input_schema: isObject(f.parameters) ? f.parameters : { type: "object", properties: {} } }
    if (typeof f.description === "string" && f.description.length > 0) tool.description = f.description
    out.push(tool)
  }
  return out.length > 0 ? out : undefined
}

const translateToolChoice = (choice: unknown, parallel: unknown): Json | undefined => {
  let out: Json | undefined
  if (choice === "auto") out = { type: "auto" }
  else if (choice === "required") out = { type: "any" }
  else if (choice === "none") out = { type: "none" }
  else if (isObject(choice) && isObject(choice.function) && typeof choice.function.name === "string") {
    out = { type: "tool", name: choice.function.name }
  }
  if (parallel === false && out?.type !== "none") out = { ...(out ?? { type: "auto" }), disable_parallel_tool_use: true }
  return out
}

/** OpenAI chat completion body → Anthropic Messages body (without `stream`). */
export const toAnthropicRequest = (route: RouteConfig, body: Json): Json => {
  const system: Array<string> = []
  const messages: Array<{ role: "user" | "assistant"; blocks: Array<Json> }> = []
  const push = (role: "user" | "assistant", blocks: Array<Json>) => {
    if (blocks.length === 0) return
    const last = messages.at(-1)
    if (last !== undefined && last.role === role) last.blocks.push(...blocks)
    else messages.push({ role, blocks: [...blocks] })
  }
  for (const m of Array.isArray(body.messages) ? body.messages : []) {
    if (!isObject(m)) continue
    switch (m.role) {
      case "system":
      case "developer": {
        const text = textOf(m.content)
        if (text.length > 0) system.push(text)
        break
      }
      case "user":
        push("user", textBlocks(m.content))
        break
      case "assistant":
        push("assistant", [...textBlocks(m.content), ...toolUseBlocks(m.tool_calls)])
        break
      case "tool":
        if (typeof m.tool_call_id === "string") {
          const text = textOf(m.content)
          const block: Json = { type: "tool_result", tool_use_id: m.tool_call_id }
          if (text.length > 0) block.content = text
          push("user", [block])
        }
        break
      default:
        // legacy `function` role: no id to pair it with a tool_use, dropped
        break
    }
  }

  const out: Json = {
    model: route.upstream_model,
    max_tokens: num(body.max_completion_tokens) ?? num(body.max_tokens) ?? route.max_output_tokens,
    messages: messages.map(({ role, blocks }) => ({
      role,
      // Anthropic requires tool_result blocks before any other content of a user turn.
      content:
        blocks.length === 1 && blocks[0]!.type === "text"
          ? blocks[0]!.text
          : role === "user"
            ? [...blocks.filter((b) => b.type === "tool_result"), ...blocks.filter((b) => b.type !== "tool_result")]
            : blocks
    }))
  }
  if (system.length > 0) out.system = system.join("\n\n")
  const temperature = num(body.temperature)
  if (temperature !== undefined) out.temperature = Math.min(1, Math.max(0, temperature))
  const topP = num(body.top_p)
  if (topP !== undefined) out.top_p = topP
  const stop = typeof body.stop === "string" ? [body.stop] : Array.isArray(body.stop) ? body.stop : []
  const stopSequences = stop.filter((s): s is string => typeof s === "string" && s.trim().length > 0)
  if (stopSequences.length > 0) out.stop_sequences = stopSequences
  const userId = typeof body.user === "string" ? body.user : isObject(body.metadata) && typeof body.metadata.user_id === "string" ? body.metadata.user_id : undefined
  if (userId !== undefined && userId.length > 0) out.metadata = { user_id: userId }
  const tools = translateTools(body.tools)
  if (tools !== undefined) {
    out.tools = tools
    const toolChoice = translateToolChoice(body.tool_choice, body.parallel_tool_calls)
    if (toolChoice !== undefined) out.tool_choice = toolChoice
  }
  return out
}

// ---------------------------------------------------------------------------
// response: Anthropic Message → OpenAI chat.completion

export const finishReasonOf = (stopReason: unknown): string => {
  switch (stopReason) {
    case "max_tokens":
    case "model_context_window_exceeded":
      return "length"
    case "tool_use":
      return "tool_calls"
    case "refusal":
      return "content_filter"
    default:
      // end_turn, stop_sequence, pause_turn, null
      return "stop"
  }
}

interface AnthropicUsage {
  input: number
  cacheRead: number
  cacheCreation: number
  output: number
}

const readUsage = (u: unknown, into?: AnthropicUsage): AnthropicUsage | undefined => {
  if (!isObject(u)) return into
  const base = into ?? { input: 0, cacheRead: 0, cacheCreation: 0, output: 0 }
  return {
    input: num(u.input_tokens) ?? base.input,
    cacheRead: num(u.cache_read_input_tokens) ?? base.cacheRead,
    cacheCreation: num(u.cache_creation_input_tokens) ?? base.cacheCreation,
    output: num(u.output_tokens) ?? base.output
  }
}

export const openAIUsage = (u: AnthropicUsage) => {
  const prompt = u.input + u.cacheRead + u.cacheCreation
  return {
    prompt_tokens: prompt,
    completion_tokens: u.output,
    total_tokens: prompt + u.output,
    prompt_tokens_details: { cached_tokens: u.cacheRead },
    completion_tokens_details: { reasoning_tokens: 0 }
  }
}

/** Anthropic Message → OpenAI chat.completion object. */
export const toOpenAICompletion = (msg: Json, fallbackModel: string, nowMs: number): Json => {
  let text = ""
  const toolCalls: Array<Json> = []
  for (const block of Array.isArray(msg.content) ? msg.content : []) {
    if (!isObject(block)) continue
    if (block.type === "text" && typeof block.text === "string") text += block.text
    else if (block.type === "tool_use" && typeof block.name === "string") {
      toolCalls.push({
        id: typeof block.id === "string" ? block.id : `call_${toolCalls.length}`,
        type: "function",
        function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) }
      })
    }
    // thinking / redacted_thinking / server tool blocks: not represented in chat.completion
  }
  const message: Json = { role: "assistant", content: toolCalls.length > 0 && text.length === 0 ? null : text }
  if (toolCalls.length > 0) message.tool_calls = toolCalls
  const out: Json = {
    id: typeof msg.id === "string" ? msg.id : `msg_${nowMs.toString(36)}`,
    object: "chat.completion",
    created: Math.floor(nowMs / 1000),
    model: typeof msg.model === "string" ? msg.model : fallbackModel,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReasonOf(msg.stop_reason) }]
  }
  const usage = readUsage(msg.usage)
  if (usage !== undefined) out.usage = openAIUsage(usage)
  return out
}

// ---------------------------------------------------------------------------
// streaming: Anthropic SSE events → OpenAI chunk payloads

const RETRYABLE_STREAM_ERRORS = new Set(["overloaded_error", "api_error", "rate_limit_error", "timeout_error"])

/**
 * A per-stream translator: one Anthropic event `data` in, OpenAI chunk payloads out. `done` turns
 * true at `message_stop`; an `error` event or unparsable data is an UpstreamFailure.
 */
export const makeStreamTranslator = (name: string, fallbackModel: string, nowMs: number) => {
  let id = `msg_${nowMs.toString(36)}`
  let model = fallbackModel
  const created = Math.floor(nowMs / 1000)
  let usage: AnthropicUsage | undefined
  let stopReason: unknown = null
  let started = false
  let done = false
  /** Anthropic content block index → OpenAI tool_calls index. */
  const toolIndex = new Map<number, number>()

  const chunk = (choices: ReadonlyArray<unknown>, extra: Json = {}): string =>
    JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices, ...extra })
  const delta = (d: Json): string => chunk([{ index: 0, delta: d, logprobs: null, finish_reason: null }])
  const protocol = (message: string) => new UpstreamFailure({ reason: "protocol", message: `provider ${name} ${message}`, retryable: true })
  const roleChunk = (): Array<string> => {
    if (started) return []
    started = true
    return [delta({ role: "assistant", content: "" })]
  }

  const step = (data: string): Effect.Effect<ReadonlyArray<string>, UpstreamFailure> => {
    let ev: unknown
    try {
      ev = JSON.parse(data)
    } catch {
      return Effect.fail(protocol("sent a stream event that is not JSON"))
    }
    if (!isObject(ev)) return Effect.fail(protocol("sent a stream event that is not a JSON object"))
    switch (ev.type) {
      case "message_start": {
        const msg = isObject(ev.message) ? ev.message : {}
        if (typeof msg.id === "string") id = msg.id
        if (typeof msg.model === "string") model = msg.model
        usage = readUsage(msg.usage, usage)
        return Effect.succeed(roleChunk())
      }
      case "content_block_start": {
        const block = isObject(ev.content_block) ? ev.content_block : {}
        const index = num(ev.index) ?? 0
        if (block.type === "tool_use" && typeof block.name === "string") {
          const ti = toolIndex.size
          toolIndex.set(index, ti)
          return Effect.succeed([
            ...roleChunk(),
            delta({ tool_calls: [{ index: ti, id: typeof block.id === "string" ? block.id : `call_${ti}`, type: "function", function: { name: block.name, arguments: "" } }] })
          ])
        }
        if (block.type === "text" && typeof block.text === "string" && block.text.length > 0) {
          return Effect.succeed([...roleChunk(), delta({ content: block.text })])
        }
        return Effect.succeed([])
      }
      case "content_block_delta": {
        const d = isObject(ev.delta) ? ev.delta : {}
        if (d.type === "text_delta" && typeof d.text === "string" && d.text.length > 0) {
          return Effect.succeed([...roleChunk(), delta({ content: d.text })])
        }
        if (d.type === "input_json_delta" && typeof d.partial_json === "string" && d.partial_json.length > 0) {
          const ti = toolIndex.get(num(ev.index) ?? 0)
          if (ti !== undefined) return Effect.succeed([delta({ tool_calls: [{ index: ti, function: { arguments: d.partial_json } }] })])
        }
        // thinking_delta, signature_delta, citations_delta: not represented in chat.completion.chunk
        return Effect.succeed([])
      }
      case "message_delta": {
        const d = isObject(ev.delta) ? ev.delta : {}
        if (d.stop_reason !== undefined) stopReason = d.stop_reason
        usage = readUsage(ev.usage, usage)
        return Effect.succeed([])
      }
      case "message_stop": {
        done = true
        const out = [...roleChunk(), chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: finishReasonOf(stopReason) }])]
        if (usage !== undefined) out.push(chunk([], { usage: openAIUsage(usage) }))
        return Effect.succeed(out)
      }
      case "error": {
        const err = isObject(ev.error) ? ev.error : {}
        const type = typeof err.type === "string" ? err.type : "unknown_error"
        const message = typeof err.message === "string" ? err.message : type
        return Effect.fail(
          new UpstreamFailure({ reason: "protocol", message: `provider ${name} stream error ${type}: ${message}`, retryable: RETRYABLE_STREAM_ERRORS.has(type) })
        )
      }
      default:
        // ping, content_block_stop, and event types added later
        return Effect.succeed([])
    }
  }

  return {
    step,
    get done() {
      return done
    },
    truncated: () => protocol("ended the stream before message_stop")
  }
}

// ---------------------------------------------------------------------------
// the provider

export const anthropicMessagesUrl = (baseUrl: string | undefined): string =>
  `${(baseUrl ?? DEFAULT_ANTHROPIC_BASE_URL).replace(/\/+$/, "").replace(/\/v1$/, "")}/v1/messages`

export const makeAnthropicProvider = (
  name: string,
  config: AnthropicConfig,
  client: HttpClient.HttpClient,
  defaultTimeoutMs: number
): ChatProvider => {
  const apiKey = config.api_key_env === undefined ? undefined : process.env[config.api_key_env]
  const secret = apiKey === undefined ? undefined : Redacted.make(apiKey)
  const url = anthropicMessagesUrl(config.base_url)
  const timeout = Duration.millis(config.timeout_ms ?? defaultTimeoutMs)
  const timedOut = timeoutFailure(name, Duration.toMillis(timeout))
  const protocol = (message: string) => new UpstreamFailure({ reason: "protocol", message: `provider ${name} ${message}`, retryable: true })

  const request = (route: RouteConfig, body: Json, stream: boolean) => {
    const payload = toAnthropicRequest(route, body)
    if (stream) payload.stream = true
    const req = HttpClientRequest.post(url).pipe(
      HttpClientRequest.setHeader("anthropic-version", ANTHROPIC_VERSION),
      HttpClientRequest.setHeader("accept", stream ? "text/event-stream" : "application/json"),
      HttpClientRequest.bodyText(JSON.stringify(payload), "application/json")
    )
    return secret === undefined ? req : HttpClientRequest.setHeader(req, "x-api-key", Redacted.value(secret))
  }

  const complete: ChatProvider["complete"] = (route, body) =>
    Effect.scoped(
      Effect.gen(function* () {
        const res = yield* client.execute(request(route, body, false))
        const text = yield* res.text
        if (res.status >= 400) return yield* statusFailure(res.status, upstreamErrorDetail(text))
        let json: unknown
        try {
          json = JSON.parse(text)
        } catch {
          return yield* protocol("sent a body that is not JSON")
        }
        if (!isObject(json)) return yield* protocol("sent a body that is not a JSON object")
        if (json.type === "error") return yield* protocol(`answered with an error: ${upstreamErrorDetail(text)}`)
        if (!Array.isArray(json.content)) return yield* protocol("sent a body that is not an Anthropic message")
        const completion = toOpenAICompletion(json, route.upstream_model, yield* Clock.currentTimeMillis)
        return { raw: JSON.stringify(completion), json: completion }
      })
    ).pipe(
      catchTransport(name),
      Effect.timeoutFail({ duration: timeout, onTimeout: timedOut })
    )

  const stream: ChatProvider["stream"] = (route, body) =>
    Effect.gen(function* () {
      const res = yield* client.execute(request(route, body, true)).pipe(
        catchTransport(name)
      )
      if (res.status >= 400) {
        const text = yield* res.text.pipe(Effect.orElseSucceed(() => ""))
        return yield* statusFailure(res.status, upstreamErrorDetail(text))
      }
      const translator = makeStreamTranslator(name, route.upstream_model, yield* Clock.currentTimeMillis)
      const translated = sseData(res.stream).pipe(
        Stream.catchAll((e) =>
          Stream.fail(
            e instanceof UpstreamFailure
              ? e
              : new UpstreamFailure({ reason: "connect", message: `provider ${name} stream broke: ${String((e as { cause?: unknown }).cause ?? e)}`, retryable: true })
          )
        ),
        Stream.mapEffect((data) => Effect.map(translator.step(data), (chunks) => ({ chunks, last: translator.done }))),
        Stream.takeUntil((step) => step.last),
        Stream.mapConcat((step) => step.chunks),
        Stream.concat(Stream.suspend(() => (translator.done ? Stream.empty : Stream.fail(translator.truncated()))))
      )
      // Read up to the first chunk before handing the stream over, so that an `error` event sent
      // right after the 200 (e.g. overloaded_error) is a failure before any token: retried or
      // failed over like a 529.
      const pull = yield* Stream.toPull(translated)
      let first = Chunk.empty<string>()
      let ended = false
      while (Chunk.isEmpty(first) && !ended) {
        const next = yield* Effect.either(pull)
        if (Either.isRight(next)) first = next.right
        else if (Option.isSome(next.left)) return yield* next.left.value
        else ended = true
      }
      return yield* dataEventsOf(ended ? Stream.fromChunk(first) : Stream.concat(Stream.fromChunk(first), Stream.repeatEffectChunkOption(pull)))
    }).pipe(Effect.timeoutFail({ duration: timeout, onTimeout: timedOut }))

  return { type: "anthropic", complete, stream }
}
