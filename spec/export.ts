/**
 * The receipt export (DESIGN §11, issue 43): what `GET /v1/receipts`, `GET /admin/v1/projects/{id}/receipts`
 * and `tollgate export` hand out, and what `tollgate verify` reads. JSON Lines (one JSON value a
 * line, each line ending in "\n", UTF-8):
 *
 *   {"object":"receipt_export","version":1,"project_id":"prj_…","period":"2026-11"|null,
 *    "cursor":"…"|null,"next_cursor":"…"|null,"keys":[ …GET /v1/receipts/keys entries… ],
 *    "rate_cards":[ …GET /v1/rate_cards entries: {version, effective_from, prices}… ]}
 *   {"object":"receipt",…}        one line per receipt, exactly as GET /v1/requests/{id}/receipt returns it,
 *   {"object":"receipt",…}        in chain order (ascending `seq`)
 *
 * One page is one header line and its receipts. Pages concatenate: the file `tollgate export` writes
 * is its pages one after another, each with its header, and it parses as one export (a header line
 * starts a page; every header must name the same project). `keys` holds at least every key that
 * signed a receipt of the page (the gateway writes every published receipt key: old ones stay
 * published); a verifier takes the union of all pages' keys. `rate_cards` holds at least every rate
 * card a receipt of the page names (cards are immutable; the gateway may write them all): a verifier
 * recomputes each charge from the receipt's tokens and its card, and reports a receipt whose card is
 * not carried (`tollgate verify`: rate_card_missing). Optional in the reader, for a page without receipts. `cursor` is the cursor the page was
 * asked for (null: the start), `next_cursor` the one to ask for next (null: this was the last page; it
 * is also the `x-next-cursor` response header). Cursors are opaque strings.
 *
 * `period` filters by the receipts' own `period` (the budget window of the request): a period's
 * receipts in chain order are a subsequence of the project's chain (a request begun on the last
 * second of a month may settle after the next month's first receipts). With no period the export is
 * the project's whole chain, the Merkle log's leaves in order.
 *
 * The parser is pure and incremental: feed it lines (or text chunks through `LineSplitter`), it
 * yields headers and receipts in file order, and a `malformed` record, with its 1-based line number
 * and the reason, for a line it cannot take. It checks shape only: hashes, signatures, the chain
 * and the charges are the verifier's (spec/receipt.ts, spec/audit, spec/merkle.ts).
 */
import type { RateCard } from "./pricing.ts"
import type { Receipt } from "./receipt.ts"

export const EXPORT_OBJECT = "receipt_export"
export const EXPORT_VERSION = 1
/** The media type the endpoints answer with. */
export const EXPORT_CONTENT_TYPE = "application/jsonl; charset=utf-8"

/** One `GET /v1/receipts/keys` entry. */
export interface ExportKey {
  readonly id: string
  readonly algorithm: "Ed25519"
  readonly public_key: string
  readonly created_at: string
  readonly retired_at: string | null
}

export interface ExportHeader {
  readonly object: typeof EXPORT_OBJECT
  readonly version: typeof EXPORT_VERSION
  readonly project_id: string
  readonly period: string | null
  readonly cursor: string | null
  readonly next_cursor: string | null
  readonly keys: ReadonlyArray<ExportKey>
  /** The rate cards the page's receipts name (GET /v1/rate_cards entries). */
  readonly rate_cards?: ReadonlyArray<RateCard> | undefined
}

export type ExportRecord =
  | { readonly kind: "header"; readonly line: number; readonly header: ExportHeader }
  | { readonly kind: "receipt"; readonly line: number; readonly receipt: Receipt; readonly text: string }
  | { readonly kind: "malformed"; readonly line: number; readonly reason: string }

/** The header line of a page (without its newline). */
export const headerLine = (h: Omit<ExportHeader, "object" | "version">): string =>
  JSON.stringify({
    object: EXPORT_OBJECT,
    version: EXPORT_VERSION,
    project_id: h.project_id,
    period: h.period,
    cursor: h.cursor,
    next_cursor: h.next_cursor,
    keys: h.keys.map((k) => ({ id: k.id, algorithm: k.algorithm, public_key: k.public_key, created_at: k.created_at, retired_at: k.retired_at })),
    ...(h.rate_cards === undefined ? {} : { rate_cards: h.rate_cards.map((c) => ({ version: c.version, effective_from: c.effective_from, prices: c.prices })) })
  })

// ---------------------------------------------------------------------------------------------
// Shape checks

type Json = Record<string, unknown>
const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v)
const isString = (v: unknown): v is string => typeof v === "string"
const isCount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0
/** 64 lowercase hex digits (what /^[0-9a-f]{64}$/ admits), by char codes: a verifier asks it twice a receipt. */
const isHex64 = (s: string): boolean => {
  if (s.length !== 64) return false
  for (let i = 0; i < 64; i++) {
    const c = s.charCodeAt(i)
    if (!((c >= 48 && c <= 57) || (c >= 97 && c <= 102))) return false
  }
  return true
}
const PERIOD = /^\d{4}-(0[1-9]|1[0-2])$/

const keyProblem = (k: unknown, i: number): string | undefined => {
  if (!isObject(k)) return `keys[${i}] is not an object`
  if (!isString(k.id) || !/^rk_[0-9a-f]{16}$/.test(k.id)) return `keys[${i}].id is not a receipt key id (rk_ and 16 hex digits)`
  if (k.algorithm !== "Ed25519") return `keys[${i}].algorithm is not "Ed25519"`
  if (!isString(k.public_key) || !k.public_key.includes("BEGIN PUBLIC KEY")) return `keys[${i}].public_key is not a PEM public key`
  if (!isString(k.created_at)) return `keys[${i}].created_at is not a string`
  if (!(k.retired_at === null || isString(k.retired_at))) return `keys[${i}].retired_at is neither null nor a string`
  return undefined
}

/** Why `v` is not a page header, or undefined when it is one. */
export const headerProblem = (v: Json): string | undefined => {
  if (v.version !== EXPORT_VERSION) return `unknown export version ${JSON.stringify(v.version)} (this reader knows ${EXPORT_VERSION})`
  if (!isString(v.project_id) || v.project_id.length === 0) return "the header has no project_id"
  if (!(v.period === null || (isString(v.period) && PERIOD.test(v.period)))) return "the header's period is neither null nor YYYY-MM"
  if (!(v.cursor === null || isString(v.cursor))) return "the header's cursor is neither null nor a string"
  if (!(v.next_cursor === null || isString(v.next_cursor))) return "the header's next_cursor is neither null nor a string"
  if (!Array.isArray(v.keys)) return "the header's keys is not an array"
  for (let i = 0; i < v.keys.length; i++) {
    const p = keyProblem(v.keys[i], i)
    if (p !== undefined) return p
  }
  if (v.rate_cards !== undefined) {
    if (!Array.isArray(v.rate_cards)) return "the header's rate_cards is not an array"
    for (let i = 0; i < v.rate_cards.length; i++) {
      const c: unknown = v.rate_cards[i]
      if (!isObject(c) || !isString(c.version) || !isString(c.effective_from) || !isObject(c.prices)) return `rate_cards[${i}] is not {version, effective_from, prices}`
    }
  }
  return undefined
}

const TOKEN_CLASSES = ["input", "cached_input", "output", "reasoning"] as const
const STRING_FIELDS = [
  "receipt_id",
  "request_id",
  "organization",
  "project_id",
  "environment",
  "model",
  "route",
  "rate_card_version",
  "created_at",
  "signing_key_id",
  "signature"
] as const

/** Why `v` is not a receipt in its served shape, or undefined when it is one. */
export const receiptProblem = (v: Json): string | undefined => {
  for (const f of STRING_FIELDS) if (!isString(v[f])) return `the receipt's ${f} is not a string`
  if (v.status !== "completed") return "the receipt's status is not \"completed\""
  if (!isString(v.hash) || !isHex64(v.hash)) return "the receipt's hash is not 64 lowercase hex digits"
  if (!isString(v.prev_hash) || !isHex64(v.prev_hash)) return "the receipt's prev_hash is not 64 lowercase hex digits"
  if (!isString(v.period) || !PERIOD.test(v.period)) return "the receipt's period is not YYYY-MM"
  if (!isCount(v.seq) || v.seq < 1) return "the receipt's seq is not a positive integer"
  if (!isCount(v.credits_charged) || !isCount(v.credits_reserved)) return "the receipt's credits are not non-negative integers"
  if (!isObject(v.tokens)) return "the receipt's tokens is not an object"
  for (const c of TOKEN_CLASSES) if (!isCount(v.tokens[c])) return `the receipt's tokens.${c} is not a non-negative integer`
  if (!isObject(v.verification)) return "the receipt's verification is not an object"
  return undefined
}

// ---------------------------------------------------------------------------------------------
// The parser

/**
 * Cuts text chunks into lines (without their "\n"), carrying a partial line over to the next chunk:
 * an export read from a stream in flat memory. `end()` returns the last line when the text did not
 * end in a newline.
 */
export class LineSplitter {
  private rest = ""
  push(chunk: string): Array<string> {
    const text = this.rest + chunk
    const lines = text.split("\n")
    this.rest = lines.pop()!
    return lines
  }
  end(): Array<string> {
    const last = this.rest
    this.rest = ""
    return last.length > 0 ? [last] : []
  }
}

/**
 * The records of an export's lines, in order; a line's number counts from 1. A stateful reader: a
 * receipt before any header, a header naming another project than the first, a receipt of another
 * project, an empty line, text that is not JSON, or a value of neither shape is `malformed`, and the
 * reader goes on with the next line (a verifier reports every one).
 */
export class ExportReader {
  private lineNo = 0
  private project: string | undefined = undefined

  read(line: string): ExportRecord {
    const n = ++this.lineNo
    const bad = (reason: string): ExportRecord => ({ kind: "malformed", line: n, reason })
    const text = line.endsWith("\r") ? undefined : line
    if (text === undefined) return bad("a line ends in CR (the export's lines end in LF alone)")
    if (text.length === 0) return bad("an empty line")
    let value: unknown
    try {
      value = JSON.parse(text)
    } catch {
      return bad("not JSON")
    }
    if (!isObject(value)) return bad("not a JSON object")
    if (value.object === EXPORT_OBJECT) {
      const problem = headerProblem(value)
      if (problem !== undefined) return bad(problem)
      const header = value as unknown as ExportHeader
      if (this.project !== undefined && header.project_id !== this.project) {
        return bad(`a page of project ${header.project_id} in an export of project ${this.project}`)
      }
      this.project = header.project_id
      return { kind: "header", line: n, header }
    }
    if (value.object === "receipt") {
      if (this.project === undefined) return bad("a receipt before any header line")
      const problem = receiptProblem(value)
      if (problem !== undefined) return bad(problem)
      if (value.project_id !== this.project) return bad(`a receipt of project ${String(value.project_id)} in an export of project ${this.project}`)
      return { kind: "receipt", line: n, receipt: value as unknown as Receipt, text }
    }
    return bad(`neither a header nor a receipt (object ${JSON.stringify(value.object)})`)
  }
}

/** Every record of an export's lines. */
export function* readExportLines(lines: Iterable<string>): Generator<ExportRecord> {
  const reader = new ExportReader()
  for (const line of lines) yield reader.read(line)
}

/** Every record of a whole export text (the final newline ends the last line; it does not start an empty one). */
export const readExport = (text: string): Array<ExportRecord> => {
  const splitter = new LineSplitter()
  return [...readExportLines([...splitter.push(text), ...splitter.end()])]
}

/** The keys of every page, by id (the first entry of an id wins). */
export const exportKeys = (records: Iterable<ExportRecord>): Map<string, ExportKey> => {
  const keys = new Map<string, ExportKey>()
  for (const r of records) if (r.kind === "header") for (const k of r.header.keys) if (!keys.has(k.id)) keys.set(k.id, k)
  return keys
}
