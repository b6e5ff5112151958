/**
 * Identifiers. Random parts come from node:crypto; every id is a prefix plus lowercase base32
 * so ids are URL-safe, copy-paste safe and never contain the `_` that separates key-token fields.
 */
import { randomBytes } from "node:crypto"

const ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"

/** `bytes` random bytes as lowercase base32 (5 bits per char). */
export const randomBase32 = (bytes: number): string => {
  const buf = randomBytes(bytes)
  let out = ""
  let acc = 0
  let bits = 0
  for (const b of buf) {
    acc = (acc << 8) | b
    bits += 8
    while (bits >= 5) {
      out += ALPHABET[(acc >>> (bits - 5)) & 31]
      bits -= 5
    }
    acc &= (1 << bits) - 1
  }
  if (bits > 0) out += ALPHABET[(acc << (5 - bits)) & 31]
  return out
}

const makeId = (prefix: string, bytes = 12) => (): string => `${prefix}_${randomBase32(bytes)}`

export const newRequestId = makeId("req", 15)
export const newReceiptId = makeId("rcpt", 15)
export const newReservationId = makeId("rsv", 15)
export const newProjectId = makeId("prj")
export const newOrganizationId = makeId("org")
export const newKeyId = makeId("key", 10)

export const ENVIRONMENTS = ["development", "staging", "production"] as const
export type Environment = (typeof ENVIRONMENTS)[number]

export const isEnvironment = (s: unknown): s is Environment =>
  typeof s === "string" && (ENVIRONMENTS as ReadonlyArray<string>).includes(s)
