/**
 * The SSE reader against a reference: whatever the line endings and however the bytes are cut into
 * network chunks (even inside a multi-byte character or a CRLF), it yields exactly the events' data.
 */
import fc from "fast-check"
import { describe, expect, it, vi } from "vitest"
import { UpstreamFailure } from "../../src/providers/Provider.ts"
import { makeSseParser, sseEvents } from "../../src/providers/sse.ts"

const encoder = new TextEncoder()

/** An event: its data lines (no line breaks inside), plus optional comment and other fields. */
const eventArb = fc.record({
  lines: fc.array(fc.string({ unit: fc.constantFrom("a", "é", "€", "😀", " ", ":", "{", "}", '"', "d") }), { minLength: 1, maxLength: 3 }),
  comment: fc.boolean(),
  id: fc.boolean(),
  space: fc.boolean()
})

const render = (events: ReadonlyArray<fc.RecordValue<{ lines: Array<string>; comment: boolean; id: boolean; space: boolean }>>, eol: string) =>
  events
    .map((e) =>
      [
        ...(e.comment ? [": keep-alive"] : []),
        ...(e.id ? ["id: 7"] : []),
        ...e.lines.map((l) => (e.space ? `data: ${l}` : `data:${l}`)),
        ""
      ].join(eol) + eol
    )
    .join("")

const cut = (bytes: Uint8Array, points: ReadonlyArray<number>): Array<Uint8Array> => {
  const sorted = [...new Set(points.map((p) => p % (bytes.length + 1)))].sort((a, b) => a - b)
  const out: Array<Uint8Array> = []
  let start = 0
  for (const p of sorted) {
    out.push(bytes.subarray(start, p))
    start = p
  }
  out.push(bytes.subarray(start))
  return out
}

const read = (chunks: ReadonlyArray<Uint8Array>) => {
  const parser = makeSseParser()
  return chunks.flatMap((chunk) => parser.push(chunk))
}

describe("the SSE parser", () => {
  it("(invariant: parse ∘ render = identity on data) yields each event's data lines joined by \\n, for any line endings and any chunking", () => {
    fc.assert(
      fc.property(fc.array(eventArb, { maxLength: 8 }), fc.constantFrom("\n", "\r\n", "\r"), fc.array(fc.nat(), { maxLength: 12 }), (events, eol, points) => {
        const bytes = encoder.encode(render(events, eol))
        // A lone CR ending the whole stream cannot be told from half a CRLF; real streams end in a blank line.
        // "data:x" and "data: x" both carry "x": one space after the colon is dropped, no more.
        const expected = events.map((e) => e.lines.map((l) => (!e.space && l.startsWith(" ") ? l.slice(1) : l)).join("\n"))
        const got = read(cut(bytes, points))
        if (eol === "\r" && events.length > 0) {
          // The last event's closing CR is the final byte: it is dispatched only once another byte arrives.
          expect(got).toEqual(expected.slice(0, -1))
        } else {
          expect(got).toEqual(expected)
        }
      }),
      { numRuns: 300 }
    )
  })

  it("drops an event not closed by a blank line before the end", () => {
    expect(read([encoder.encode("data: one\n\ndata: two\n")])).toEqual(["one"])
  })
})

describe("sseEvents (the upstream reader)", () => {
  /** Bytes that arrive as given, then either end or hang (an upstream that keeps the body open). */
  const source = (parts: ReadonlyArray<string>, then: "end" | "hang" | "fail") => {
    const state = { returned: false }
    const iterator: AsyncIterator<Uint8Array> = {
      next: () => {
        const part = parts[0]
        if (part !== undefined) {
          parts = parts.slice(1)
          return Promise.resolve({ done: false, value: encoder.encode(part) })
        }
        if (then === "end") return Promise.resolve({ done: true, value: undefined })
        if (then === "fail") return Promise.reject(new Error("socket reset"))
        return new Promise(() => {})
      },
      return: () => {
        state.returned = true
        return Promise.resolve({ done: true, value: undefined })
      }
    }
    return { bytes: { [Symbol.asyncIterator]: () => iterator }, state }
  }
  const toFailure = (e: unknown) => new UpstreamFailure({ reason: "connect", message: String(e), retryable: true })
  const collect = async (events: AsyncIterable<ReadonlyArray<string>>) => {
    const got: Array<string> = []
    for await (const batch of events) got.push(...batch)
    return got
  }

  it("stops at [DONE] and reads the body to its end", async () => {
    const { bytes } = source(["data: a\n\ndata: b\n\n", "data: [DONE]\n\n"], "end")
    expect(await collect(sseEvents(bytes, toFailure))).toEqual(["a", "b"])
  })

  it("cuts an upstream that keeps the body open after [DONE], a second later", async () => {
    vi.useFakeTimers()
    try {
      const { bytes, state } = source(["data: a\n\n", "data: [DONE]\n\n"], "hang")
      let result: Array<string> | undefined
      const done = collect(sseEvents(bytes, toFailure)).then((r) => (result = r))
      await vi.advanceTimersByTimeAsync(900)
      expect(result).toBeUndefined()
      await vi.advanceTimersByTimeAsync(200)
      await done
      expect(result).toEqual(["a"])
      expect(state.returned).toBe(true)
    } finally {
      vi.useRealTimers()
    }
  })

  it("with ended(): stops after the batch at which the reader says the protocol ended, and reads the body to its end", async () => {
    const { bytes, state } = source(["data: a\n\n", "data: stop\n\n", "data: late\n\n"], "end")
    let seen: Array<string> = []
    const got = await collect({
      async *[Symbol.asyncIterator]() {
        for await (const batch of sseEvents(bytes, toFailure, () => seen.includes("stop"))) {
          seen = [...seen, ...batch]
          yield batch
        }
      }
    })
    expect(got).toEqual(["a", "stop"]) // "late" was read (drained), not yielded
    expect(state.returned).toBe(true)
  })

  it("a body that breaks before [DONE] throws the mapped UpstreamFailure", async () => {
    const { bytes } = source(["data: a\n\n"], "fail")
    const got: Array<string> = []
    await expect(
      (async () => {
        for await (const batch of sseEvents(bytes, toFailure)) got.push(...batch)
      })()
    ).rejects.toMatchObject({ _tag: "UpstreamFailure", message: "Error: socket reset" })
    expect(got).toEqual(["a"])
  })
})
