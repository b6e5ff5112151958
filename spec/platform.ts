/**
 * The few primitives the rulebook needs from its host: SHA-256, Ed25519 checks, UTF-8, hex and base64.
 * This file is Node's (node:crypto and Buffer, OpenSSL's speed on the gateway's hot path); the browser
 * build of the package (@tollgate/spec, scripts/build-spec.mjs) puts ./platform.web.ts in its place,
 * the same functions over @noble/hashes, @noble/ed25519, TextEncoder and atob/btoa
 * (test/spec-package/ checks both give the same answers). Every other module of spec/ reaches the host
 * through here alone, so nothing else changes between the two builds.
 *
 * node:crypto is imported as a namespace (`nodeCrypto`, not `crypto`, which collides with the global
 * of that name when bundled into the audit worker), so a Node without `hash` reads undefined here.
 */
import * as nodeCrypto from "node:crypto"

export const PLATFORM = "node" as "node" | "web"

/**
 * The bytes a latin1 ("binary") string spells (one a character). Node 20's one-shot `crypto.hash` answers a
 * string several times faster than a Buffer (≈ 0.3 against ≈ 1.2 µs for a Merkle node, bench/verifyParts.ts),
 * and copying 32 characters out is cheaper than the difference.
 */
const bytesOfLatin1 = (s: string): Uint8Array => {
  const out = new Uint8Array(s.length)
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i)
  return out
}

/**
 * SHA-256 of the concatenation of `parts`. One-shot `crypto.hash` over the joined parts where it
 * exists (a Merkle node is 65 bytes: joining is cheaper than a Hash object a node, which a verifier
 * builds twice a receipt); a Hash object otherwise.
 */
export const sha256: (...parts: ReadonlyArray<Uint8Array>) => Uint8Array =
  typeof nodeCrypto.hash === "function"
    ? (...parts) => bytesOfLatin1(nodeCrypto.hash("sha256", parts.length === 1 ? parts[0]! : Buffer.concat(parts), "binary"))
    : (...parts) => {
        const h = nodeCrypto.createHash("sha256")
        for (const p of parts) h.update(p)
        return new Uint8Array(h.digest())
      }

/**
 * SHA-256 as hex (of bytes, or of a string's UTF-8), the same digest either way: one-shot `crypto.hash` (Node ≥ 20.12) where it exists,
 * with no Hash object built per receipt (≈ 1.2 → 0.7 µs hot, more on the settlement's cold path).
 */
export const sha256Hex: (data: Uint8Array | string) => string =
  typeof nodeCrypto.hash === "function" ? (data) => nodeCrypto.hash("sha256", data, "hex") : (data) => nodeCrypto.createHash("sha256").update(data).digest("hex")

/** The UTF-8 bytes of `text` (a Buffer here). */
export const utf8 = (text: string): Buffer => Buffer.from(text, "utf8")
const view = (b: Uint8Array): Buffer => (Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength))

export const fromUtf8 = (bytes: Uint8Array): string => view(bytes).toString("utf8")

export const toHex = (b: Uint8Array): string => view(b).toString("hex")
/** The bytes of lowercase or uppercase hex of even length; undefined on anything else. */
export const fromHex = (s: string): Uint8Array | undefined => (/^(?:[0-9a-fA-F]{2})*$/.test(s) ? new Uint8Array(Buffer.from(s, "hex")) : undefined)

/** Standard padded base64 (RFC 4648 §4). */
export const toBase64 = (b: Uint8Array): string => view(b).toString("base64")
/** base64url without padding (RFC 4648 §5). */
export const toBase64Url = (b: Uint8Array): string => view(b).toString("base64url")
/** Bytes of base64 or base64url, padded or not, as Buffer reads them (forgiving; callers that need one spelling compare the re-encoding). */
export const fromBase64Any = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "base64"))

/** Does `signature` sign `message` under the key this check was made for? Never throws. */
export type RawCheck = (message: Uint8Array, signature: Uint8Array) => boolean

const SPKI_ED25519_PREFIX = Buffer.from("302a300506032b6570032100", "hex")

/** The check of a 32-byte Ed25519 public key; undefined when it is not one. */
export const ed25519CheckOfRaw = (raw: Uint8Array): RawCheck | undefined => {
  let key: nodeCrypto.KeyObject
  try {
    key = nodeCrypto.createPublicKey({ key: Buffer.concat([SPKI_ED25519_PREFIX, raw]), format: "der", type: "spki" })
  } catch {
    return undefined
  }
  if (raw.length !== 32 || key.asymmetricKeyType !== "ed25519") return undefined
  return (message, signature) => {
    try {
      return nodeCrypto.verify(null, message, key, signature)
    } catch {
      return false
    }
  }
}

/** Node's key objects: only the Node build has them (the web build's throw). */
export const keyObjects = {
  sign: (message: Uint8Array, key: nodeCrypto.KeyObject): Buffer => nodeCrypto.sign(null, message, key),
  verify: (message: Uint8Array, key: nodeCrypto.KeyObject, signature: Uint8Array): boolean => nodeCrypto.verify(null, message, key, signature),
  createPublicKey: (input: nodeCrypto.PublicKeyInput | string | Buffer | nodeCrypto.KeyObject): nodeCrypto.KeyObject => nodeCrypto.createPublicKey(input)
}
