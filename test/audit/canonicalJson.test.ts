/**
 * spec/canonicalJson.ts is on the audit's hot path and written for speed (insertion sort for short key
 * lists, a bounded cache of quoted keys): its output must stay exactly RFC 8785's plain reading.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { canonicalJson } from "../../spec/canonicalJson.ts"

const json = fc.jsonValue({ maxDepth: 4 })

/** RFC 8785 for JSON values written plainly (sort, then join): what the faster canonicalJson must equal. */
const reference = (v: unknown): string => {
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? "null" : reference(x))).join(",")}]`
  if (v !== null && typeof v === "object") {
    const r = v as Record<string, unknown>
    return `{${Object.keys(r)
      .sort()
      .filter((k) => r[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${reference(r[k])}`)
      .join(",")}}`
  }
  return JSON.stringify(v)
}

/** Objects with few and with many keys (both ways of sorting), keys of any UTF-16 units, undefined members. */
const wide = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    fc.oneof(fc.string({ unit: "binary" }), fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), fc.constant(null)),
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(fc.string({ unit: "binary-ascii", maxLength: 3 }), fc.option(tie("value"), { nil: undefined }), { maxKeys: 60 })
  )
})).value

/** An object with more keys than the insertion sort takes (over 32), of short keys that collide in prefix. */
const long = fc.dictionary(fc.string({ unit: "binary-ascii", maxLength: 3 }), fc.option(wide, { nil: undefined }), { minKeys: 33, maxKeys: 60 })

describe("canonicalJson, the fast path", () => {
  it("property: the same text as sorting each object's keys and joining (the plain reading of RFC 8785), for short and long key lists", () => {
    fc.assert(
      fc.property(fc.oneof(json, wide, long), (v) => {
        expect(canonicalJson(v)).toBe(reference(v))
      }),
      { numRuns: 500 }
    )
  })
})
