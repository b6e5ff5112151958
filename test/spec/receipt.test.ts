/**
 * spec/receipt.ts `sealReceipt`: the stored body it returns is the whole receipt in canonical form —
 * `canonicalJson(receipt)` — though it is written by putting the hash and the signature into the
 * signed text; and the signed text is that body without those two members.
 */
import fc from "fast-check"
import { generateKeyPairSync, verify } from "node:crypto"
import { describe, expect, it } from "vitest"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { type Receipt, sealReceipt, signedTextOfStored, STORED_HASH_BEFORE, STORED_HASH_BEFORE_KEY, STORED_SIGNATURE_BEFORE, type UnsignedReceipt } from "../../spec/receipt.ts"
import { unsignedReceipt } from "../support/arbitraryReceipt.ts"

const { privateKey, publicKey } = generateKeyPairSync("ed25519")

describe("sealReceipt", () => {
  it("property: the stored body is canonicalJson of the whole receipt, and without hash and signature it is the signed text", () => {
    fc.assert(
      fc.property(unsignedReceipt, (unsigned) => {
        const { receipt, body } = sealReceipt(privateKey, unsigned)
        expect(body).toBe(canonicalJson(receipt))
        const signed = canonicalJson(unsigned)
        expect(verify(null, Buffer.from(signed, "utf8"), publicKey, Buffer.from(receipt.signature, "base64url"))).toBe(true)
        expect(signedTextOfStored(body, receipt.hash, receipt.signature)).toBe(signed)
      }),
      { numRuns: 200 }
    )
  })

  it("the places the stored body puts hash and signature in rest on the receipt's key set, pinned here", () => {
    // Every key of UnsignedReceipt, and whether its value is an object: a key added to the type fails
    // to compile here until it is listed, and then this test says whether the places still hold.
    const objectValued: Record<keyof UnsignedReceipt, boolean> = {
      object: false, receipt_id: false, request_id: false, organization: false, project_id: false, environment: false,
      status: false, verification: true, model: false, route: false, rate_card_version: false, tokens: true,
      usage_source: false, credits_reserved: false, credits_charged: false, period: false, seq: false, created_at: false,
      prev_hash: false, signing_key_id: false, key_id: false, end_user: false
    }
    const keys = [...Object.keys(objectValued), "hash", "signature"].sort() as Array<keyof Receipt>
    // With a key id (issue 41) the hash goes before it; an older receipt has none, and it goes before the model.
    expect(keys[keys.indexOf("hash") + 1]).toBe(STORED_HASH_BEFORE_KEY)
    const withoutKey = keys.filter((k) => k !== "key_id")
    expect(withoutKey[withoutKey.indexOf("hash") + 1]).toBe(STORED_HASH_BEFORE)
    expect(keys[keys.indexOf("signature") + 1]).toBe(STORED_SIGNATURE_BEFORE)
    // No object-valued member comes before either place, so the first `,"key":` found is top-level.
    const before = keys.slice(0, keys.indexOf(STORED_SIGNATURE_BEFORE)).filter((k) => k !== "hash" && k !== "signature")
    expect(before.filter((k) => objectValued[k as keyof UnsignedReceipt])).toEqual([])
  })
})
