/**
 * What the mock answers, whatever the provider's wire shape: a deterministic reply, cut into stream
 * chunks, with real token counts (o200k via gpt-tokenizer, chat-aware). Counts and replies are
 * memoised (per distinct prompt, per distinct reply text): a benchmark whose bodies differ only in
 * their metadata pays the tokenizer once, so the mock does not starve the targets it is meant to
 * measure (bench/targets/mock.ts serves these same handlers).
 */
import { decode, encode, encodeChat } from "gpt-tokenizer"
import type { MockBehavior } from "./types.ts"

export type Json = Record<string, unknown>

export const isObject = (u: unknown): u is Json => typeof u === "object" && u !== null && !Array.isArray(u)

/** Model used for gpt-tokenizer's chat-aware counting (o200k_base). */
const TOKENIZER_MODEL = "gpt-4o"
const FILLER_WORDS = [
  " the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog", " and", " then",
  " runs", " away", " from", " home", " today", " with", " great", " speed", " into", " light"
] as const
const DEFAULT_REPLY_TOKENS = 30
/** Content events per stream unless a behaviour says otherwise. */
const DEFAULT_CHUNKS = 5

let idCounter = 0
export const randomId = (prefix: string): string => {
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

/** A bounded memo: the oldest key goes first. */
const memo = <V>(max: number, compute: (key: string) => V) => {
  const m = new Map<string, V>()
  return (key: string): V => {
    let v = m.get(key)
    if (v === undefined) {
      v = compute(key)
      if (m.size >= max) m.delete(m.keys().next().value!)
      m.set(key, v)
    }
    return v
  }
}

/** Flattens OpenAI / Anthropic message content (string or array of parts) into text. */
export const contentToText = (content: unknown): string => {
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

/** Splits text into ~`target` chunks on word boundaries; concatenation equals the input. */
export const splitIntoChunks = (text: string, target = DEFAULT_CHUNKS): string[] => {
  if (text.length === 0) return []
  const pieces = text.match(/\S+\s*|\s+/g) ?? [text]
  const per = Math.max(1, Math.ceil(pieces.length / target))
  const chunks: string[] = []
  for (let i = 0; i < pieces.length; i += per) chunks.push(pieces.slice(i, i + per).join(""))
  return chunks
}

interface ChatMsg {
  role: string
  content: string
}

/** Prompt tokens of the messages, chat-aware, memoised per distinct message list. */
const countChatJson = memo(1024, (key): number => {
  const messages = JSON.parse(key) as Array<ChatMsg>
  try {
    return encodeChat(messages as Parameters<typeof encodeChat>[0], TOKENIZER_MODEL).length
  } catch {
    let n = 3
    for (const m of messages) n += 3 + encode(m.content).length
    return n
  }
})

/** The prompt's token count: its messages as text (tool calls included), after an optional system text. */
export const countPrompt = (messages: ReadonlyArray<unknown>, system = ""): number => {
  const msgs: Array<ChatMsg> = messages.map((m) => {
    if (!isObject(m)) return { role: "user", content: "" }
    const role = typeof m["role"] === "string" ? m["role"] : "user"
    let content = contentToText(m["content"])
    if (Array.isArray(m["tool_calls"])) content += JSON.stringify(m["tool_calls"])
    return { role, content }
  })
  if (system.length > 0) msgs.unshift({ role: "system", content: system })
  return countChatJson(JSON.stringify(msgs))
}

export const lastUserText = (messages: ReadonlyArray<unknown>): string => {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]
    if (isObject(m) && m["role"] === "user") return contentToText(m["content"])
  }
  return ""
}

export interface ReplyPlan {
  readonly text: string
  /** The text as stream content events. */
  readonly chunks: ReadonlyArray<string>
  /** Text tokens only. */
  readonly completionTokens: number
  readonly truncated: boolean
}

const defaultReplyOf = memo(1024, defaultReply)
const tokensOf = memo(1024, (text) => encode(text))
const chunksOf = memo(1024, (key) => {
  const cut = key.indexOf("\n")
  return splitIntoChunks(key.slice(cut + 1), Number(key.slice(0, cut)))
})

export const planReply = (behavior: MockBehavior, lastUser: string, maxTokens: number | undefined): ReplyPlan => {
  const full = behavior.reply ?? defaultReplyOf(lastUser)
  const tokens = tokensOf(full)
  const truncated = maxTokens !== undefined && maxTokens >= 0 && tokens.length > maxTokens
  const text = truncated ? decode(tokens.slice(0, maxTokens)) : full
  return { text, chunks: chunksOf(`${behavior.chunks ?? DEFAULT_CHUNKS}\n${text}`), completionTokens: truncated ? maxTokens : tokens.length, truncated }
}

export const numberOrUndefined = (u: unknown): number | undefined => (typeof u === "number" && Number.isFinite(u) ? Math.floor(u) : undefined)

export interface UsageNumbers {
  prompt: number
  completion: number
  cached: number
  reasoning: number
}

export const resolveUsage = (behavior: MockBehavior, countPrompt: () => number, plan: ReplyPlan): UsageNumbers => {
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
