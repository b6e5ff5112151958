/**
 * Identifiers. Random parts come from node:crypto; every id is a prefix plus lowercase base32
 * so ids are URL-safe, copy-paste safe and never contain the `_` that separates key-token fields.
 */
import { randomFillSync } from "node:crypto"

const ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"

// Random bytes are drawn from a pool refilled 4 KiB at a time: one call into the CSPRNG per ≈ 270
// ids instead of one per id (the chat path makes three ids per request).
const POOL_SIZE = 4096
const pool = Buffer.allocUnsafe(POOL_SIZE)
let poolOffset = POOL_SIZE

const takeRandom = (bytes: number): Buffer => {
  if (bytes > POOL_SIZE) return randomFillSync(Buffer.allocUnsafe(bytes))
  if (poolOffset + bytes > POOL_SIZE) {
    randomFillSync(pool)
    poolOffset = 0
  }
  const out = pool.subarray(poolOffset, poolOffset + bytes)
  poolOffset += bytes
  return out
}

/** `bytes` random bytes as lowercase base32 (5 bits per char). */
export const randomBase32 = (bytes: number): string => {
  const buf = takeRandom(bytes)
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
