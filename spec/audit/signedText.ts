/**
 * The text a receipt's hash and signature cover — `canonicalJson(unsignedPart(receipt))`, spec/
 * receipt.ts — written for the audit, which computes it again for every receipt: the top-level keys
 * are sorted once per shape (a store's receipts share one key order) and `hash` and `signature` are
 * left out of that order, so neither the copy without them nor the sort is paid per receipt. The
 * object itself is written by spec/canonicalJson.ts (`canonicalMembers`, canonicalJson's own object
 * form), so the text is the same by construction (test/audit/signedText.test.ts holds it to the plain
 * composition).
 */
import { canonicalMembers } from "../canonicalJson.ts"
import type { Receipt } from "../receipt.ts"

interface Shape {
  /** The object's own keys, in its order. */
  readonly keys: ReadonlyArray<string>
  /** The keys the signed text writes, in code-unit order. */
  readonly sorted: ReadonlyArray<string>
}

/** Recent shapes, newest first; a handful at most (a store writes one — two if it holds rows from before and after 8cf01f3 — and a tampered row may add one). */
const shapes: Array<Shape> = []
const SHAPES_MAX = 8

const sameKeys = (a: ReadonlyArray<string>, b: ReadonlyArray<string>): boolean => {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

const shapeOf = (keys: ReadonlyArray<string>): Shape => {
  for (const s of shapes) if (sameKeys(s.keys, keys)) return s
  // `sort()` without a comparator orders by UTF-16 code units, as canonicalJson does.
  const shape = { keys, sorted: keys.filter((k) => k !== "hash" && k !== "signature").sort() }
  shapes.unshift(shape)
  if (shapes.length > SHAPES_MAX) shapes.pop()
  return shape
}

/** The canonical text of the receipt without `hash` and `signature`: what is hashed and signed. */
export const signedText = (receipt: Receipt): string => {
  const record = receipt as unknown as Record<string, unknown>
  return canonicalMembers(record, shapeOf(Object.keys(record)).sorted)
}
