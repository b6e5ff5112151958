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

/** The same 32 characters in ASCII order, so that string order is numeric order. */
const SORTED_ALPHABET = "234567abcdefghijklmnopqrstuvwxyz"

/** `ms` (milliseconds since the epoch) as 10 base32 characters, so ids sort by creation time. */
const timeBase32 = (ms: number): string => {
  let out = ""
  let rest = Math.max(0, Math.floor(ms))
  for (let i = 0; i < 10; i++) {
    out = SORTED_ALPHABET[rest % 32]! + out
    rest = Math.floor(rest / 32)
  }
  return out
}

/**
 * Ids of rows written on every call start with their creation time (then 80 random bits), so new
 * rows land at the right edge of their indexes: a batch of transactions dirties a few shared pages
 * instead of one random page per index per row, which is what each commit writes to the WAL.
 */
const makeTimedId = (prefix: string) => (now: number): string => `${prefix}_${timeBase32(now)}${randomBase32(10)}`

export const newRequestId = makeTimedId("req")
export const newReceiptId = makeTimedId("rcpt")
export const newReservationId = makeTimedId("rsv")
export const newProjectId = makeId("prj")
export const newOrganizationId = makeId("org")
export const newKeyId = makeId("key", 10)

export const ENVIRONMENTS = ["development", "staging", "production"] as const
export type Environment = (typeof ENVIRONMENTS)[number]

export const isEnvironment = (s: unknown): s is Environment =>
  typeof s === "string" && (ENVIRONMENTS as ReadonlyArray<string>).includes(s)
