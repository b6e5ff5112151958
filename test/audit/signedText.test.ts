/**
 * spec/audit/signedText.ts writes the signed text of a receipt with its key order cached per shape
 * and `hash`/`signature` skipped in place: it must stay exactly canonicalJson(unsignedPart(r)), for
 * any key order, any mix of shapes (more than its cache holds) and objects that lack or repeat them.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { type Receipt, unsignedPart } from "../../spec/receipt.ts"
import { signedText } from "../../spec/audit/signedText.ts"

/** Receipt-like objects: a few fixed names (hash and signature among them) and random ones, in any order. */
const key = fc.oneof(fc.constantFrom("hash", "signature", "seq", "prev_hash", "tokens", "receipt_id", "z", "é", "A", "10", "2"), fc.string({ maxLength: 4 }))
// `undefined` members too (canonicalJson omits them; fc.jsonValue never makes one).
const receiptLike = fc.dictionary(key, fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.constant(undefined)), { maxKeys: 24 })

describe("signedText", () => {
  it("property: the same text as canonicalJson(unsignedPart(r)) for any keys, key order and shape mix", () => {
    fc.assert(
      fc.property(fc.array(receiptLike, { minLength: 1, maxLength: 20 }), (objects) => {
        for (const o of objects) expect(signedText(o as unknown as Receipt)).toBe(canonicalJson(unsignedPart(o as unknown as Receipt)))
      }),
      { numRuns: 300 }
    )
  })

  it("one shape seen in two key orders: each written in sorted order", () => {
    const a = { signature: "s", seq: 1, hash: "h", b: 2, a: 1 }
    const b = { a: 1, b: 2, hash: "h", seq: 1, signature: "s" }
    expect(signedText(a as unknown as Receipt)).toBe('{"a":1,"b":2,"seq":1}')
    expect(signedText(b as unknown as Receipt)).toBe('{"a":1,"b":2,"seq":1}')
  })

  it("leaves out an undefined member, as canonicalJson does", () => {
    expect(signedText({ b: undefined, a: 1, hash: "h", c: { d: undefined, e: 2 } } as unknown as Receipt)).toBe('{"a":1,"c":{"e":2}}')
  })
})
