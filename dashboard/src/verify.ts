/**
 * Checks a receipt in the browser, as docs/receipts.md describes, with the server's published key:
 *   bytes = UTF-8 of the canonical JSON (RFC 8785, spec/canonicalJson.ts — the server's own function)
 *           of the receipt without `hash` and `signature`
 *   hash  = hex SHA-256(bytes);  signature = Ed25519 over bytes, base64url.
 * WebCrypto does both where the browser has them (Ed25519: Chromium ≥ 137, Firefox ≥ 129, Safari ≥ 17;
 * only in a secure context: HTTPS or localhost); otherwise @noble/ed25519 and @noble/hashes do,
 * loaded only then.
 */
import { canonicalJson } from "../../spec/canonicalJson.ts"
import type { PublicKey, Receipt } from "./api.ts"

export interface Verdict {
  readonly hash: boolean
  readonly signature: boolean
  readonly keyFound: boolean
  /** Which implementation checked the signature. */
  readonly engine: "WebCrypto" | "noble"
}

const hex = (bytes: Uint8Array) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")

const fromBase64 = (b64: string): Uint8Array => {
  const text = atob(b64.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(b64.length / 4) * 4, "="))
  return Uint8Array.from(text, (c) => c.charCodeAt(0))
}

/** The DER bytes of a PEM block. */
const pemBody = (pem: string): Uint8Array => fromBase64(pem.replace(/-----[^-]+-----/g, "").replace(/\s+/g, ""))

const subtle = (): SubtleCrypto | undefined => (globalThis.isSecureContext && globalThis.crypto?.subtle ? globalThis.crypto.subtle : undefined)

const viaWebCrypto = async (s: SubtleCrypto, spki: Uint8Array, signature: Uint8Array, bytes: Uint8Array) => {
  const key = await s.importKey("spki", spki as BufferSource, { name: "Ed25519" }, false, ["verify"])
  return s.verify({ name: "Ed25519" }, key, signature as BufferSource, bytes as BufferSource)
}

const viaNoble = async (spki: Uint8Array, signature: Uint8Array, bytes: Uint8Array) => {
  const [ed, { sha512 }] = await Promise.all([import("@noble/ed25519"), import("@noble/hashes/sha2.js")])
  ed.hashes.sha512 = sha512
  // An Ed25519 SPKI is a fixed 12-byte header followed by the 32-byte public key.
  return ed.verify(signature, bytes, spki.slice(spki.length - 32))
}

const sha256Hex = async (bytes: Uint8Array): Promise<string> => {
  const s = subtle()
  if (s !== undefined) return hex(new Uint8Array(await s.digest("SHA-256", bytes as BufferSource)))
  const { sha256 } = await import("@noble/hashes/sha2.js")
  return hex(sha256(bytes))
}

export const verifyReceipt = async (receipt: Receipt, keys: ReadonlyArray<PublicKey>): Promise<Verdict> => {
  const { hash, signature, ...unsigned } = receipt
  const bytes = new TextEncoder().encode(canonicalJson(unsigned))
  const hashOk = (await sha256Hex(bytes)) === hash
  const key = keys.find((k) => k.id === receipt.signing_key_id)
  if (key === undefined) return { hash: hashOk, signature: false, keyFound: false, engine: "WebCrypto" }
  const spki = pemBody(key.public_key)
  const sig = fromBase64(signature)
  const s = subtle()
  if (s !== undefined) {
    try {
      return { hash: hashOk, signature: await viaWebCrypto(s, spki, sig, bytes), keyFound: true, engine: "WebCrypto" }
    } catch {
      // This browser's WebCrypto has no Ed25519: fall through to the library.
    }
  }
  let ok = false
  try {
    ok = await viaNoble(spki, sig, bytes)
  } catch {
    ok = false
  }
  return { hash: hashOk, signature: ok, keyFound: true, engine: "noble" }
}
