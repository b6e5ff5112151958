/**
 * Receipts (docs/contract.md §6): what a receipt contains, how its hash chain and signature are formed, and
 * how anyone verifies one offline with nothing but SHA-256, Ed25519 and the public key (./platform.ts:
 * node:crypto in Node, pure JavaScript in the browser build of @tollgate/spec).
 *
 *   unsigned  = the receipt without `hash` and `signature`   (it includes `prev_hash`)
 *   hash      = hex( SHA-256( canonicalJson(unsigned) ) )
 *   signature = base64url( Ed25519-sign( canonicalJson(unsigned) ) )
 *
 * Receipts of one project form a chain in settlement order: receipt n's `prev_hash` is receipt
 * n−1's `hash` (`seq` counts from 1), and the first one's is GENESIS_HASH.
 */
import type { KeyObject } from "node:crypto"
import { checkOfPem, type Sign } from "./ed25519.ts"
import { fromBase64Any, keyObjects, sha256Hex, toBase64Url, utf8 } from "./platform.ts"
import { canonicalJson } from "./canonicalJson.ts"
import type { TokenCounts } from "./pricing.ts"

export const GENESIS_HASH = "0".repeat(64)

export interface UnsignedReceipt {
  readonly object: "receipt"
  readonly receipt_id: string
  readonly request_id: string
  readonly organization: string
  readonly project_id: string
  readonly environment: string
  readonly status: "completed"
  readonly verification: { readonly state: "verified" | "unverified"; readonly checks: ReadonlyArray<string>; readonly failed_checks: ReadonlyArray<string> }
  readonly model: string
  readonly route: string
  readonly rate_card_version: string
  readonly tokens: TokenCounts
  readonly usage_source: "reported" | "counted"
  readonly credits_reserved: number
  readonly credits_charged: number
  readonly period: string
  readonly seq: number
  readonly created_at: string
  readonly prev_hash: string
  readonly signing_key_id: string
  /** The key the call was charged to (issue 41; absent from receipts written before it). */
  readonly key_id?: string
  /** The end user the call was charged to, when it named one (issue 41). */
  readonly end_user?: string
}

export interface Receipt extends UnsignedReceipt {
  readonly hash: string
  readonly signature: string
}

export const unsignedPart = (r: Receipt | UnsignedReceipt): UnsignedReceipt => {
  const { hash: _h, signature: _s, ...rest } = r as Receipt
  return rest
}

/** The bytes that are hashed and signed. */
/** (A Buffer in Node, a Uint8Array in the browser build.) */
export const receiptBytes = (unsigned: UnsignedReceipt): ReturnType<typeof utf8> => utf8(canonicalJson(unsigned))

/** SHA-256 as hex (of bytes, or of a string's UTF-8): ./platform.ts's, re-exported where the gateway has always found it. */
export { sha256Hex }

export const receiptHash = (unsigned: UnsignedReceipt, bytes: Uint8Array = receiptBytes(unsigned)): string => sha256Hex(bytes)

export type ReceiptCheck = "hash" | "signature"

/** A sealed receipt and its stored form. */
export interface SealedReceipt {
  readonly receipt: Receipt
  /**
   * `canonicalJson(receipt)`: the whole receipt in canonical form, what a store keeps (rows written
   * before 8cf01f3 hold `JSON.stringify(receipt)` instead). Its signed text is itself without the
   * top-level `hash` and `signature` members (`signedTextOfStored`).
   */
  readonly body: string
}

/**
 * The stored form's layout. In code-unit order `hash` comes right before `model` and `signature` right
 * before `signing_key_id` among a receipt's top-level keys, and every key before either holds a string
 * or a number, so the first `,"model":` and `,"signing_key_id":` of a canonical receipt are its
 * top-level members (a JSON string has no bare quote). test/spec/receipt.test.ts pins the key set this
 * rests on: a key added to `UnsignedReceipt` fails it until these places are looked at again.
 */
export const STORED_HASH_BEFORE = "model"
/** A receipt that names its key (issue 41): `key_id` sorts between `hash` and `model`, so the hash goes before it. */
export const STORED_HASH_BEFORE_KEY = "key_id"
export const STORED_SIGNATURE_BEFORE = "signing_key_id"

const insertMember = (text: string, before: string, member: string): string | undefined => {
  const at = text.indexOf(`,"${before}":`)
  return at < 0 ? undefined : `${text.slice(0, at + 1)}${member},${text.slice(at + 1)}`
}

/**
 * The stored body of a receipt whose signed text is `signed`: the signed text with its hash and
 * signature put in their places — `canonicalJson` of the whole receipt (a property in
 * test/spec/receipt.test.ts) at a fraction of its cost. Written in full if a place is missing.
 */
const storedBody = (signed: string, receipt: Receipt): string => {
  const hash = `"hash":${JSON.stringify(receipt.hash)}`
  const withHash = receipt.key_id === undefined ? insertMember(signed, STORED_HASH_BEFORE, hash) : insertMember(signed, STORED_HASH_BEFORE_KEY, hash)
  const body = withHash === undefined ? undefined : insertMember(withHash, STORED_SIGNATURE_BEFORE, `"signature":${JSON.stringify(receipt.signature)}`)
  return body ?? canonicalJson(receipt)
}

/**
 * The signed text of a body stored by `sealReceipt`: the body without its first `,"hash":…` and the
 * first `,"signature":…` after it, or undefined when it has not both. On a body in any other form the
 * result is some other text, which a caller must verify before trusting (spec/audit/seal.ts
 * `sealOfStored` does, and says why a text that verifies is the receipt's signed text).
 */
export const signedTextOfStored = (body: string, hash: string, signature: string): string | undefined => {
  const h = `,"hash":${JSON.stringify(hash)}`
  const a = body.indexOf(h)
  if (a < 0) return undefined
  const s = `,"signature":${JSON.stringify(signature)}`
  const b = body.indexOf(s, a + h.length)
  return b < 0 ? undefined : body.slice(0, a) + body.slice(a + h.length, b) + body.slice(b + s.length)
}

/**
 * Hash and sign a receipt body (which already carries its prev_hash and key id) with an Ed25519 key,
 * or with a signer of one (spec/ed25519.ts: libsodium's makes the same signature, faster).
 * A receipt key signs nothing else: only the canonical text of an unsigned receipt, the rule the
 * audit's `sealOfStored` relies on.
 */
export const sealReceipt = (privateKey: KeyObject | Sign, unsigned: UnsignedReceipt): SealedReceipt => {
  const text = canonicalJson(unsigned)
  const bytes = utf8(text)
  const signature = typeof privateKey === "function" ? privateKey(bytes) : keyObjects.sign(bytes, privateKey)
  const receipt: Receipt = { ...unsigned, hash: sha256Hex(bytes), signature: toBase64Url(signature) }
  return { receipt, body: storedBody(text, receipt) }
}

/**
 * Which of the receipt's own checks fail (empty = intact and signed by `publicKey`: SPKI PEM text, as
 * GET /v1/receipts/keys publishes it, or the check of one, spec/ed25519.ts `checkOfPem`).
 */
export const verifyReceipt = (receipt: Receipt, publicKey: string | SignatureCheckOf): ReadonlyArray<ReceiptCheck> => {
  const bytes = receiptBytes(unsignedPart(receipt))
  const failed: Array<ReceiptCheck> = []
  if (sha256Hex(bytes) !== receipt.hash) failed.push("hash")
  const check = typeof publicKey === "string" ? checkOfPem(publicKey) : publicKey
  if (check === undefined || !check(bytes, fromBase64Any(receipt.signature))) failed.push("signature")
  return failed
}

type SignatureCheckOf = (message: Uint8Array, signature: Uint8Array) => boolean
