/**
 * The stored digests — an API key's secret (src/domain/apiKey.ts `hashSecret`) and an idempotent
 * request's fingerprint (src/services/IdempotencyStore.ts `fingerprintOf`) — are SHA-256 of the text's
 * UTF-8, hex. Rows written by any earlier version hold them, so the way they are computed may change
 * (one-shot `crypto.hash`, spec/receipt.ts `sha256Hex`) but never the value.
 */
import { createHash } from "node:crypto"
import { describe, expect, it } from "vitest"
import { sha256Hex } from "../../spec/receipt.ts"
import { hashSecret } from "../../src/domain/apiKey.ts"
import { fingerprintOf } from "../../src/services/IdempotencyStore.ts"

describe("stored digests", () => {
  it("sha256Hex is SHA-256 of bytes or of a string's UTF-8", () => {
    // FIPS 180-2's "abc" vector.
    expect(sha256Hex("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    expect(sha256Hex(Buffer.from("abc"))).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    expect(sha256Hex("é€")).toBe(createHash("sha256").update(Buffer.from("é€", "utf8")).digest("hex"))
  })

  it("a key's secret and a request's fingerprint keep their values", () => {
    expect(hashSecret("s3crét")).toBe(createHash("sha256").update(Buffer.from("s3crét", "utf8")).digest("hex"))
    const expected = createHash("sha256").update(Buffer.from('POST\n/v1/chat/completions\n{"a":"é","b":[1,2]}', "utf8")).digest("hex")
    expect(fingerprintOf("POST", "/v1/chat/completions", { b: [1, 2], a: "é" })).toBe(expected)
  })
})
