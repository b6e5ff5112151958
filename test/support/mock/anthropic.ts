/** The mock's Anthropic Messages handler: POST /v1/messages, JSON and SSE (message_start … message_stop). */
import type { ServerResponse } from "node:http"
import { preamble, writeStream } from "./faults.ts"
import { contentToText, countPrompt, type Json, lastUserText, numberOrUndefined, planReply, randomId, resolveUsage, type UsageNumbers } from "./replies.ts"
import type { CompletionRequest } from "./types.ts"
import { sendJson } from "./wire.ts"

/** Anthropic semantics: input_tokens excludes cache reads, so total input = input_tokens + cache_read_input_tokens. */
export const anthropicUsage = (u: UsageNumbers) => ({
  input_tokens: Math.max(0, u.prompt - u.cached),
  cache_creation_input_tokens: 0,
  cache_read_input_tokens: u.cached,
  output_tokens: u.completion
})

export const anthropicErrorFor = (status: number, message: string) => {
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

const event = (name: string, data: unknown): string => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`

export const messages = async (res: ServerResponse, { behavior, body, messages, model, requestId }: CompletionRequest): Promise<void> => {
  if (await preamble(res, behavior, requestId, anthropicErrorFor)) return
  const plan = planReply(behavior, lastUserText(messages), numberOrUndefined(body["max_tokens"]))
  const usage = resolveUsage(behavior, () => countPrompt(messages, contentToText(body["system"])), plan)
  const id = randomId("msg_mock")
  const stopReason = plan.truncated ? "max_tokens" : "end_turn"

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
    sendJson(res, behavior.status ?? 200, out, requestId)
    return
  }

  const startMessage: Json = { id, type: "message", role: "assistant", content: [], model, stop_reason: null, stop_sequence: null }
  if (behavior.omitUsage !== true) startMessage["usage"] = { ...anthropicUsage(usage), output_tokens: 1 }
  const head = [
    event("message_start", { type: "message_start", message: startMessage }),
    event("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
    event("ping", { type: "ping" })
  ]
  const content = plan.chunks.map((text) => event("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } }))
  const messageDelta: Json = { type: "message_delta", delta: { stop_reason: stopReason, stop_sequence: null } }
  if (behavior.omitUsage !== true) messageDelta["usage"] = { output_tokens: usage.completion }
  const tail = [
    event("content_block_stop", { type: "content_block_stop", index: 0 }),
    event("message_delta", messageDelta),
    event("message_stop", { type: "message_stop" })
  ]
  await writeStream(res, behavior, requestId, head, content, tail)
}
