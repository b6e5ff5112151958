/**
 * The browser's (and any JavaScript host's) platform for the rulebook: the same functions as
 * ./platform.ts, over @noble/hashes (SHA-256, SHA-512), @noble/ed25519 (RFC 8032 checks, its strict
 * branch: `zip215: false`), TextEncoder/TextDecoder and atob/btoa. No Node built-in, no native code, no
 * I/O. The package's browser build (scripts/build-spec.mjs) uses this file in place of ./platform.ts;
 * test/spec-package/ runs both on the same receipts, proofs and checkpoints.
 */
import * as ed from "@noble/ed25519"
import { sha256 as nobleSha256, sha512 } from "@noble/hashes/sha2.js"

ed.hashes.sha512 = sha512

export const PLATFORM = "web" as "node" | "web"

export const sha256 = (...parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  const h = nobleSha256.create()
  for (const p of parts) h.update(p)
  return h.digest()
}

const encoder = new TextEncoder()
const decoder = new TextDecoder("utf-8", { fatal: false })

export const utf8 = (text: string): Uint8Array => encoder.encode(text)
export const fromUtf8 = (bytes: Uint8Array): string => decoder.decode(bytes)

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"))
export const toHex = (b: Uint8Array): string => {
  let out = ""
  for (let i = 0; i < b.length; i++) out += HEX[b[i]!]
  return out
}
export const fromHex = (s: string): Uint8Array | undefined => {
  if (!/^(?:[0-9a-fA-F]{2})*$/.test(s)) return undefined
  const out = new Uint8Array(s.length / 2)
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16)
  return out
}

export const sha256Hex = (data: Uint8Array | string): string => toHex(nobleSha256(typeof data === "string" ? utf8(data) : data))

export const toBase64 = (b: Uint8Array): string => {
  let s = ""
  for (let i = 0; i < b.length; i++) s += String.fromCharCode(b[i]!)
  return btoa(s)
}
export const toBase64Url = (b: Uint8Array): string => toBase64(b).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")
/** As Buffer.from(s, "base64") reads: either alphabet, padding optional, other characters skipped. */
export const fromBase64Any = (s: string): Uint8Array => {
  const clean = s.replace(/-/g, "+").replace(/_/g, "/").replace(/[^A-Za-z0-9+/]/g, "")
  const usable = clean.length % 4 === 1 ? clean.slice(0, -1) : clean
  const text = atob(usable.padEnd(Math.ceil(usable.length / 4) * 4, "="))
  return Uint8Array.from(text, (c) => c.charCodeAt(0))
}

export type RawCheck = (message: Uint8Array, signature: Uint8Array) => boolean

export const ed25519CheckOfRaw = (raw: Uint8Array): RawCheck | undefined => {
  if (raw.length !== 32) return undefined
  try {
    ed.Point.fromBytes(raw)
  } catch {
    return undefined
  }
  return (message, signature) => {
    try {
      return signature.length === 64 && ed.verify(signature, message, raw, { zip215: false })
    } catch {
      return false
    }
  }
}

const nodeOnly = (): never => {
  throw new TypeError("Node's KeyObject is not available in this build of @tollgate/spec: pass raw 32-byte Ed25519 keys or PEM text")
}

export const keyObjects = { sign: nodeOnly, verify: nodeOnly, createPublicKey: nodeOnly } as unknown as typeof import("./platform.ts").keyObjects
