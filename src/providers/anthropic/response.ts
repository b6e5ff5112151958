/**
 * Response mapping: an Anthropic Message → an OpenAI `chat.completion`, and the usage both shapes share.
 * Usage: prompt_tokens = input + cache read + cache creation tokens (Anthropic's input_tokens excludes
 * both), cached_tokens = cache reads. No usage upstream → no usage here (the Gateway counts).
 */
import { isObject, type Json, num } from "./json.ts"

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

export interface AnthropicUsage {
  input: number
  cacheRead: number
  cacheCreation: number
  output: number
}

export const readUsage = (u: unknown, into?: AnthropicUsage): AnthropicUsage | undefined => {
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
