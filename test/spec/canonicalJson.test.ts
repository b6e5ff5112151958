import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { canonicalJson } from "../../spec/canonicalJson.ts"

const json = fc.jsonValue({ maxDepth: 4 })

/** Rebuild every object with its keys in reverse insertion order. */
const reorder = (v: unknown): unknown =>
  Array.isArray(v)
    ? v.map(reorder)
    : v !== null && typeof v === "object"
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).reverse().map(([k, x]) => [k, reorder(x)]))
      : v

describe("canonicalJson (RFC 8785 for JSON values)", () => {
  it("round-trips: parsing the canonical text gives back the same JSON value", () => {
    // The same JSON value: JSON has one zero, so -0 comes back as 0 (RFC 8785 writes it "0"),
    // which a deep equality on the JavaScript value would call different.
    fc.assert(fc.property(json, (v) => {
        expect(JSON.parse(canonicalJson(v))).toEqual(JSON.parse(JSON.stringify(v)))
      }))
  })

  it("writes negative zero as 0, wherever it is", () => {
    expect(canonicalJson(-0)).toBe("0")
    expect(canonicalJson({ a: [-0, 0.5] })).toBe('{"a":[0,0.5]}')
  })

  it("does not depend on key insertion order", () => {
    fc.assert(fc.property(json, (v) => {
        expect(canonicalJson(reorder(v))).toBe(canonicalJson(v))
      }))
  })

  it("sorts keys by UTF-16 code units, omits undefined members, and has no whitespace", () => {
    expect(canonicalJson({ b: 1, a: [1, "x", null, undefined], "é": true, A: { z: undefined, y: 2 } })).toBe('{"A":{"y":2},"a":[1,"x",null,null],"b":1,"é":true}')
  })
})
