/** Pure helpers of the audit, usable on their own: a key's id, a window's subject, a stored receipt parsed and checked for shape, the governance of a stored response. */
import { createHash, createPublicKey } from "node:crypto"
import { isPeriod } from "../ledger.ts"
import type { Receipt } from "../receipt.ts"


/** The id of a receipt public key: "rk_" + the first 16 hex digits of SHA-256 over its SPKI PEM. */
export const receiptKeyId = (publicKeyPem: string): string => {
  const spki = createPublicKey(publicKeyPem).export({ type: "spki", format: "pem" }) as string
  return `rk_${createHash("sha256").update(spki).digest("hex").slice(0, 16)}`
}

/** The subject of a window finding. */
export const windowSubject = (project: string, period: string): string => `${project}/${period}`

const isCount = (n: unknown): n is number => typeof n === "number" && Number.isSafeInteger(n) && n >= 0
const isString = (s: unknown): s is string => typeof s === "string"

const STRING_FIELDS = [
  "receipt_id", "request_id", "organization", "project_id", "environment", "model", "route", "rate_card_version",
  "usage_source", "period", "created_at", "prev_hash", "signing_key_id", "hash", "signature"
] as const
const COUNT_FIELDS = ["credits_reserved", "credits_charged"] as const
const TOKEN_FIELDS = ["input", "cached_input", "output", "reasoning"] as const

/** The receipt in `body`, or why it is not one. Checks shape and types only, not hashes. */
export const parseReceipt = (body: string): Receipt | string => {
  let v: unknown
  try {
    v = JSON.parse(body)
  } catch {
    return "body is not JSON"
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) return "body is not a JSON object"
  const r = v as Record<string, unknown>
  for (const f of STRING_FIELDS) if (!isString(r[f])) return `${f} is not a string`
  if (r["object"] !== "receipt") return "object is not \"receipt\""
  if (r["status"] !== "completed") return "status is not \"completed\""
  for (const f of COUNT_FIELDS) if (!isCount(r[f])) return `${f} is not a non-negative integer`
  if (!(typeof r["seq"] === "number" && Number.isSafeInteger(r["seq"]) && r["seq"] >= 1)) return "seq is not a positive integer"
  const t = r["tokens"] as Record<string, unknown> | null | undefined
  if (t === null || typeof t !== "object") return "tokens is not an object"
  for (const c of TOKEN_FIELDS) if (!isCount(t[c])) return `tokens.${c} is not a non-negative integer`
  if (!isPeriod(r["period"] as string)) return "period is not YYYY-MM"
  if (Number.isNaN(Date.parse(r["created_at"] as string))) return "created_at is not an instant"
  return v as Receipt
}

/** The `governance` object of a stored response: a JSON body, or the last SSE `data:` chunk carrying one. */
export const governanceOf = (body: Uint8Array | string | null): Record<string, unknown> | undefined => {
  if (body === null) return undefined
  const text = typeof body === "string" ? body : Buffer.from(body).toString("utf8")
  const pick = (v: unknown) =>
    v !== null && typeof v === "object" && "governance" in v ? ((v as { governance: unknown }).governance as Record<string, unknown>) : undefined
  try {
    return pick(JSON.parse(text))
  } catch {
    // Not one JSON value: a stream of SSE frames.
  }
  let found: Record<string, unknown> | undefined
  for (const line of text.split("\n")) {
    if (!line.startsWith("data:")) continue
    const data = line.slice(5).trim()
    if (data === "[DONE]" || !data.includes("governance")) continue
    try {
      found = pick(JSON.parse(data)) ?? found
    } catch {
      // A frame that is not JSON carries no governance.
    }
  }
  return found
}

