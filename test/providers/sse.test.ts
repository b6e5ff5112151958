/**
 * The SSE reader against a reference: whatever the line endings and however the bytes are cut into
 * network chunks (even inside a multi-byte character or a CRLF), it yields exactly the events' data.
 */
import { Chunk, Effect, Stream } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { sseData } from "../../src/providers/sse.ts"

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

const read = (chunks: ReadonlyArray<Uint8Array>) => Effect.runSync(Stream.runCollect(sseData(Stream.fromIterable(chunks)))).pipe(Chunk.toReadonlyArray)

describe("sseData", () => {
  it("yields each event's data lines joined by \\n, for any line endings and any chunking", () => {
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
