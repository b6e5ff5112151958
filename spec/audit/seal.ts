/**
 * The seal of one receipt (spec/receipt.ts): does its body hash to its recorded hash, is its signer a
 * trusted key, does the Ed25519 signature verify, was the key still in service? A pure verdict, the
 * same in the audit's main thread and in its signature workers (src/store/auditWorker.ts), so the
 * findings do not depend on where it was computed. Imports node: modules and spec only: the workers
 * stay lean. The signature check itself is the trusted key's (spec/ed25519.ts: libsodium where
 * it loads, else node:crypto).
 */
import { createPublicKey, type KeyObject } from "node:crypto"
import { type Receipt, sha256Hex, signedTextOfStored } from "../receipt.ts"
import { type Ed25519, nodeEd25519, type SignatureCheck } from "../ed25519.ts"
import { parseReceipt } from "./receipts.ts"
import { signedText } from "./signedText.ts"

/** A verdict, as one small integer (what a worker sends back per receipt). */
export const Seal = {
  intact: 0,
  /** The body is not a receipt: the auditor reports it on its own parse. */
  malformed: 1,
  hashMismatch: 2,
  unknownKey: 3,
  badSignature: 4,
  retiredKey: 5
} as const
export type SealCode = (typeof Seal)[keyof typeof Seal]

/** A trusted public key as plain data (what crosses to a worker). */
export interface TrustedKeyData {
  readonly id: string
  readonly pem: string
  readonly retiredAt: number | null
}

export interface TrustedKey {
  /** Checks a signature under this key. */
  readonly check: SignatureCheck
  readonly retiredAt: number | null
}

export const trustedKey = (key: KeyObject, retiredAt: number | null, ed25519: Ed25519 = nodeEd25519): TrustedKey => ({ check: ed25519.checkFor(key), retiredAt })

export const trustedKeyMap = (keys: ReadonlyArray<TrustedKeyData>, ed25519: Ed25519 = nodeEd25519): Map<string, TrustedKey> =>
  new Map(keys.map((k) => [k.id, trustedKey(createPublicKey(k.pem), k.retiredAt, ed25519)]))

const verifies = (bytes: Buffer, key: TrustedKey, signature: string): boolean => key.check(bytes, Buffer.from(signature, "base64url"))

const inService = (key: TrustedKey, receipt: Receipt): boolean => key.retiredAt === null || Date.parse(receipt.created_at) <= key.retiredAt

/** The seal verdict of a parsed receipt under the trusted keys. */
export const sealOf = (receipt: Receipt, trusted: ReadonlyMap<string, TrustedKey>): SealCode => {
  const bytes = Buffer.from(signedText(receipt), "utf8")
  // The signature covers the same bytes: with the content altered it cannot verify either.
  if (sha256Hex(bytes) !== receipt.hash) return Seal.hashMismatch
  const key = trusted.get(receipt.signing_key_id)
  if (key === undefined) return Seal.unknownKey
  if (!verifies(bytes, key, receipt.signature)) return Seal.badSignature
  return inService(key, receipt) ? Seal.intact : Seal.retiredKey
}

/**
 * The seal verdict of a receipt parsed from `body`: `sealOf(receipt)`, reached without writing the
 * signed text again when the body is stored in canonical form, as Tollgate stores it (spec/receipt.ts
 * `SealedReceipt`). The signed text is then the body with its `hash` and `signature` members cut out
 * (spec/receipt.ts `signedTextOfStored`).
 * When that cut hashes to the receipt's hash and its signature verifies under a trusted key, the
 * verdict is the same as `sealOf`'s: a trusted key signs nothing but the canonical text of an
 * unsigned receipt, which has no `hash` or `signature` member at any depth, so the cut text is such a
 * text, the two members cut were top-level ones of a body that holds nothing else, and
 * `canonicalJson(unsignedPart(receipt))` is that same text. Every other case — a body stored in
 * another form, an altered one, an unknown or retired key — gets `sealOf`'s own verdict, so the
 * findings never depend on how a body was stored (test/audit/seal.test.ts).
 */
export const sealOfStored = (body: string, receipt: Receipt, trusted: ReadonlyMap<string, TrustedKey>): SealCode => {
  const key = trusted.get(receipt.signing_key_id)
  if (key !== undefined && inService(key, receipt)) {
    const text = signedTextOfStored(body, receipt.hash, receipt.signature)
    const bytes = text === undefined ? undefined : Buffer.from(text, "utf8")
    if (bytes !== undefined && sha256Hex(bytes) === receipt.hash && verifies(bytes, key, receipt.signature)) return Seal.intact
  }
  return sealOf(receipt, trusted)
}

/** The seal verdict of a stored body (what a worker computes). */
export const sealOfBody = (body: string, trusted: ReadonlyMap<string, TrustedKey>): SealCode => {
  const parsed = parseReceipt(body)
  return typeof parsed === "string" ? Seal.malformed : sealOfStored(body, parsed, trusted)
}
