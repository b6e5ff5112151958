/**
 * POST /v1/responses: the OpenAI Responses API for text workflows (docs/contract.md §7), served by
 * translating to a chat completion upstream and translating the result back:
 *   input (string or message items) + instructions → messages; max_output_tokens → the output cap;
 *   function tools → chat tools; text.format → response_format.
 * The stream follows the Responses event sequence (response.created … response.completed) that the
 * official SDK's `responses.stream` accumulates; `governance` rides on the response object of
 * `response.completed` (and on the non-streaming response).
 */
import { Either } from "effect"
import type { TokenCounts } from "../../../spec/pricing.ts"
import { outputCapError } from "../../domain/chat.ts"
import { InvalidRequest, UnsupportedWorkflow } from "../../domain/errors.ts"
import { randomBase32 } from "../../domain/ids.ts"
import { type Governance, sseEvent, type Surface } from "./Surface.ts"

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v)
const bad = (message: string, param: string | null) => new InvalidRequest({ message, param })
const unsupported = (message: string, param: string | null) => new UnsupportedWorkflow({ message, param })
/** The first of an input item's `fields` that is not a string, as a 400 naming it (`input[2].call_id`). */
const notStrings = (item: Record<string, unknown>, at: string, fields: ReadonlyArray<string>): InvalidRequest | undefined => {
  const field = fields.find((f) => typeof item[f] !== "string")
  return field === undefined ? undefined : bad(`${at}.${field} must be a string.`, `${at}.${field}`)
}

const TEXT_INPUT_PARTS = new Set(["input_text", "output_text", "text"])
const MESSAGE_ROLES = new Set(["user", "assistant", "system", "developer"])
const PASS_THROUGH = ["temperature", "top_p", "user", "parallel_tool_calls", "tool_choice", "stream", "metadata", "store"] as const

/**
 * Translate a Responses request body into a chat completion body (validated again by the chat parser);
 * pure. Every field whose name changes on the way (`input`, `instructions` → `messages`,
 * `max_output_tokens` → `max_tokens`, `text.format` → `response_format`) is checked here, under the
 * name the client wrote, so the chat parser's refusals can only name fields both APIs share.
 */
export const responsesToChat = (body: unknown): Either.Either<Record<string, unknown>, InvalidRequest | UnsupportedWorkflow> => {
    if (!isObject(body)) return Either.left(bad("The request body must be a JSON object.", null))
    if (body.previous_response_id !== undefined && body.previous_response_id !== null) {
      return Either.left(unsupported("previous_response_id is not supported: Tollgate does not store conversations; send the full input.", "previous_response_id"))
    }
    if (body.conversation !== undefined && body.conversation !== null) {
      return Either.left(unsupported("Stored conversations are not supported; send the full input.", "conversation"))
    }
    const messages: Array<Record<string, unknown>> = []
    if (body.instructions !== undefined && body.instructions !== null) {
      if (typeof body.instructions !== "string") return Either.left(bad("'instructions' must be a string.", "instructions"))
      messages.push({ role: "system", content: body.instructions })
    }
    const input = body.input
    if (input === undefined) return Either.left(bad("Missing required parameter: 'input'.", "input"))
    if (typeof input === "string") {
      messages.push({ role: "user", content: input })
    } else if (Array.isArray(input)) {
      for (let i = 0; i < input.length; i++) {
        const item: unknown = input[i]
        const at = `input[${i}]`
        if (!isObject(item)) return Either.left(bad(`${at} must be an object.`, at))
        const type = item.type ?? "message"
        if (type === "function_call") {
          const refused = notStrings(item, at, ["call_id", "name", "arguments"])
          if (refused !== undefined) return Either.left(refused)
          messages.push({ role: "assistant", content: null, tool_calls: [{ id: item.call_id, type: "function", function: { name: item.name, arguments: item.arguments } }] })
          continue
        }
        if (type === "function_call_output") {
          const refused = notStrings(item, at, ["call_id"]) ?? (item.output === undefined ? bad(`${at}.output is required.`, `${at}.output`) : undefined)
          if (refused !== undefined) return Either.left(refused)
          messages.push({ role: "tool", tool_call_id: item.call_id, content: typeof item.output === "string" ? item.output : JSON.stringify(item.output) })
          continue
        }
        if (type !== "message") return Either.left(unsupported(`Input item type '${String(type)}' is outside the supported text workflows.`, `${at}.type`))
        if (typeof item.role !== "string" || !MESSAGE_ROLES.has(item.role)) {
          return Either.left(bad(`${at}.role must be one of user, assistant, system, developer.`, `${at}.role`))
        }
        const c = item.content
        if (typeof c === "string") {
          messages.push({ role: item.role, content: c })
        } else if (Array.isArray(c)) {
          let text = ""
          for (let j = 0; j < c.length; j++) {
            const part: unknown = c[j]
            if (!isObject(part) || typeof part.type !== "string") return Either.left(bad(`${at}.content[${j}] must be an object with a type.`, `${at}.content[${j}]`))
            if (!TEXT_INPUT_PARTS.has(part.type)) {
              return Either.left(unsupported(`Content part type '${part.type}' is outside the supported text workflows of the connected beta; only text is accepted.`, `${at}.content[${j}].type`))
            }
            if (typeof part.text !== "string") return Either.left(bad(`${at}.content[${j}].text must be a string.`, `${at}.content[${j}].text`))
            text += part.text
          }
          messages.push({ role: item.role, content: text })
        } else {
          return Either.left(bad(`${at}.content must be a string or an array of text parts.`, `${at}.content`))
        }
      }
    } else {
      return Either.left(bad("'input' must be a string or an array of input items.", "input"))
    }
    if (messages.length === 0) return Either.left(bad("'input' must contain at least one item.", "input"))
    const badCap = outputCapError(body, "max_output_tokens")
    if (badCap !== undefined) return Either.left(badCap)
    const chat: Record<string, unknown> = { model: body.model, messages }
    for (const k of PASS_THROUGH) if (body[k] !== undefined) chat[k] = body[k]
    delete chat.store
    if (body.stream === true) chat.stream_options = { include_usage: true }
    if (body.max_output_tokens !== undefined && body.max_output_tokens !== null) chat.max_tokens = body.max_output_tokens
    if (body.tools !== undefined && body.tools !== null && !Array.isArray(body.tools)) return Either.left(bad("'tools' must be an array of objects.", "tools"))
    if (Array.isArray(body.tools) && body.tools.length > 0) {
      const tools: Array<unknown> = []
      for (let i = 0; i < body.tools.length; i++) {
        const t: unknown = body.tools[i]
        if (!isObject(t) || t.type !== "function") {
          return Either.left(unsupported(`Tool type '${isObject(t) ? String(t.type) : "?"}' is not supported; only function tools are.`, `tools[${i}].type`))
        }
        tools.push({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters, strict: t.strict } })
      }
      chat.tools = tools
    }
    const format = isObject(body.text) ? body.text.format : undefined
    if (isObject(format) && format.type === "json_schema") {
      chat.response_format = { type: "json_schema", json_schema: { name: format.name, schema: format.schema, strict: format.strict } }
    } else if (isObject(format) && format.type === "json_object") {
      chat.response_format = { type: "json_object" }
    }
    if (body.modalities !== undefined) chat.modalities = body.modalities
    return Either.right(chat)
}

const usageOf = (t: TokenCounts) => ({
  input_tokens: t.input + t.cached_input,
  input_tokens_details: { cached_tokens: t.cached_input },
  output_tokens: t.output + t.reasoning,
  output_tokens_details: { reasoning_tokens: t.reasoning },
  total_tokens: t.input + t.cached_input + t.output + t.reasoning
})

interface ToolCall {
  readonly id: string
  readonly name: string
  readonly arguments: string
}

/** The Responses `response` object. */
const responseObject = (
  original: Record<string, unknown>,
  r: {
    readonly id: string
    readonly createdAt: number
    readonly model: string
    readonly status: "in_progress" | "completed" | "incomplete" | "failed"
    readonly messageId: string
    readonly text: string | undefined
    readonly toolCalls: ReadonlyArray<ToolCall>
    readonly truncated: boolean
    readonly tokens: TokenCounts | undefined
    readonly governance: Governance | undefined
  }
) => {
  const output: Array<unknown> = []
  if (r.text !== undefined) {
    output.push({
      type: "message",
      id: r.messageId,
      status: r.status === "in_progress" ? "in_progress" : "completed",
      role: "assistant",
      content: [{ type: "output_text", text: r.text, annotations: [], logprobs: [] }]
    })
  }
  for (const call of r.toolCalls) {
    output.push({ type: "function_call", id: `fc_${call.id}`, call_id: call.id, name: call.name, arguments: call.arguments, status: "completed" })
  }
  return {
    id: r.id,
    object: "response",
    created_at: r.createdAt,
    status: r.status,
    error: null,
    incomplete_details: r.truncated ? { reason: "max_output_tokens" } : null,
    instructions: original.instructions ?? null,
    max_output_tokens: original.max_output_tokens ?? null,
    model: r.model,
    output,
    parallel_tool_calls: original.parallel_tool_calls ?? true,
    previous_response_id: null,
    temperature: original.temperature ?? null,
    top_p: original.top_p ?? null,
    tool_choice: original.tool_choice ?? "auto",
    tools: original.tools ?? [],
    text: original.text ?? { format: { type: "text" } },
    metadata: original.metadata ?? {},
    usage: r.tokens === undefined ? null : usageOf(r.tokens),
    ...(r.governance === undefined ? {} : { governance: r.governance })
  }
}

const toolCallsOf = (message: unknown): ReadonlyArray<ToolCall> => {
  const calls = isObject(message) && Array.isArray(message.tool_calls) ? message.tool_calls : []
  return calls.flatMap((c: unknown) =>
    isObject(c) && isObject(c.function) ? [{ id: String(c.id ?? `call_${randomBase32(10)}`), name: String(c.function.name ?? ""), arguments: String(c.function.arguments ?? "") }] : []
  )
}

export const responsesSurface = (original: Record<string, unknown>): Surface => ({
  path: "/v1/responses",
  renderBody: (_raw, json, governance, tokens, nowMs) => {
    const choice = Array.isArray(json.choices) ? (json.choices[0] as { message?: { content?: unknown }; finish_reason?: unknown } | undefined) : undefined
    const content = choice?.message?.content
    const truncated = choice?.finish_reason === "length"
    const toolCalls = toolCallsOf(choice?.message)
    return JSON.stringify(
      responseObject(original, {
        id: `resp_${governance.request_id.slice(4)}`,
        createdAt: typeof json.created === "number" ? json.created : Math.floor(nowMs / 1000),
        model: String(json.model ?? original.model ?? ""),
        status: truncated ? "incomplete" : "completed",
        messageId: `msg_${governance.request_id.slice(4)}`,
        text: typeof content === "string" ? content : toolCalls.length === 0 ? "" : undefined,
        toolCalls,
        truncated,
        tokens,
        governance
      })
    )
  },
  streamRenderer: ({ requestId, nowMs }) => {
    const id = `resp_${requestId.slice(4)}`
    const messageId = `msg_${requestId.slice(4)}`
    const createdAt = Math.floor(nowMs / 1000)
    let model = String(original.model ?? "")
    let seq = 0
    let started = false
    let text = ""
    let truncated = false
    const calls = new Map<number, { id: string; name: string; arguments: string }>()
    const event = (type: string, payload: Record<string, unknown>) => sseEvent(type, JSON.stringify({ type, sequence_number: seq++, ...payload }))
    const snapshot = (status: "in_progress" | "completed" | "incomplete" | "failed", tokens?: TokenCounts, governance?: Governance) =>
      responseObject(original, {
        id,
        createdAt,
        model,
        status,
        messageId,
        text: status === "in_progress" ? undefined : text,
        toolCalls: [...calls.values()],
        truncated,
        tokens,
        governance
      })
    const start = (): Array<Uint8Array> => {
      if (started) return []
      started = true
      return [
        event("response.created", { response: snapshot("in_progress") }),
        event("response.in_progress", { response: snapshot("in_progress") }),
        event("response.output_item.added", { output_index: 0, item: { type: "message", id: messageId, status: "in_progress", role: "assistant", content: [] } }),
        event("response.content_part.added", { item_id: messageId, output_index: 0, content_index: 0, part: { type: "output_text", text: "", annotations: [], logprobs: [] } })
      ]
    }
    return {
      onChunk: (_data, json) => {
        if (json === undefined) return []
        if (typeof json.model === "string") model = json.model
        const frames = start()
        const choices = Array.isArray(json.choices) ? (json.choices as ReadonlyArray<{ delta?: Record<string, unknown>; finish_reason?: unknown }>) : []
        for (const c of choices) {
          const delta = c?.delta
          if (typeof delta?.content === "string" && delta.content.length > 0) {
            text += delta.content
            frames.push(event("response.output_text.delta", { item_id: messageId, output_index: 0, content_index: 0, delta: delta.content, logprobs: [] }))
          }
          if (Array.isArray(delta?.tool_calls)) {
            for (const t of delta.tool_calls as ReadonlyArray<{ index?: number; id?: string; function?: { name?: string; arguments?: string } }>) {
              const slot = calls.get(t.index ?? 0) ?? { id: t.id ?? `call_${randomBase32(10)}`, name: "", arguments: "" }
              if (t.function?.name !== undefined) slot.name += t.function.name
              if (t.function?.arguments !== undefined) slot.arguments += t.function.arguments
              calls.set(t.index ?? 0, slot)
            }
          }
          if (c?.finish_reason === "length") truncated = true
        }
        return frames
      },
      complete: (governance, tokens) => {
        const part = { type: "output_text", text, annotations: [], logprobs: [] }
        return [
          ...start(),
          event("response.output_text.done", { item_id: messageId, output_index: 0, content_index: 0, text, logprobs: [] }),
          event("response.content_part.done", { item_id: messageId, output_index: 0, content_index: 0, part }),
          event("response.output_item.done", { output_index: 0, item: { type: "message", id: messageId, status: "completed", role: "assistant", content: [part] } }),
          event(truncated ? "response.incomplete" : "response.completed", { response: snapshot(truncated ? "incomplete" : "completed", tokens, governance) })
        ]
      },
      broken: (message, governance) => [
        ...start(),
        event("error", { code: "route_unavailable", message, param: null, ...(governance === undefined ? {} : { governance }) })
      ]
    }
  }
})
