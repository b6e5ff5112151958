/**
 * Token counting: the bounded cache of recent counts in front of the BPE tokenizer.
 */
import fc from "fast-check"
import { countTokens } from "gpt-tokenizer"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { BUDGET_MS, countBounded, countChat, countChatInput, countText, makeCountCache } from "../../src/services/Tokenizer.ts"

/** The cache as countText uses it: a hit, else the count, put. */
const countingThrough = (cache: ReturnType<typeof makeCountCache>, count: (text: string) => number) => (text: string): number => {
  const hit = cache.get(text)
  if (hit !== undefined) return hit
  const n = count(text)
  cache.put(text, n)
  return n
}

describe("the count cache", () => {
  it("property: a cached count equals the tokenizer's count, whatever the order and repetition of texts", () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.constantFrom("You are a concise assistant.", "user", "system"), fc.fullUnicodeString({ maxLength: 40 })), { maxLength: 60 }), (texts) => {
        const cached = countingThrough(makeCountCache(8, 200), countTokens)
        for (const t of texts) expect(cached(t)).toBe(countTokens(t))
      })
    )
  })

  it("counts a repeated text once, keeps what was used within the last generation, and keeps no text over its character bound", () => {
    const seen: Array<string> = []
    // Two generations of two entries and 20 characters each.
    const cached = countingThrough(makeCountCache(4, 40), (t) => (seen.push(t), t.length))
    for (const t of ["a", "b", "a", "b"]) cached(t)
    expect(seen).toEqual(["a", "b"]) // the repeats were hits
    cached("c") // the recent generation was full: "a", "b" become the older one, "c" starts a new one
    cached("a") // a hit in the older generation, put in the recent one
    expect(seen).toEqual(["a", "b", "c"])
    cached("d") // the recent generation ("c", "a") was full: it becomes the older one, "b" goes
    cached("a")
    cached("c")
    expect(seen).toEqual(["a", "b", "c", "d"])
    cached("b")
    expect(seen).toEqual(["a", "b", "c", "d", "b"])
    cached("x".repeat(21)) // longer than a generation's bound: counted, never kept
    cached("x".repeat(21))
    expect(seen.filter((t) => t.length === 21)).toHaveLength(2)
    cached("y".repeat(20)) // fills a generation alone
    cached("z".repeat(20)) // and the next: every shorter entry is gone
    cached("d")
    expect(seen.at(-1)).toBe("d")
  })

  it("property: the cache never holds more than its entries and characters, and answers only what was put", () => {
    fc.assert(
      fc.property(fc.array(fc.string({ maxLength: 12 }), { maxLength: 200 }), fc.integer({ min: 1, max: 10 }), fc.integer({ min: 1, max: 60 }), (texts, maxEntries, maxChars) => {
        const cache = makeCountCache(maxEntries, maxChars)
        const put = new Map<string, number>()
        for (const t of texts) {
          const hit = cache.get(t)
          if (hit !== undefined) expect(hit).toBe(put.get(t))
          else {
            cache.put(t, t.length * 7)
            put.set(t, t.length * 7)
          }
        }
        // What stayed is what get answers for, counted once: bounded by entries and characters.
        const kept = [...put.keys()].filter((t) => cache.get(t) !== undefined)
        expect(kept.length).toBeLessThanOrEqual(Math.max(2, maxEntries))
        expect(kept.reduce((n, t) => n + t.length, 0)).toBeLessThanOrEqual(maxChars)
      })
    )
  })

  it("countChat on the cached path agrees with the tokenizer: 3 per message, 3 to prime, role and content counted", () => {
    const system = "You are a concise assistant for an e-commerce support team."
    const user = "Where is my order 48213-CX?"
    const expected = 3 + (3 + countTokens("system") + countTokens(system)) + (3 + countTokens("user") + countTokens(user))
    for (let i = 0; i < 3; i++) {
      expect(countChat([{ role: "system", content: system }, { role: "user", content: user }])).toBe(expected)
    }
    expect(countText("")).toBe(0)
  })

  it("property: countChatInput (sliced between event-loop turns when large) counts what countChat counts", async () => {
    // Over SLICE_CHARS, and unlike any text counted before (a cached text would skip the slicing).
    const large = fc.tuple(fc.lorem({ maxCount: 5 }), fc.integer()).map(([words, n]) => `${n} ${words} `.repeat(3000))
    const message = fc.record({ role: fc.constantFrom("system", "user", "assistant"), content: fc.oneof(fc.lorem({ maxCount: 30 }), large) })
    await fc.assert(
      fc.asyncProperty(fc.array(message, { maxLength: 8 }), async (messages) => {
        expect(await Effect.runPromise(countChatInput(messages))).toBe(countChat(messages))
      }),
      { numRuns: 20 }
    )
  }, 30_000)
})

describe("bounded cost whatever the text (issue 19, finding 1)", () => {
  const longRuns = fc
    .array(
      fc.oneof(
        fc.stringOf(fc.constantFrom("a", "b", "z", "Q", "é", "漢", "😀", "!", "7"), { minLength: 150, maxLength: 600 }),
        fc.stringOf(fc.constantFrom(" ", "\n", "\t"), { minLength: 1, maxLength: 300 }),
        fc.lorem({ maxCount: 20 })
      ),
      { maxLength: 6 }
    )
    .map((parts) => parts.join(""))

  it("property: a text cut into bounded runs never counts fewer tokens than the whole text (the estimate errs high)", () => {
    fc.assert(
      fc.property(longRuns, (text) => {
        expect(countBounded(text)).toBeGreaterThanOrEqual(countTokens(text))
      }),
      { numRuns: process.env.TOLLGATE_DEEP === "1" ? 5000 : 200 }
    )
  })

  it("property: ordinary text (no run longer than the bound) is counted exactly", () => {
    fc.assert(
      fc.property(fc.lorem({ maxCount: 200 }), (text) => {
        expect(countBounded(text)).toBe(countTokens(text))
      }),
      { numRuns: 100 }
    )
  })

  it("4 MiB of one letter run unlike any other is counted within a bounded time, as an upper bound past the budget", () => {
    let text = ""
    for (let i = 0; text.length < 4 * 1024 * 1024; i++) text += `tollgate${i.toString(36).replace(/\d/g, (d) => "qrstuvwxyz"[Number(d)]!)}`
    const t0 = performance.now()
    const n = countBounded(text)
    const ms = performance.now() - t0
    console.log(`[finding 1] countBounded of ${text.length} chars without a space: ${n} tokens in ${ms.toFixed(0)} ms (budget ${BUDGET_MS} ms)`)
    expect(ms).toBeLessThan(BUDGET_MS + 1500)
    expect(n).toBeGreaterThan(text.length / 8)
    expect(n).toBeLessThanOrEqual(Buffer.byteLength(text))
  })
})
