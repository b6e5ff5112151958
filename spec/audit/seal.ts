/**
 * The seal of one receipt (spec/receipt.ts): does its body hash to its recorded hash, is its signer a
 * trusted key, does the Ed25519 signature verify, was the key still in service? A pure verdict, the
 * same in the audit's main thread and in its signature workers (src/store/auditWorker.ts), so the
 * findings do not depend on where it was computed. Imports node:crypto and spec only: the workers
 * stay lean.
 */
import { createPublicKey, type KeyObject, verify } from "node:crypto"
import { type Receipt, sha256Hex } from "../receipt.ts"
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
  readonly key: KeyObject
  readonly retiredAt: number | null
}

export const trustedKeyMap = (keys: ReadonlyArray<TrustedKeyData>): Map<string, TrustedKey> =>
  new Map(keys.map((k) => [k.id, { key: createPublicKey(k.pem), retiredAt: k.retiredAt }]))

/** The seal verdict of a parsed receipt under the trusted keys. */
export const sealOf = (receipt: Receipt, trusted: ReadonlyMap<string, TrustedKey>): SealCode => {
  const bytes = Buffer.from(signedText(receipt), "utf8")
  // The signature covers the same bytes: with the content altered it cannot verify either.
  if (sha256Hex(bytes) !== receipt.hash) return Seal.hashMismatch
  const key = trusted.get(receipt.signing_key_id)
  if (key === undefined) return Seal.unknownKey
  let ok = false
  try {
    ok = verify(null, bytes, key.key, Buffer.from(receipt.signature, "base64url"))
  } catch {
    ok = false
  }
  if (!ok) return Seal.badSignature
  if (key.retiredAt !== null && Date.parse(receipt.created_at) > key.retiredAt) return Seal.retiredKey
  return Seal.intact
}

/** The seal verdict of a stored body (what a worker computes). */
export const sealOfBody = (body: string, trusted: ReadonlyMap<string, TrustedKey>): SealCode => {
  const parsed = parseReceipt(body)
  return typeof parsed === "string" ? Seal.malformed : sealOf(parsed, trusted)
}
