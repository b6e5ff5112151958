/**
 * The built-in `demo` provider: a deterministic echo model that needs no network, so `npm start`
 * serves a working route on a fresh machine. Token counts are real (o200k_base), usage is reported.
 */
import { Clock, Effect } from "effect"
import { decode, encode } from "gpt-tokenizer"
import { randomBase32 } from "../domain/ids.ts"
import type { ChatProvider, DataEvents } from "./Provider.ts"

/**
 * How the demo counts tokens: the gateway's own counter (src/services/Tokenizer.ts), passed in by the
 * Router that builds the provider — a provider sits beside the store, below the services.
 */
export interface TokenCounter {
  /** A prompt's tokens, counted without holding the event loop (a prompt may be megabytes). */
  readonly countChatInput: (messages: ReadonlyArray<{ readonly role?: unknown; readonly content?: unknown }>) => Effect.Effect<number>
  readonly countText: (text: string) => number
}

const lastUserText = (messages: unknown): string => {
  if (!Array.isArray(messages)) return ""
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as { role?: unknown; content?: unknown }
    if (m?.role === "user") {
      if (typeof m.content === "string") return m.content
      if (Array.isArray(m.content)) return m.content.map((p: { text?: unknown }) => (typeof p?.text === "string" ? p.text : "")).join(" ")
    }
  }
  return ""
}

export const demoReply = (
  body: Record<string, unknown>,
  promptTokens: number,
  countText: TokenCounter["countText"]
): { text: string; finish: "stop" | "length"; promptTokens: number; completionTokens: number } => {
  const said = lastUserText(body.messages).replace(/\s+/g, " ").trim().slice(0, 280)
  const full = `Hello from Tollgate's built-in demo model. You said: "${said}". This reply was governed, metered and receipted; point TOLLGATE_CONFIG at a real provider to route to a model.`
  const cap = typeof body.max_completion_tokens === "number" ? body.max_completion_tokens : typeof body.max_tokens === "number" ? body.max_tokens : Infinity
  const tokens = encode(full)
  const truncated = tokens.length > cap
  const text = truncated ? decode(tokens.slice(0, cap)) : full
  return {
    text,
    finish: truncated ? "length" : "stop",
    promptTokens,
    completionTokens: truncated ? cap : countText(full)
  }
}

export const makeDemoProvider = (delayMs: number, counter: TokenCounter): ChatProvider => {
  const pause = delayMs > 0 ? Effect.sleep(delayMs) : Effect.void
  /** The reply to `body`, after the pause, its prompt counted in slices (the reply itself is short). */
  const reply = (body: Record<string, unknown>) =>
    Effect.zipRight(
      pause,
      Effect.map(counter.countChatInput(Array.isArray(body.messages) ? body.messages : []), (promptTokens) => demoReply(body, promptTokens, counter.countText))
    )
  const usageOf = (r: ReturnType<typeof demoReply>) => ({
    prompt_tokens: r.promptTokens,
    completion_tokens: r.completionTokens,
    total_tokens: r.promptTokens + r.completionTokens,
    prompt_tokens_details: { cached_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0 }
  })

  const complete: ChatProvider["complete"] = (route, body) =>
    Effect.flatMap(reply(body), (r) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const json = {
          id: `chatcmpl-${randomBase32(15)}`,
          object: "chat.completion",
          created: Math.floor(now / 1000),
          model: route.upstream_model,
          choices: [{ index: 0, message: { role: "assistant", content: r.text }, finish_reason: r.finish, logprobs: null }],
          usage: usageOf(r)
        }
        return { raw: JSON.stringify(json), json }
      })
    )

  const stream: ChatProvider["stream"] = (route, body) =>
    Effect.flatMap(reply(body), (r) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const id = `chatcmpl-${randomBase32(15)}`
        const created = Math.floor(now / 1000)
        const chunk = (choices: ReadonlyArray<unknown>, extra: Record<string, unknown> = {}) =>
          JSON.stringify({ id, object: "chat.completion.chunk", created, model: route.upstream_model, choices, ...extra })
        const words = r.text.match(/\S+\s*/g) ?? []
        const events = [
          chunk([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }]),
          ...words.map((w) => chunk([{ index: 0, delta: { content: w }, finish_reason: null }])),
          chunk([{ index: 0, delta: {}, finish_reason: r.finish }]),
          chunk([], { usage: usageOf(r) })
        ]
        // Each event its own batch, as a real upstream's would arrive.
        return { async *[Symbol.asyncIterator]() { for (const e of events) yield [e] } } satisfies DataEvents
      })
    )

  return { type: "demo", complete, stream }
}
