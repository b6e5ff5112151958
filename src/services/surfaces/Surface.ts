/**
 * A surface is one public API shape over the same governed pipeline (chat completions, responses).
 * The Gateway does the governance and the accounting; a surface only decides how the upstream's
 * OpenAI chat completion (whole, or as chunks) is presented to the client, governance included.
 */
import type { TokenCounts } from "../../../spec/pricing.ts"
import type { Verification } from "../Requests.ts"

export interface Governance {
  readonly request_id: string
  readonly status: "completed"
  readonly verification: Verification
  readonly credits_charged: number
  readonly rate_card_version: string
  readonly receipt_id: string
}

export interface StreamRenderer {
  /** Frames to forward now for one upstream chunk (`json` undefined when the payload is not JSON). */
  readonly onChunk: (data: string, json: Record<string, unknown> | undefined) => ReadonlyArray<Uint8Array>
  /** Frames that end a completed stream; they carry the governance evidence. */
  readonly complete: (governance: Governance, tokens: TokenCounts) => ReadonlyArray<Uint8Array>
  /** Frames that end a broken stream (governance when something was charged). */
  readonly broken: (message: string, governance: Governance | undefined) => ReadonlyArray<Uint8Array>
}

export interface Surface {
  /** The public path, recorded on the request and part of the idempotency fingerprint. */
  readonly path: string
  /**
   * The non-streaming body: the upstream chat completion (raw text and parsed) plus governance.
   * `nowMs` (from the Clock) dates what the upstream left undated.
   */
  readonly renderBody: (raw: string, json: Record<string, unknown>, governance: Governance, tokens: TokenCounts, nowMs: number) => string
  readonly streamRenderer: (options: { readonly includeUsage: boolean; readonly requestId: string; readonly nowMs: number }) => StreamRenderer
}

const encoder = new TextEncoder()
export const sseFrame = (data: string): Uint8Array => encoder.encode(`data: ${data}\n\n`)
export const sseEvent = (event: string, data: string): Uint8Array => encoder.encode(`event: ${event}\ndata: ${data}\n\n`)
export const SSE_DONE = encoder.encode("data: [DONE]\n\n")

/** Add `"governance": {...}` as the last member of a JSON object text, without re-encoding the rest. */
export const withGovernance = (rawObject: string, governance: Governance): string => {
  const end = rawObject.lastIndexOf("}")
  const head = rawObject.slice(0, end).trimEnd()
  const sep = head.endsWith("{") ? "" : ","
  return `${head}${sep}"governance":${JSON.stringify(governance)}}`
}

/** Text the client received in a chat completion message or delta: content, refusal, tool call name and arguments. */
export const deliveredText = (m: unknown): string => {
  if (m === null || typeof m !== "object") return ""
  const o = m as { content?: unknown; refusal?: unknown; tool_calls?: unknown }
  let s = typeof o.content === "string" ? o.content : ""
  if (typeof o.refusal === "string") s += o.refusal
  if (Array.isArray(o.tool_calls)) {
    for (const t of o.tool_calls as ReadonlyArray<{ function?: { name?: unknown; arguments?: unknown } }>) {
      if (typeof t?.function?.name === "string") s += t.function.name
      if (typeof t?.function?.arguments === "string") s += t.function.arguments
    }
  }
  return s
}
