/**
 * spec/audit/seal.ts `sealOfStored` cuts the signed text out of a canonically stored body instead of
 * writing it again; its verdict must be `sealOf`'s for any body, however stored or altered: the
 * canonical form, the older `JSON.stringify` form, whitespace, moved, repeated or nested `hash` and
 * `signature` members, an edited value, a forged signature, an unknown or retired key.
 */
import fc from "fast-check"
import { generateKeyPairSync, sign } from "node:crypto"
import { describe, expect, it } from "vitest"
import { parseReceipt, receiptKeyId, Seal, sealOf, sealOfStored, trustedKeyMap } from "../../spec/audit.ts"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { type Receipt, sealReceipt, type UnsignedReceipt, unsignedPart } from "../../spec/receipt.ts"
import { unsignedReceipt } from "../support/arbitraryReceipt.ts"

const pair = () => {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519")
  const pem = publicKey.export({ type: "spki", format: "pem" }) as string
  return { privateKey, pem, id: receiptKeyId(pem) }
}
const signer = pair()
const stranger = pair()
const retiredSigner = pair()
const trusted = trustedKeyMap([
  { id: signer.id, pem: signer.pem, retiredAt: null },
  // Retired at the epoch: a receipt created after it was signed by a retired key.
  { id: retiredSigner.id, pem: retiredSigner.pem, retiredAt: 0 }
])

/** A signature by a key no store trusts, over the receipt's own signed text: it must not verify. */
const forge = (r: Receipt) => sign(null, Buffer.from(canonicalJson(unsignedPart(r)), "utf8"), stranger.privateKey).toString("base64url")

/** How a stored body may differ from the canonical form Tollgate writes. */
const alterations: ReadonlyArray<readonly [string, (body: string, receipt: Receipt) => string]> = [
  ["as written", (body) => body],
  ["the older JSON.stringify form", (_, r) => JSON.stringify(r)],
  ["pretty-printed", (body) => JSON.stringify(JSON.parse(body) as unknown, null, 1)],
  ["hash moved to the front", (body, r) => `{"hash":${JSON.stringify(r.hash)},${body.slice(1).replace(`,"hash":${JSON.stringify(r.hash)}`, "")}`],
  ["hash repeated at the end", (body, r) => `${body.slice(0, -1)},"hash":${JSON.stringify(r.hash)}}`],
  ["a second hash nested in tokens", (body, r) => body.replace('"tokens":{', `"tokens":{"hash":${JSON.stringify(r.hash)},`)],
  ["signature repeated with another value", (body) => `${body.slice(0, -1)},"signature":"AAAA"}`],
  ["signature forged in place by another key", (body, r) => body.replace(r.signature, forge(r))],
  [
    "hash also nested in tokens, before the top-level one",
    (body, r) => {
      const member = `,"hash":${JSON.stringify(r.hash)}`
      const rest = body.replace(member, "")
      const tokens = rest.indexOf('"tokens":{')
      const firstEnd = rest.indexOf(",", tokens)
      return `${rest.slice(0, firstEnd)}${member}${rest.slice(firstEnd, -1)}${member}}`
    }
  ],
  ["credits_charged edited", (_, r) => JSON.stringify({ ...r, credits_charged: r.credits_charged + 1 })],
  ["credits_charged edited in canonical form", (body, r) => body.replace(`"credits_charged":${r.credits_charged}`, `"credits_charged":${r.credits_charged + 1}`)],
  ["hash edited to match nothing", (body, r) => body.replace(r.hash, "0".repeat(64))]
]

const signers = [
  ["a trusted key", signer],
  ["an unknown key", stranger],
  ["a retired key", retiredSigner]
] as const

const sealedBy = (key: typeof signer, unsigned: UnsignedReceipt) => sealReceipt(key.privateKey, { ...unsigned, signing_key_id: key.id })

describe("sealOfStored", () => {
  it("property: the same verdict as sealOf(parsed body) for every stored form, alteration and key", () => {
    fc.assert(
      fc.property(
        unsignedReceipt,
        fc.constantFrom(...alterations),
        fc.constantFrom(...signers),
        fc.date({ min: new Date(1), noInvalidDate: true }),
        (unsigned, [, alter], [, key], at) => {
          // A period and an instant the shape check accepts: the seal is checked only past it.
          const { receipt, body } = sealedBy(key, { ...unsigned, period: "2026-11", created_at: at.toISOString() })
          const stored = alter(body, receipt)
          const parsed = parseReceipt(stored)
          // A body that does not parse as a receipt never reaches a seal (the shape comes first).
          fc.pre(typeof parsed !== "string")
          expect(sealOfStored(stored, parsed as Receipt, trusted)).toBe(sealOf(parsed as Receipt, trusted))
        }
      ),
      { numRuns: 600 }
    )
  })

  it("each alteration gets its verdict: intact wherever the parsed receipt is unchanged, and only with the trusted key in service", () => {
    const unsigned: UnsignedReceipt = {
      object: "receipt", receipt_id: "rcpt_1", request_id: "req_1", organization: "org", project_id: "proj", environment: "production",
      status: "completed", verification: { state: "verified", checks: ["schema"], failed_checks: [] }, model: "auto", route: "demo",
      rate_card_version: "rc_1", tokens: { input: 10, cached_input: 0, output: 5, reasoning: 0 }, usage_source: "reported",
      credits_reserved: 900, credits_charged: 120, period: "2026-11", seq: 1, created_at: "2026-11-24T12:00:00.000Z",
      prev_hash: "0".repeat(64), signing_key_id: ""
    }
    const verdicts = (key: typeof signer) => {
      const { receipt, body } = sealedBy(key, unsigned)
      return Object.fromEntries(
        alterations.map(([name, alter]) => {
          const parsed = parseReceipt(alter(body, receipt))
          return [name, typeof parsed === "string" ? parsed : sealOfStored(alter(body, receipt), parsed, trusted)]
        })
      )
    }
    expect(verdicts(signer)).toEqual({
      "as written": Seal.intact,
      "the older JSON.stringify form": Seal.intact,
      "pretty-printed": Seal.intact,
      "hash moved to the front": Seal.intact,
      "hash repeated at the end": Seal.intact,
      "a second hash nested in tokens": Seal.hashMismatch,
      "signature repeated with another value": Seal.badSignature,
      "signature forged in place by another key": Seal.badSignature,
      "hash also nested in tokens, before the top-level one": Seal.hashMismatch,
      "credits_charged edited": Seal.hashMismatch,
      "credits_charged edited in canonical form": Seal.hashMismatch,
      "hash edited to match nothing": Seal.hashMismatch
    })
    expect(verdicts(stranger)["as written"]).toBe(Seal.unknownKey)
    expect(verdicts(retiredSigner)["as written"]).toBe(Seal.retiredKey)
  })
})
