/**
 * Canonical JSON per RFC 8785 (JCS) for the values Tollgate hashes: objects with keys sorted by
 * UTF-16 code units, no whitespace, strings and finite numbers serialised as ECMAScript's
 * JSON.stringify does (which is what RFC 8785 specifies). `undefined` members are omitted.
 *
 * On the audit's path (every receipt canonicalised again), so written for speed with the same output
 * (test/audit/canonicalJson.test.ts checks it against a plain sort-and-join): short key lists are
 * sorted by insertion (a receipt's objects have at most a few dozen keys), and each key's quoted
 * form is kept in a bounded cache (receipts repeat the same few dozen keys).
 */
const SHORT = 32
const quotedKeys = new Map<string, string>()
const QUOTED_KEYS_MAX = 4096

/** `"key":`, from the cache when it is there. */
const member = (key: string): string => {
  let quoted = quotedKeys.get(key)
  if (quoted === undefined) {
    quoted = `${JSON.stringify(key)}:`
    if (quotedKeys.size < QUOTED_KEYS_MAX) quotedKeys.set(key, quoted)
  }
  return quoted
}

/** Keys in UTF-16 code-unit order (`>` on strings, as `Array.prototype.sort` without a comparator). */
const sortedKeys = (record: object): Array<string> => {
  const keys = Object.keys(record)
  if (keys.length > SHORT) return keys.sort()
  for (let i = 1; i < keys.length; i++) {
    const k = keys[i]!
    let j = i - 1
    while (j >= 0 && keys[j]! > k) {
      keys[j + 1] = keys[j]!
      j--
    }
    keys[j + 1] = k
  }
  return keys
}

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
  if (typeof value === "object") return canonicalMembers(value as Record<string, unknown>, sortedKeys(value))
  throw new Error(`canonicalJson: unsupported ${typeof value}`)
}

/**
 * The canonical object of `record`'s members named by `keys`, which must already be in UTF-16
 * code-unit order; `undefined` members are omitted. canonicalJson's own object form, exported for a
 * caller that knows the key order already (spec/audit/signedText.ts: one order per receipt shape).
 */
export const canonicalMembers = (record: Record<string, unknown>, keys: ReadonlyArray<string>): string => {
  let out = "{"
  let first = true
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!
    const v = record[k]
    if (v === undefined) continue
    out += (first ? "" : ",") + member(k) + canonicalJson(v)
    first = false
  }
  return out + "}"
}
