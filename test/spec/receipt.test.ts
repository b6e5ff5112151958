/**
 * spec/receipt.ts `sealReceipt`: the stored body it returns is the whole receipt in canonical form —
 * `canonicalJson(receipt)` — though it is written by putting the hash and the signature into the
 * signed text; and the signed text is that body without those two members.
 */
import fc from "fast-check"
import { generateKeyPairSync, verify } from "node:crypto"
import { describe, expect, it } from "vitest"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { sealReceipt } from "../../spec/receipt.ts"
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
        const cut = body.replace(`,"hash":"${receipt.hash}"`, "").replace(`,"signature":"${receipt.signature}"`, "")
        expect(cut).toBe(signed)
      }),
      { numRuns: 200 }
    )
  })
})
