/**
 * Request mapping: an OpenAI chat completion body → an Anthropic Messages body (without `stream`).
 *
 * - `system`/`developer` messages → top-level `system` (joined with a blank line), wherever they are.
 * - user/assistant text → `messages`; consecutive same-role messages are merged; empty text is dropped
 *   (Anthropic rejects empty text blocks), and a message left with nothing is dropped.
 * - assistant `tool_calls` → `tool_use` blocks; `tool` messages → `tool_result` blocks in a user turn;
 *   function `tools` → Anthropic tools; `tool_choice` and `parallel_tool_calls` mapped; legacy
 *   `function` role / `function_call` and non-function tools are dropped.
 * - `max_tokens` = max_completion_tokens ?? max_tokens ?? route.max_output_tokens; temperature
 *   (clamped to Anthropic's 0..1), top_p, stop → stop_sequences, user / metadata.user_id →
 *   metadata.user_id. Every other OpenAI field is dropped (Anthropic rejects unknown fields).
 */
import type { RouteConfig } from "../../domain/config.ts"
import { isObject, type Json, num } from "./json.ts"

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
