/**
 * Monthly statements (DESIGN §11, issue 43): what `GET /v1/statements/{period}` serves once a period
 * has closed, and the rule a verifier and `tollgate audit` check it by — the statement's totals are
 * the sums of the period's receipts.
 *
 *   {"object":"statement","version":1,"project_id","period","cap","spent","receipt_count",
 *    "by_model":{"<route>":{"requests","tokens":{input,cached_input,output,reasoning},"credits"}},
 *    "rate_card_versions":[…sorted],"checkpoint":"<signed note text>","closed_at","signing_key_id","signature"}
 *
 * - the project's whole chain (every environment) is one log, so a statement covers the project;
 * - `by_model` is keyed by the receipts' `route`: the model that served the call, the name its rate
 *   card prices (a receipt's `model` may be `auto`);
 * - `cap` is the project's cap when the statement was made; `spent` the window's spent Credits,
 *   which the ledger keeps equal to the sum of the period's receipts' `credits_charged`;
 * - `checkpoint` is a signed checkpoint (spec/checkpoint.ts) whose tree holds every receipt of the
 *   period (each receipt's `seq` ≤ its tree size): the log at the close;
 * - `closed_at` is ISO-8601 UTC, when the statement was made.
 *
 * Signed bytes: UTF-8 of `STATEMENT_CONTEXT` followed by the canonical JSON (spec/canonicalJson.ts,
 * RFC 8785) of the statement without `signature`; `signature` = base64url(Ed25519) of them with the
 * receipt key `signing_key_id`. The context line keeps the receipt key's signatures apart: a receipt's
 * signed bytes begin with "{", a checkpoint's with "tollgate/", a statement's with this line.
 *
 * Pure: no I/O and no crypto (the caller signs and checks the bytes with its Ed25519).
 */
import { canonicalJson } from "./canonicalJson.ts"
import type { TokenCounts } from "./pricing.ts"
import type { Receipt } from "./receipt.ts"

export const STATEMENT_VERSION = 1
export const STATEMENT_CONTEXT = "tollgate statement v1\n"

export interface ModelTotals {
  readonly requests: number
  readonly tokens: TokenCounts
  readonly credits: number
}

/** The figures a statement states, all sums over the period's receipts but `cap`. */
export interface StatementTotals {
  readonly spent: number
  readonly receipt_count: number
  readonly by_model: Readonly<Record<string, ModelTotals>>
  readonly rate_card_versions: ReadonlyArray<string>
}

export interface UnsignedStatement extends StatementTotals {
  readonly object: "statement"
  readonly version: typeof STATEMENT_VERSION
  readonly project_id: string
  readonly period: string
  readonly cap: number
  readonly checkpoint: string
  readonly closed_at: string
  readonly signing_key_id: string
}

export interface Statement extends UnsignedStatement {
  readonly signature: string
}

/** The receipt fields the totals read. */
export type StatementReceipt = Pick<Receipt, "route" | "tokens" | "credits_charged" | "rate_card_version">

/** Sums receipts one at a time, in flat memory (a month of receipts is never held). */
export class TotalsAccumulator {
  private spent = 0
  private count = 0
  private readonly models = new Map<string, { requests: number; input: number; cached_input: number; output: number; reasoning: number; credits: number }>()
  private readonly versions = new Set<string>()

  add(r: StatementReceipt): void {
    this.spent += r.credits_charged
    this.count += 1
    this.versions.add(r.rate_card_version)
    let m = this.models.get(r.route)
    if (m === undefined) {
      m = { requests: 0, input: 0, cached_input: 0, output: 0, reasoning: 0, credits: 0 }
      this.models.set(r.route, m)
    }
    m.requests += 1
    m.input += r.tokens.input
    m.cached_input += r.tokens.cached_input
    m.output += r.tokens.output
    m.reasoning += r.tokens.reasoning
    m.credits += r.credits_charged
  }

  totals(): StatementTotals {
    const by_model: Record<string, ModelTotals> = {}
    for (const route of [...this.models.keys()].sort()) {
      const m = this.models.get(route)!
      by_model[route] = {
        requests: m.requests,
        tokens: { input: m.input, cached_input: m.cached_input, output: m.output, reasoning: m.reasoning },
        credits: m.credits
      }
    }
    return { spent: this.spent, receipt_count: this.count, by_model, rate_card_versions: [...this.versions].sort() }
  }
}

/** The totals of a period's receipts (the caller passes only that period's). */
export const statementFromReceipts = (receipts: Iterable<StatementReceipt>): StatementTotals => {
  const acc = new TotalsAccumulator()
  for (const r of receipts) acc.add(r)
  return acc.totals()
}

export const unsignedStatement = (s: Statement | UnsignedStatement): UnsignedStatement => {
  const { signature: _s, ...rest } = s as Statement
  return rest
}

/** The text whose UTF-8 is signed. */
export const statementSignedText = (s: UnsignedStatement | Statement): string => STATEMENT_CONTEXT + canonicalJson(unsignedStatement(s))

/** The bytes the statement's signature signs. */
export const statementSignedBytes = (s: UnsignedStatement | Statement): Uint8Array => new TextEncoder().encode(statementSignedText(s))

/** One figure where a statement and the receipts disagree. */
export interface TotalsDifference {
  /** `spent`, `receipt_count`, `rate_card_versions`, or `by_model.<route>.<requests|credits|tokens.<class>>`. */
  readonly field: string
  readonly statement: number | string
  readonly receipts: number | string
}

/**
 * Where a statement's totals differ from the sums of its period's receipts (empty: they agree). A
 * route the statement lists and the receipts do not, or the other way round, differs in each figure.
 */
export const totalsDifferences = (stated: StatementTotals, receipts: StatementTotals): Array<TotalsDifference> => {
  const out: Array<TotalsDifference> = []
  const num = (field: string, a: number, b: number) => {
    if (a !== b) out.push({ field, statement: a, receipts: b })
  }
  num("spent", stated.spent, receipts.spent)
  num("receipt_count", stated.receipt_count, receipts.receipt_count)
  const versionsA = [...stated.rate_card_versions].sort().join(",")
  const versionsB = [...receipts.rate_card_versions].sort().join(",")
  if (versionsA !== versionsB) out.push({ field: "rate_card_versions", statement: versionsA, receipts: versionsB })
  const zero: ModelTotals = { requests: 0, tokens: { input: 0, cached_input: 0, output: 0, reasoning: 0 }, credits: 0 }
  const routes = [...new Set([...Object.keys(stated.by_model), ...Object.keys(receipts.by_model)])].sort()
  for (const route of routes) {
    const a = stated.by_model[route] ?? zero
    const b = receipts.by_model[route] ?? zero
    num(`by_model.${route}.requests`, a.requests, b.requests)
    num(`by_model.${route}.credits`, a.credits, b.credits)
    for (const c of ["input", "cached_input", "output", "reasoning"] as const) num(`by_model.${route}.tokens.${c}`, a.tokens[c], b.tokens[c])
  }
  return out
}

/** Why `v` is not a statement in its served shape, or undefined when it is one. */
export const statementProblem = (v: unknown): string | undefined => {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return "a statement is a JSON object"
  const s = v as Record<string, unknown>
  const count = (x: unknown) => typeof x === "number" && Number.isSafeInteger(x) && x >= 0
  if (s.object !== "statement") return "object is not \"statement\""
  if (s.version !== STATEMENT_VERSION) return `unknown statement version ${JSON.stringify(s.version)}`
  for (const f of ["project_id", "period", "checkpoint", "closed_at", "signing_key_id", "signature"]) if (typeof s[f] !== "string") return `${f} is not a string`
  for (const f of ["cap", "spent", "receipt_count"]) if (!count(s[f])) return `${f} is not a non-negative integer`
  if (!Array.isArray(s.rate_card_versions) || !s.rate_card_versions.every((x) => typeof x === "string")) return "rate_card_versions is not a list of strings"
  if (typeof s.by_model !== "object" || s.by_model === null) return "by_model is not an object"
  for (const [route, m] of Object.entries(s.by_model as Record<string, unknown>)) {
    const t = m as Record<string, unknown> | null
    if (t === null || typeof t !== "object" || !count(t.requests) || !count(t.credits) || typeof t.tokens !== "object" || t.tokens === null) {
      return `by_model.${route} is not {requests, tokens, credits}`
    }
    const tokens = t.tokens as Record<string, unknown>
    for (const c of ["input", "cached_input", "output", "reasoning"]) if (!count(tokens[c])) return `by_model.${route}.tokens.${c} is not a non-negative integer`
  }
  return undefined
}
