/**
 * Token counting with a real BPE tokenizer (o200k_base via gpt-tokenizer), used to estimate the input
 * of a reservation and to count delivered output when an upstream reports no usage.
 * Chat overhead follows OpenAI's published accounting: 3 tokens per message plus 3 to prime the reply.
 */
import { countTokens } from "gpt-tokenizer"

/**
 * Recent counts, least recently used first out. Prompts repeat — the same system prompt on every
 * call of an application, a conversation's history resent with each turn — and BPE costs ≈ 0.1 µs
 * a character, so a long system prompt would be re-counted at a cost of hundreds of µs per call. A
 * count is a pure function of the text, so a hit is exact. Bounded by entries and by characters held.
 */
export const makeCountCache = (count: (text: string) => number, maxEntries = 4096, maxChars = 4_000_000) => {
  const counts = new Map<string, number>()
  let chars = 0
  return (text: string): number => {
    const hit = counts.get(text)
    if (hit !== undefined) {
      counts.delete(text)
      counts.set(text, hit)
      return hit
    }
    const n = count(text)
    if (text.length > maxChars) return n
    counts.set(text, n)
    chars += text.length
    for (const oldest of counts.keys()) {
      if (counts.size <= maxEntries && chars <= maxChars) break
      counts.delete(oldest)
      chars -= oldest.length
    }
    return n
  }
}

const countCached = makeCountCache(countTokens)

export const countText = (text: string): number => (text.length === 0 ? 0 : countCached(text))

const contentText = (content: unknown): string => {
  if (typeof content === "string") return content
  if (Array.isArray(content)) {
    let s = ""
    for (const part of content) {
      if (part !== null && typeof part === "object" && typeof (part as { text?: unknown }).text === "string") {
        s += (part as { text: string }).text
      }
    }
    return s
  }
  return ""
}

export interface ChatMessageLike {
  readonly role?: unknown
  readonly content?: unknown
  readonly name?: unknown
  readonly tool_calls?: unknown
}

/** Estimated prompt tokens of a chat request (messages plus any tool definitions). */
export const countChat = (messages: ReadonlyArray<ChatMessageLike>, extra?: unknown): number => {
  let total = 3
  for (const m of messages) {
    total += 3
    if (typeof m.role === "string") total += countText(m.role)
    total += countText(contentText(m.content))
    if (typeof m.name === "string") total += 1 + countText(m.name)
    if (m.tool_calls !== undefined) total += countText(JSON.stringify(m.tool_calls))
  }
  if (extra !== undefined) total += countText(JSON.stringify(extra))
  return total
}
