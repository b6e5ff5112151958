/**
 * What the audit's signature workers learn from a receipt's body besides its seal, so the main thread
 * need not parse the body again: the rules comparing a signed body with its row's columns (one source,
 * used by the checker in spec/audit.ts for --jobs 0 and by the workers), and the few signed numbers
 * the ordered checks need, packed in a Float64Array that crosses threads by transfer.
 *
 * A receipt is *plain* when its body parses, every column agrees with it and its seal is intact; for
 * a plain receipt the columns stand for the body's fields, and the facts carry the rest (seq,
 * credits_reserved, tokens, route). Anything else is marked for the main thread to parse and report
 * in full, so the findings are the same wherever the checks ran.
 */
import type { Receipt } from "../receipt.ts"
import type { ReceiptRow } from "./rows.ts"
import { parseReceipt } from "./receipts.ts"
import { Seal, sealOfStored, type TrustedKey } from "./seal.ts"

/** The receipt columns a worker compares with the body, in the order of `signedColumns`. */
export type SignedColumns = readonly [
  id: string, request_id: string, project_id: string, environment: string, period: string, seq: number, credits_charged: number,
  rate_card_version: string, body: string, prev_hash: string, hash: string, signature: string, signing_key_id: string, created_at: number
]

/** A row's signed columns as a tuple (what `columnMismatches` reads). */
export const signedColumns = (r: ReceiptRow): SignedColumns => [
  r.id, r.request_id, r.project_id, r.environment, r.period, r.seq, r.credits_charged,
  r.rate_card_version, r.body, r.prev_hash, r.hash, r.signature, r.signing_key_id, r.created_at
]

/** The columns that disagree with the signed body, by their names in findings (`receipt_column_mismatch`). */
export const columnMismatches = (c: SignedColumns, r: Receipt): Array<string> => {
  const columns: Array<string> = []
  if (c[0] !== r.receipt_id) columns.push("id")
  if (c[1] !== r.request_id) columns.push("request_id")
  if (c[2] !== r.project_id) columns.push("project_id")
  if (c[3] !== r.environment) columns.push("environment")
  if (c[4] !== r.period) columns.push("period")
  if (c[6] !== r.credits_charged) columns.push("credits_charged")
  if (c[7] !== r.rate_card_version) columns.push("rate_card_version")
  if (c[9] !== r.prev_hash) columns.push("prev_hash")
  if (c[10] !== r.hash) columns.push("hash")
  if (c[11] !== r.signature) columns.push("signature")
  if (c[12] !== r.signing_key_id) columns.push("signing_key_id")
  if (c[13] !== Date.parse(r.created_at)) columns.push("created_at")
  return columns
}

/** Numbers per receipt in a facts array. */
export const FACTS_STRIDE = 8
/** The first number of a receipt's facts: plain, or to be parsed by the main thread. */
export const Facts = { plain: 1, parseHere: 0 } as const

/** The facts of a batch: FACTS_STRIDE numbers per receipt, and the routes the plain ones name. */
export interface BatchFacts {
  readonly numbers: Float64Array
  readonly routes: ReadonlyArray<string>
}

/** The part of a signed body the ordered checks read (for a plain receipt, built from columns and facts). */
export type SignedFields = Pick<
  Receipt,
  "receipt_id" | "request_id" | "project_id" | "environment" | "period" | "credits_charged" | "credits_reserved" | "rate_card_version" | "route" | "tokens"
>

/**
 * A batch of rows' signed columns as it crosses to a worker: one string holding, row after row, the
 * ten text columns and the body, cut by `ends` (the end offset of each piece), and the three number
 * columns in `numbers`. One string and two typed arrays clone as a few copies, where a tuple per row
 * costs a string allocation per column on each side.
 */
export interface ColumnBatch {
  readonly count: number
  readonly text: string
  readonly ends: Uint32Array
  readonly numbers: Float64Array
}

const TEXT_COLUMNS = 11
const NUMBER_COLUMNS = 3

/** Pack rows' signed columns for a worker (the order of `SignedColumns`, text then numbers). */
export const packColumns = (rows: ReadonlyArray<ReceiptRow>): ColumnBatch => {
  const ends = new Uint32Array(rows.length * TEXT_COLUMNS)
  const numbers = new Float64Array(rows.length * NUMBER_COLUMNS)
  let text = ""
  let e = 0
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i]!
    for (const piece of [r.id, r.request_id, r.project_id, r.environment, r.period, r.rate_card_version, r.body, r.prev_hash, r.hash, r.signature, r.signing_key_id]) {
      text += piece
      ends[e++] = text.length
    }
    numbers[i * NUMBER_COLUMNS] = r.seq
    numbers[i * NUMBER_COLUMNS + 1] = r.credits_charged
    numbers[i * NUMBER_COLUMNS + 2] = r.created_at
  }
  return { count: rows.length, text, ends, numbers }
}

/** Row `i` of a packed batch, as the tuple `columnMismatches` reads. */
const unpackColumns = (b: ColumnBatch, i: number): SignedColumns => {
  const e = i * TEXT_COLUMNS
  const piece = (k: number) => b.text.slice(e + k === 0 ? 0 : b.ends[e + k - 1]!, b.ends[e + k]!)
  const n = i * NUMBER_COLUMNS
  return [
    piece(0), piece(1), piece(2), piece(3), piece(4), b.numbers[n]!, b.numbers[n + 1]!,
    piece(5), piece(6), piece(7), piece(8), piece(9), piece(10), b.numbers[n + 2]!
  ]
}

/** The facts of a packed batch (what a worker computes): per receipt [plain?, seq, reserved, input, cached_input, output, reasoning, route index]. */
export const batchFacts = (batch: ColumnBatch, trusted: ReadonlyMap<string, TrustedKey>): BatchFacts => {
  const numbers = new Float64Array(batch.count * FACTS_STRIDE)
  const routes: Array<string> = []
  const routeIndex = new Map<string, number>()
  for (let i = 0; i < batch.count; i++) {
    const c = unpackColumns(batch, i)
    const r = parseReceipt(c[8])
    if (typeof r === "string" || columnMismatches(c, r).length > 0 || sealOfStored(c[8], r, trusted) !== Seal.intact) continue // parseHere (0)
    let route = routeIndex.get(r.route)
    if (route === undefined) {
      route = routes.push(r.route) - 1
      routeIndex.set(r.route, route)
    }
    const at = i * FACTS_STRIDE
    numbers[at] = Facts.plain
    numbers[at + 1] = r.seq
    numbers[at + 2] = r.credits_reserved
    numbers[at + 3] = r.tokens.input
    numbers[at + 4] = r.tokens.cached_input
    numbers[at + 5] = r.tokens.output
    numbers[at + 6] = r.tokens.reasoning
    numbers[at + 7] = route
  }
  return { numbers, routes }
}
