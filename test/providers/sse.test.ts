/**
 * The SSE reader against a reference: whatever the line endings and however the bytes are cut into
 * network chunks (even inside a multi-byte character or a CRLF), it yields exactly the events' data.
 */
import fc from "fast-check"
import { describe, expect, it, vi } from "vitest"
import { UpstreamFailure } from "../../src/providers/Provider.ts"
import { AFTER_END_MS, makeSseFeed, makeSseParser } from "../../src/providers/sse.ts"

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

describe("makeSseFeed (the upstream reader: the body pushed in, its events' data read out)", () => {
  /** A feed over a source that counts what was asked of it. */
  const feedOf = (ended?: () => boolean) => {
    const asked = { pause: 0, resume: 0, release: 0 }
    const feed = makeSseFeed(
      { pause: () => asked.pause++, resume: () => asked.resume++, release: () => asked.release++ },
      (e) => new UpstreamFailure({ reason: "connect", message: String(e), retryable: true }),
      ended
    )
    const push = (...parts: ReadonlyArray<string>) => {
      for (const p of parts) feed.data(encoder.encode(p))
    }
    return { feed, asked, push }
  }
  const collect = async (events: AsyncIterable<ReadonlyArray<string>>) => {
    const got: Array<string> = []
    for await (const batch of events) got.push(...batch)
    return got
  }

  it("stops at [DONE]: the events before it are read, what follows is not, and a body that then ends is not aborted", async () => {
    const { feed, asked, push } = feedOf()
    push("data: a\n\ndata: b\n\n", "data: c\n\ndata: [DONE]\n\ndata: late\n\n", "data: later\n\n")
    expect(await collect(feed.events)).toEqual(["a", "b", "c"])
    feed.end()
    feed.stop()
    expect(asked.release).toBe(0)
  })

  it("a reader waiting for the next batch is answered by the data, the end or the failure that comes next", async () => {
    const { feed, push } = feedOf()
    const it = feed.events[Symbol.asyncIterator]()
    const first = it.next()
    push("data: a\n\n")
    expect(await first).toEqual({ done: false, value: ["a"] })
    const second = it.next()
    feed.end()
    expect(await second).toEqual({ done: true, value: undefined })

    const broken = feedOf()
    const waiting = broken.feed.events[Symbol.asyncIterator]().next()
    broken.feed.fail(new Error("socket reset"))
    await expect(waiting).rejects.toMatchObject({ _tag: "UpstreamFailure", message: "Error: socket reset" })
  })

  it("cuts a body that stays open after [DONE], a second later, without holding the reader", async () => {
    vi.useFakeTimers()
    try {
      const { feed, asked, push } = feedOf()
      push("data: a\n\n", "data: [DONE]\n\n")
      expect(await collect(feed.events)).toEqual(["a"])
      feed.stop() // the reader's scope closes: the body still gets its second
      await vi.advanceTimersByTimeAsync(AFTER_END_MS - 100)
      expect(asked.release).toBe(0)
      await vi.advanceTimersByTimeAsync(200)
      expect(asked.release).toBe(1)
      feed.fail(new Error("aborted")) // the abort's own error, after the end: nobody's business
    } finally {
      vi.useRealTimers()
    }
  })

  it("with ended(): stops after the batch at which the reader says the protocol ended; batches already read ahead after it are dropped", async () => {
    let seen: Array<string> = []
    const { feed, asked, push } = feedOf(() => seen.includes("stop"))
    push("data: a\n\n", "data: stop\n\n", "data: late\n\n")
    const got: Array<string> = []
    for await (const batch of feed.events) {
      seen = [...seen, ...batch]
      got.push(...batch)
    }
    expect(got).toEqual(["a", "stop"])
    feed.end()
    expect(asked.release).toBe(0)
  })

  it("a body that breaks before [DONE] throws the mapped UpstreamFailure once, after the batches that came before it", async () => {
    const { feed, push } = feedOf()
    push("data: a\n\n")
    feed.fail(new Error("socket reset"))
    const got: Array<string> = []
    await expect(
      (async () => {
        for await (const batch of feed.events) got.push(...batch)
      })()
    ).rejects.toMatchObject({ _tag: "UpstreamFailure", message: "Error: socket reset" })
    expect(got).toEqual(["a"])
    expect(await feed.events[Symbol.asyncIterator]().next()).toEqual({ done: true, value: undefined })
  })

  it("a failure after [DONE] is not the reader's: it gets the events and a clean end", async () => {
    const { feed, push } = feedOf()
    push("data: a\n\ndata: [DONE]\n\n")
    feed.fail(new Error("socket reset"))
    expect(await collect(feed.events)).toEqual(["a"])
  })

  it("a reader that stops early aborts the body once; stopping after the body ended aborts nothing", async () => {
    const { feed, asked, push } = feedOf()
    push("data: a\n\n", "data: b\n\n")
    for await (const batch of feed.events) {
      expect(batch).toEqual(["a"])
      break
    }
    feed.stop()
    expect(asked.release).toBe(1)
    push("data: c\n\n")
    expect(await feed.events[Symbol.asyncIterator]().next()).toEqual({ done: true, value: undefined })

    const ended = feedOf()
    ended.push("data: a\n\n")
    ended.feed.end()
    ended.feed.stop()
    expect(ended.asked.release).toBe(0)
  })

  it("(invariant: the reader gets every event up to [DONE] in order, whatever it reads ahead of) pauses the body 16 batches behind, resumes it at 4", async () => {
    // Each step pushes some batches, then the reader takes some of those waiting: a reader that falls
    // far behind and catches up again, in any rhythm.
    const steps = fc.array(fc.tuple(fc.nat(24), fc.nat(24)), { minLength: 1, maxLength: 12 })
    await fc.assert(
      fc.asyncProperty(steps, async (rhythm) => {
        const { feed, asked, push } = feedOf()
        const it = feed.events[Symbol.asyncIterator]()
        const got: Array<string> = []
        let pushed = 0
        for (const [pushes, reads] of rhythm) {
          for (let k = 0; k < pushes; k++) {
            const pauses = asked.pause
            push(`data: e${pushed}\n\n`)
            pushed++
            const behind = pushed - got.length
            // Paused when the 16th is waiting, not before; never twice without a resume between.
            if (asked.pause > pauses) expect(behind).toBe(16)
            expect([0, 1]).toContain(asked.pause - asked.resume)
            if (behind >= 16) expect(asked.pause).toBeGreaterThan(asked.resume)
          }
          for (let k = 0; k < reads && got.length < pushed; k++) {
            const resumes = asked.resume
            got.push(...((await it.next()).value as ReadonlyArray<string>))
            // Resumed once the reader is down to 4 waiting, not before.
            if (asked.resume > resumes) expect(pushed - got.length).toBe(4)
            // A reader down to 4 or fewer never waits on a paused body (it would wait for ever).
            if (pushed - got.length <= 4) expect(asked.resume).toBe(asked.pause)
          }
        }
        push("data: [DONE]\n\n")
        for (let r = await it.next(); r.done !== true; r = await it.next()) got.push(...r.value)
        expect(got).toEqual(Array.from({ length: pushed }, (_, i) => `e${i}`))
        // Resumed when the reader caught up, or when [DONE] let the rest of the body drain.
        expect(asked.resume).toBe(asked.pause)
      }),
      { numRuns: 300 }
    )
  })
})
