/**
 * API key tokens (docs/contract.md §2): `tg_<env>_<key id>_<secret><crc>`.
 *
 * - `<env>` is `dev`, `stg` or `prd`;
 * - `<key id>` is the public id without its `key_` prefix (base32, 16 chars);
 * - `<secret>` is 32 base32 chars = 160 random bits;
 * - `<crc>` is the CRC32 of everything before it, as 7 base32 chars, so leak scanners can tell a
 *   real Tollgate key from noise offline, and a typo is rejected without touching the store.
 *
 * Only the key id and SHA-256(secret) are ever stored.
 */
import { randomBytes, timingSafeEqual } from "node:crypto"
import { sha256Hex } from "../../spec/receipt.ts"
import { type Environment, randomBase32 } from "./ids.ts"

const ENV_SHORT: Record<Environment, string> = { development: "dev", staging: "stg", production: "prd" }
const ENV_LONG: Record<string, Environment> = { dev: "development", stg: "staging", prd: "production" }

const CRC_TABLE = (() => {
  const t = new Uint32Array(256)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    t[n] = c >>> 0
  }
  return t
})()

export const crc32 = (s: string): number => {
  let c = 0xffffffff
  for (const b of Buffer.from(s, "utf8")) c = CRC_TABLE[(c ^ b) & 0xff]! ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}

const ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
const crcTail = (s: string): string => {
  let n = crc32(s)
  let out = ""
  for (let i = 0; i < 7; i++) {
    out = ALPHABET[n & 31] + out
    n = Math.floor(n / 32)
  }
  return out
}

export interface ParsedKey {
  readonly keyId: string
  readonly environment: Environment
  readonly secret: string
}

const TOKEN = /^tg_(dev|stg|prd)_([a-z2-7]{16})_([a-z2-7]{32})([a-z2-7]{7})$/

export const formatKey = (keyId: string, environment: Environment, secret: string): string => {
  const body = `tg_${ENV_SHORT[environment]}_${keyId.replace(/^key_/, "")}_${secret}`
  return body + crcTail(body)
}

/** Parse and checksum-validate a presented token; undefined when it is not a well-formed Tollgate key. */
export const parseKey = (token: string): ParsedKey | undefined => {
  const m = TOKEN.exec(token)
  if (m === null) return undefined
  const [, env, id, secret, tail] = m
  if (crcTail(token.slice(0, token.length - 7)) !== tail) return undefined
  return { keyId: `key_${id}`, environment: ENV_LONG[env!]!, secret: secret! }
}

export const newSecret = (): string => randomBase32(20)

export const hashSecret = (secret: string): string => sha256Hex(secret)

/** Constant-time comparison of two hex digests. */
export const sameHash = (a: string, b: string): boolean => {
  const ba = Buffer.from(a, "hex")
  const bb = Buffer.from(b, "hex")
  return ba.length === bb.length && timingSafeEqual(ba, bb)
}

/** A random admin token (`tga_…`), used when TOLLGATE_ADMIN_TOKEN is not set. */
export const newAdminToken = (): string => `tga_${randomBytes(24).toString("base64url")}`
