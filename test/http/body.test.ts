/**
 * The JSON depth scanner of src/http/body.ts: it must see the depth JSON.parse would build, whatever
 * brackets, quotes and escapes strings hold, and however the bytes are split into chunks.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { makeDepthScanner } from "../../src/http/body.ts"

const depthOf = (v: unknown): number =>
  Array.isArray(v) ? 1 + Math.max(0, ...v.map(depthOf)) : v !== null && typeof v === "object" ? 1 + Math.max(0, ...Object.values(v).map(depthOf)) : 0

const scanFits = (text: string, maxDepth: number, cuts: ReadonlyArray<number>): boolean => {
  const bytes = Buffer.from(text)
  const scanner = makeDepthScanner(maxDepth)
  let at = 0
  for (const cut of [...cuts.map((c) => c % (bytes.length + 1))].sort((a, b) => a - b)) {
    if (!scanner.feed(bytes.subarray(at, cut))) return false
    at = cut
  }
  return scanner.feed(bytes.subarray(at))
}

const tricky = fc.oneof(fc.constantFrom("[[[[", "]]]]", "{\"", "\\", "\\\"[", "\"]\"", "漢[字", "😀{"), fc.string())

describe("makeDepthScanner", () => {
  it("property: a JSON text fits a limit exactly when JSON.parse's value is nested no deeper, in any chunking", () => {
    const value = fc.letrec((tie) => ({
      node: fc.oneof({ depthSize: "small" }, tricky, fc.integer(), fc.constant(null), fc.array(tie("node"), { maxLength: 3 }), fc.dictionary(tricky, tie("node"), { maxKeys: 3 }))
    })).node
    fc.assert(
      fc.property(value, fc.nat({ max: 8 }), fc.array(fc.nat(), { maxLength: 4 }), (v, limit, cuts) => {
        const text = JSON.stringify(v)
        expect(scanFits(text, limit, cuts)).toBe(depthOf(JSON.parse(text)) <= limit)
      }),
      { numRuns: 500 }
    )
  })
})
