/** The mock's OpenAI Chat Completions handler: POST /v1/chat/completions, JSON and SSE. */
import type { ServerResponse } from "node:http"
import { preamble, writeStream } from "./faults.ts"
import { countPrompt, isObject, type Json, lastUserText, numberOrUndefined, planReply, randomId, resolveUsage, type UsageNumbers } from "./replies.ts"
import type { CompletionRequest } from "./types.ts"
import { sendJson } from "./wire.ts"

export const openAIUsage = (u: UsageNumbers) => ({
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

export const openAIErrorFor = (status: number, message: string) => {
  let type = "invalid_request_error"
  let code: string = "mock_error"
  if (status === 400) code = "invalid_request"
  else if (status === 401) code = "invalid_api_key"
  else if (status === 403) {
    type = "permission_error"
    code = "permission_denied"
  } else if (status === 404) code = "not_found"
  else if (status === 429) {
    type = "requests"
    code = "rate_limit_exceeded"
  } else if (status >= 500) {
    type = "server_error"
    code = "server_error"
  }
  return { error: { message, type, param: null, code } }
}

export const chatCompletions = async (res: ServerResponse, { behavior, body, messages, model, requestId }: CompletionRequest): Promise<void> => {
  if (await preamble(res, behavior, requestId, openAIErrorFor)) return
  const maxTokens = numberOrUndefined(body["max_completion_tokens"]) ?? numberOrUndefined(body["max_tokens"])
  const plan = planReply(behavior, lastUserText(messages), maxTokens)
  const usage = resolveUsage(behavior, () => countPrompt(messages), plan)
  const id = randomId("chatcmpl-")
  const created = Math.floor(Date.now() / 1000)
  const finishReason = plan.truncated ? "length" : "stop"

  if (body["stream"] !== true) {
    const out: Json = {
      id,
      object: "chat.completion",
      created,
      model,
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: plan.text, refusal: null, annotations: [] },
          logprobs: null,
          finish_reason: finishReason
        }
      ]
    }
    if (behavior.omitUsage !== true) out["usage"] = openAIUsage(usage)
    out["service_tier"] = "default"
    out["system_fingerprint"] = "fp_mock"
    sendJson(res, behavior.status ?? 200, out, requestId)
    return
  }

  const streamOptions = body["stream_options"]
  const includeUsage = isObject(streamOptions) && streamOptions["include_usage"] === true
  const base = `{"id":"${id}","object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"service_tier":"default","system_fingerprint":"fp_mock","choices":`
  const usageTail = includeUsage ? `,"usage":null}` : `}`
  const chunk = (delta: Json, finish: string | null): string =>
    `data: ${base}[{"index":0,"delta":${JSON.stringify(delta)},"logprobs":null,"finish_reason":${finish === null ? "null" : `"${finish}"`}}]${usageTail}\n\n`

  const head = [chunk({ role: "assistant", content: "", refusal: null }, null)]
  const content = plan.chunks.map((c) => chunk({ content: c }, null))
  const tail = [chunk({}, finishReason)]
  if (includeUsage && behavior.omitUsage !== true) tail.push(`data: ${base}[],"usage":${JSON.stringify(openAIUsage(usage))}}\n\n`)
  tail.push("data: [DONE]\n\n")
  await writeStream(res, behavior, requestId, head, content, tail)
}
