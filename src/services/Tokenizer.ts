/**
 * Token counting with a real BPE tokenizer (o200k_base via gpt-tokenizer), used to estimate the input
 * of a reservation and to count delivered output when an upstream reports no usage.
 * Chat overhead follows OpenAI's published accounting: 3 tokens per message plus 3 to prime the reply.
 */
import { countTokens } from "gpt-tokenizer"

export const countText = (text: string): number => (text.length === 0 ? 0 : countTokens(text))

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
