/**
 * The Anthropic stream mapping on its own (anthropic/stream.ts), over event batches cut every way a
 * network can cut them. Over real HTTP: anthropic.test.ts and transport.test.ts.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { makeStreamTranslator, startedEvents, translatedEvents } from "../../src/providers/anthropic/stream.ts"
import type { DataEvents, UpstreamFailure } from "../../src/providers/Provider.ts"

const NOW = 1_700_000_000_000

const messageStart = {
  type: "message_start",
  message: { id: "msg_1", type: "message", role: "assistant", model: "claude-x", content: [], usage: { input_tokens: 10, cache_read_input_tokens: 5, output_tokens: 1 } }
}
const blockStart = { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }
const textDelta = (text: string) => ({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text } })
const messageDelta = { type: "message_delta", delta: { stop_reason: "max_tokens" }, usage: { output_tokens: 7 } }
const messageStop = { type: "message_stop" }
const whole = [messageStart, blockStart, textDelta("Hel"), { type: "ping" }, textDelta("lo"), { type: "content_block_stop", index: 0 }, messageDelta, messageStop].map((e) =>
  JSON.stringify(e)
)

/** The events, cut into batches at the given points (a batch may be empty). */
const batches = (events: ReadonlyArray<string>, points: ReadonlyArray<number>): DataEvents => {
  const cuts = [...new Set(points.map((p) => p % (events.length + 1)))].sort((a, b) => a - b)
  const out: Array<ReadonlyArray<string>> = []
  let start = 0
  for (const p of [...cuts, events.length]) {
    out.push(events.slice(start, p))
    start = p
  }
  return {
    async *[Symbol.asyncIterator]() {
      yield* out
    }
  }
}

const drain = async (events: DataEvents) => {
  const payloads: Array<Record<string, any>> = []
  try {
    for await (const batch of events) for (const p of batch) payloads.push(JSON.parse(p))
    return { payloads, failure: undefined }
  } catch (e) {
    return { payloads, failure: e as UpstreamFailure }
  }
}

const translate = (events: DataEvents) => translatedEvents(events, makeStreamTranslator("anth", "claude-test", NOW))

describe("Anthropic stream mapping", () => {
  it("(invariant: the chunks do not depend on how the events are batched) message_start, deltas, message_delta usage, message_stop", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.nat(), { maxLength: 10 }), async (points) => {
        const { payloads, failure } = await drain(translate(batches(whole, points)))
        expect(failure).toBeUndefined()
        expect(payloads.map((p) => p.id)).toEqual(payloads.map(() => "msg_1")) // message_start's id
        expect(payloads.map((p) => p.model)).toEqual(payloads.map(() => "claude-x"))
        expect(payloads.map((p) => p.choices[0]?.delta)).toEqual([{ role: "assistant", content: "" }, { content: "Hel" }, { content: "lo" }, {}, undefined])
        expect(payloads.at(-2)!.choices[0].finish_reason).toBe("length") // message_delta's stop_reason
        // message_start's input (10 + 5 cache reads) with message_delta's output (7)
        expect(payloads.at(-1)!.usage).toMatchObject({ prompt_tokens: 15, completion_tokens: 7, total_tokens: 22, prompt_tokens_details: { cached_tokens: 5 } })
      }),
      { numRuns: 100 }
    )
  })

  it("ignores what follows message_stop", async () => {
    const { payloads, failure } = await drain(translate(batches([...whole, JSON.stringify(textDelta("late"))], [])))
    expect(failure).toBeUndefined()
    expect(payloads.some((p) => p.choices[0]?.delta?.content === "late")).toBe(false)
  })

  it("an error event: the chunks before it, then its failure (retryable only for overload-like types)", async () => {
    const events = [whole[0]!, whole[1]!, whole[2]!, JSON.stringify({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } })]
    const { payloads, failure } = await drain(translate(batches(events, [])))
    expect(payloads.map((p) => p.choices[0].delta)).toEqual([{ role: "assistant", content: "" }, { content: "Hel" }])
    expect(failure).toMatchObject({ _tag: "UpstreamFailure", reason: "protocol", retryable: true })
    expect(failure!.message).toContain("overloaded_error: Overloaded")
    const bad = await drain(translate(batches([JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: "no" } })], [])))
    expect(bad.failure).toMatchObject({ retryable: false })
  })

  it("events that end before message_stop (a cut connection that closed cleanly) are a failure", async () => {
    const { payloads, failure } = await drain(translate(batches(whole.slice(0, 5), [2])))
    expect(payloads.length).toBe(3)
    expect(failure).toMatchObject({ _tag: "UpstreamFailure", reason: "protocol", message: "provider anth ended the stream before message_stop" })
  })

  it("data that is not JSON is a protocol failure", async () => {
    const { failure } = await drain(translate(batches([whole[0]!, "{oops"], [])))
    expect(failure).toMatchObject({ reason: "protocol", message: "provider anth sent a stream event that is not JSON" })
  })

  it("startedEvents reads up to the first batch (an early failure fails the start) and hands on the rest unchanged", async () => {
    const failing = translate(batches([JSON.stringify({ type: "ping" }), JSON.stringify({ type: "error", error: { type: "api_error", message: "x" } })], [1]))
    await expect(startedEvents(failing)).rejects.toMatchObject({ _tag: "UpstreamFailure" })
    const started = await startedEvents(translate(batches(whole, [1, 3, 6])))
    expect((await drain(started)).payloads.length).toBe(5)
  })
})
