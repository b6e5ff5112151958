/**
 * POST /v1/chat/completions: the upstream's chat completion passes through byte for byte, with
 * `governance` appended as the last member. In a stream, governance rides on the last chunk before
 * [DONE]: the usage chunk when the client asked for usage, otherwise the finish_reason chunk, held
 * back until the upstream ends and the charge settles (docs/contract.md §6).
 */
import { type Governance, SSE_DONE, sseFrame, type Surface, withGovernance } from "./Surface.ts"

const hasFinish = (json: Record<string, unknown>): boolean =>
  Array.isArray(json.choices) &&
  (json.choices as ReadonlyArray<{ finish_reason?: unknown }>).some((c) => c?.finish_reason !== null && c?.finish_reason !== undefined)

const errorFrame = (message: string, governance: Governance | undefined) =>
  sseFrame(
    JSON.stringify({
      error: { message, type: "server_error", code: "route_unavailable", param: null },
      ...(governance === undefined ? {} : { governance })
    })
  )

export const chatCompletionsSurface: Surface = {
  path: "/v1/chat/completions",
  renderBody: (raw, _json, governance) => withGovernance(raw, governance),
  streamRenderer: ({ includeUsage, requestId, nowMs }) => {
    let held: string | undefined
    let meta = { id: `chatcmpl-${requestId}`, created: Math.floor(nowMs / 1000), model: "" }
    return {
      onChunk: (data, json) => {
        if (json === undefined) return [sseFrame(data)]
        if (typeof json.id === "string") meta = { id: json.id, created: Number(json.created ?? meta.created), model: String(json.model ?? "") }
        const choices = json.choices
        if (json.usage !== null && typeof json.usage === "object" && (!Array.isArray(choices) || choices.length === 0)) {
          // The usage chunk: held for governance if the client asked for usage, dropped otherwise.
          if (includeUsage) held = data
          return []
        }
        // We always ask the upstream for usage; strip its per-chunk `"usage": null` if the client did not.
        const out = !includeUsage && "usage" in json ? JSON.stringify({ ...json, usage: undefined }) : data
        if (!includeUsage && hasFinish(json)) {
          held = out
          return []
        }
        return [sseFrame(out)]
      },
      complete: (governance, tokens) => {
        if (held !== undefined) return [sseFrame(withGovernance(held, governance)), SSE_DONE]
        const last: Record<string, unknown> = { id: meta.id, object: "chat.completion.chunk", created: meta.created, model: meta.model, choices: [] }
        if (includeUsage) {
          const prompt = tokens.input + tokens.cached_input
          const completion = tokens.output + tokens.reasoning
          last.usage = { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
        }
        return [sseFrame(withGovernance(JSON.stringify(last), governance)), SSE_DONE]
      },
      broken: (message, governance) => [errorFrame(message, governance)]
    }
  }
}
