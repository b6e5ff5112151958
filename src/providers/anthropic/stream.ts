/**
 * Stream mapping: Anthropic's SSE events (message_start, content_block_start/delta, message_delta,
 * message_stop, error, ping) → OpenAI `chat.completion.chunk` payloads, event by event in plain
 * JavaScript on the one SSE reader (sse.ts): no Effect Stream on the per-event path
 * (docs/decisions/0007).
 */
import { type DataEvents, UpstreamFailure } from "../Provider.ts"
import { isObject, type Json, num } from "./json.ts"
import { type AnthropicUsage, finishReasonOf, openAIUsage, readUsage } from "./response.ts"

const RETRYABLE_STREAM_ERRORS = new Set(["overloaded_error", "api_error", "rate_limit_error", "timeout_error"])

/**
 * A per-stream translator: one Anthropic event `data` in, OpenAI chunk payloads out. `done` turns
 * true at `message_stop`; an `error` event or unparsable data throws an UpstreamFailure.
 */
export const makeStreamTranslator = (name: string, fallbackModel: string, nowMs: number) => {
  let id = `msg_${nowMs.toString(36)}`
  let model = fallbackModel
  const created = Math.floor(nowMs / 1000)
  let usage: AnthropicUsage | undefined
  let stopReason: unknown = null
  let started = false
  let done = false
  /** Anthropic content block index → OpenAI tool_calls index. */
  const toolIndex = new Map<number, number>()

  const chunk = (choices: ReadonlyArray<unknown>, extra: Json = {}): string =>
    JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices, ...extra })
  const delta = (d: Json): string => chunk([{ index: 0, delta: d, logprobs: null, finish_reason: null }])
  const protocol = (message: string) => new UpstreamFailure({ reason: "protocol", message: `provider ${name} ${message}`, retryable: true })
  const roleChunk = (): Array<string> => {
    if (started) return []
    started = true
    return [delta({ role: "assistant", content: "" })]
  }

  const step = (data: string): ReadonlyArray<string> => {
    let ev: unknown
    try {
      ev = JSON.parse(data)
    } catch {
      throw protocol("sent a stream event that is not JSON")
    }
    if (!isObject(ev)) throw protocol("sent a stream event that is not a JSON object")
    switch (ev.type) {
      case "message_start": {
        const msg = isObject(ev.message) ? ev.message : {}
        if (typeof msg.id === "string") id = msg.id
        if (typeof msg.model === "string") model = msg.model
        usage = readUsage(msg.usage, usage)
        return roleChunk()
      }
      case "content_block_start": {
        const block = isObject(ev.content_block) ? ev.content_block : {}
        const index = num(ev.index) ?? 0
        if (block.type === "tool_use" && typeof block.name === "string") {
          const ti = toolIndex.size
          toolIndex.set(index, ti)
          return [
            ...roleChunk(),
            delta({ tool_calls: [{ index: ti, id: typeof block.id === "string" ? block.id : `call_${ti}`, type: "function", function: { name: block.name, arguments: "" } }] })
          ]
        }
        if (block.type === "text" && typeof block.text === "string" && block.text.length > 0) {
          return [...roleChunk(), delta({ content: block.text })]
        }
        return []
      }
      case "content_block_delta": {
        const d = isObject(ev.delta) ? ev.delta : {}
        if (d.type === "text_delta" && typeof d.text === "string" && d.text.length > 0) {
          return [...roleChunk(), delta({ content: d.text })]
        }
        if (d.type === "input_json_delta" && typeof d.partial_json === "string" && d.partial_json.length > 0) {
          const ti = toolIndex.get(num(ev.index) ?? 0)
          if (ti !== undefined) return [delta({ tool_calls: [{ index: ti, function: { arguments: d.partial_json } }] })]
        }
        // thinking_delta, signature_delta, citations_delta: not represented in chat.completion.chunk
        return []
      }
      case "message_delta": {
        const d = isObject(ev.delta) ? ev.delta : {}
        if (d.stop_reason !== undefined) stopReason = d.stop_reason
        usage = readUsage(ev.usage, usage)
        return []
      }
      case "message_stop": {
        done = true
        const out = [...roleChunk(), chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: finishReasonOf(stopReason) }])]
        if (usage !== undefined) out.push(chunk([], { usage: openAIUsage(usage) }))
        return out
      }
      case "error": {
        const err = isObject(ev.error) ? ev.error : {}
        const type = typeof err.type === "string" ? err.type : "unknown_error"
        const message = typeof err.message === "string" ? err.message : type
        throw new UpstreamFailure({ reason: "protocol", message: `provider ${name} stream error ${type}: ${message}`, retryable: RETRYABLE_STREAM_ERRORS.has(type) })
      }
      default:
        // ping, content_block_stop, and event types added later
        return []
    }
  }

  return {
    step,
    get done() {
      return done
    },
    truncated: () => protocol("ended the stream before message_stop")
  }
}

export type StreamTranslator = ReturnType<typeof makeStreamTranslator>

/**
 * The OpenAI chunk payloads of an Anthropic event stream, a batch per batch of events (an empty
 * batch is not yielded). Events after `message_stop` are ignored; the events themselves must end
 * there (the transport's SSE feed is given `() => translator.done`, so it stops reading there and
 * leaves the rest of the body to end by itself). A
 * stream that ends before `message_stop` throws the translator's `truncated()` failure; an `error`
 * event throws its failure, after the chunks of the events before it in its batch.
 */
export const translatedEvents = (events: DataEvents, translator: StreamTranslator): DataEvents => ({
  async *[Symbol.asyncIterator]() {
    for await (const batch of events) {
      if (translator.done) continue
      const out: Array<string> = []
      let failure: unknown
      try {
        for (const data of batch) {
          for (const chunk of translator.step(data)) out.push(chunk)
          if (translator.done) break
        }
      } catch (e) {
        failure = e // the chunks of the events before it are delivered first
      }
      if (out.length > 0) yield out
      if (failure !== undefined) throw failure
    }
    if (!translator.done) throw translator.truncated()
  }
})

/**
 * Reads `events` up to their first non-empty batch, and returns that batch with the events that
 * follow it, as one DataEvents: what an adapter hands over once the stream has really started (an
 * `error` event right after the 200, e.g. overloaded_error, then fails the opening, before any token,
 * and is retried or failed over like a 529). A stream that ends before any batch is empty.
 */
export const startedEvents = async (events: DataEvents): Promise<DataEvents> => {
  const it = events[Symbol.asyncIterator]()
  const first = await it.next()
  if (first.done === true) return { async *[Symbol.asyncIterator]() {} }
  return {
    async *[Symbol.asyncIterator]() {
      try {
        yield first.value
        for (let next = await it.next(); next.done !== true; next = await it.next()) yield next.value
      } finally {
        await it.return?.() // stopped early: the events below release the body
      }
    }
  }
}
