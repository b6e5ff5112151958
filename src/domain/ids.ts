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

// Ids are written as ASCII codes into one scratch buffer and read out as one string: building them a
// character at a time allocated a string per character (≈ 0.8 KiB an id, bench/profile.ts --alloc).
const ALPHABET_CODES = Buffer.from(ALPHABET, "latin1")
let scratch = Buffer.allocUnsafe(64)

/** Write `buf` as lowercase base32 codes (5 bits per char, the last zero-padded) into scratch at `at`; the end. */
const writeBase32 = (buf: Uint8Array, at: number): number => {
  const end = at + Math.ceil((buf.length * 8) / 5)
  if (end > scratch.length) scratch = Buffer.concat([scratch.subarray(0, at), Buffer.allocUnsafe(end)])
  let acc = 0
  let bits = 0
  for (let i = 0; i < buf.length; i++) {
    acc = (acc << 8) | buf[i]!
    bits += 8
    while (bits >= 5) {
      scratch[at++] = ALPHABET_CODES[(acc >>> (bits - 5)) & 31]!
      bits -= 5
    }
    acc &= (1 << bits) - 1
  }
  if (bits > 0) scratch[at++] = ALPHABET_CODES[(acc << (5 - bits)) & 31]!
  return at
}

/** `bytes` as lowercase base32 (5 bits per char, the last zero-padded). */
export const base32Of = (bytes: Uint8Array): string => {
  const end = writeBase32(bytes, 0) // first: it may replace the scratch buffer
  return scratch.toString("latin1", 0, end)
}

/** `bytes` random bytes as lowercase base32. */
export const randomBase32 = (bytes: number): string => base32Of(takeRandom(bytes))

const makeId = (prefix: string, bytes = 12) => (): string => `${prefix}_${randomBase32(bytes)}`

/** The same 32 characters in ASCII order, so that string order is numeric order. */
const SORTED_CODES = Buffer.from("234567abcdefghijklmnopqrstuvwxyz", "latin1")
const TIME_CHARS = 10

/**
 * Ids of rows written on every call start with their creation time (then 80 random bits), so new
 * rows land at the right edge of their indexes: a batch of transactions dirties a few shared pages
 * instead of one random page per index per row, which is what each commit writes to the WAL. The
 * time is `now` (ms since the epoch) as 10 base32 characters, so ids sort by creation time.
 */
const makeTimedId = (prefix: string) => {
  const head = Buffer.from(`${prefix}_`, "latin1")
  return (now: number): string => {
    head.copy(scratch, 0)
    let rest = Math.max(0, Math.floor(now))
    for (let i = head.length + TIME_CHARS - 1; i >= head.length; i--) {
      scratch[i] = SORTED_CODES[rest % 32]!
      rest = Math.floor(rest / 32)
    }
    const end = writeBase32(takeRandom(10), head.length + TIME_CHARS)
    return scratch.toString("latin1", 0, end)
  }
}

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
