/**
 * Canonical JSON per RFC 8785 (JCS) for the values Tollgate hashes: objects with keys sorted by
 * UTF-16 code units, no whitespace, strings and finite numbers serialised as ECMAScript's
 * JSON.stringify does (which is what RFC 8785 specifies). `undefined` members are omitted.
 */
export const canonicalJson = (value: unknown): string => {
  if (value === null || typeof value === "boolean" || typeof value === "string") return JSON.stringify(value)
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error("canonicalJson: non-finite number")
    return JSON.stringify(value)
  }
  if (Array.isArray(value)) {
    let out = "["
    for (let i = 0; i < value.length; i++) {
      const v: unknown = value[i]
      out += (i === 0 ? "" : ",") + (v === undefined ? "null" : canonicalJson(v))
    }
    return out + "]"
  }
  if (typeof value === "object") {
    const record = value as Record<string, unknown>
    const keys = Object.keys(record).sort()
    let out = "{"
    let first = true
    for (const k of keys) {
      const v = record[k]
      if (v === undefined) continue
      out += (first ? "" : ",") + JSON.stringify(k) + ":" + canonicalJson(v)
      first = false
    }
    return out + "}"
  }
  throw new Error(`canonicalJson: unsupported ${typeof value}`)
}
