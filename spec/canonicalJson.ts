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
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined ? "null" : canonicalJson(v))).join(",")}]`
  if (typeof value === "object") {
    const entries = Object.keys(value as object)
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`)
    return `{${entries.join(",")}}`
  }
  throw new Error(`canonicalJson: unsupported ${typeof value}`)
}
