/**
 * `tollgate audit`'s pass over the stored monthly statements (issue 43): each statement in scope read
 * through the audit's port (src/store/auditSource.ts), its period's receipts summed per route in the
 * same snapshot, and the rulebook's check (spec/audit/statements.ts) run on both.
 */
import { checkStatement, type StoredStatement } from "../../spec/audit/statements.ts"
import type { Finding, FindingKind } from "../../spec/audit/findings.ts"
import type { AuditSummary } from "../../spec/audit/rows.ts"
import { checkOfPem, receiptKeyIdOfPem } from "../../spec/ed25519.ts"
import type { RawCheck } from "../../spec/platform.ts"
import type { ModelTotals, StatementTotals } from "../../spec/statement.ts"
import { allRows, type AuditSource } from "./auditSource.ts"
import type { RouteSumRow } from "./receiptLogRepo.ts"

export interface StatementsAudit {
  readonly checked: number
  readonly findings: ReadonlyArray<Finding>
}

const scoped = (scope: { readonly project?: string | undefined; readonly period?: string | undefined }) => ({
  where: [scope.project === undefined ? "" : " AND project_id = @project", scope.period === undefined ? "" : " AND period = @period"].join(""),
  params: { ...(scope.project === undefined ? {} : { project: scope.project }), ...(scope.period === undefined ? {} : { period: scope.period }) }
})

/** Check every stored statement of the scope against its period's receipts; `pinned` keys (PEM) replace the store's. */
export const auditStatements = async (
  source: AuditSource,
  scope: { readonly project?: string | undefined; readonly period?: string | undefined },
  pinned: ReadonlyArray<string> = []
): Promise<StatementsAudit> => {
  const { where, params } = scoped(scope)
  let statements: Array<StoredStatement>
  try {
    statements = await allRows<StoredStatement>(source, { sql: `SELECT project_id, period, body FROM statements WHERE 1 = 1${where} ORDER BY project_id, period`, params })
  } catch (e) {
    // a store from before migration 0011 has no statements to check
    if (/no such table|does not exist/.test((e as Error).message)) return { checked: 0, findings: [] }
    throw e
  }
  const keys = new Map<string, RawCheck>()
  const pems = pinned.length > 0 ? pinned.map((pem) => ({ pem })) : (await allRows<{ public_key: string }>(source, { sql: "SELECT public_key FROM receipt_keys", params: {} })).map((k) => ({ pem: k.public_key }))
  for (const { pem } of pems) {
    const check = checkOfPem(pem)
    const id = check === undefined ? undefined : receiptKeyIdOfPem(pem)
    if (check !== undefined && id !== undefined) keys.set(id, check)
  }
  const findings: Array<Finding> = []
  const report = (kind: FindingKind, subject: string, project: string | undefined, message: string, detail?: Record<string, unknown>) =>
    void findings.push({ kind, subject, project, message, detail })
  for (const row of statements) {
    const p = { project: row.project_id, period: row.period }
    const sums = await allRows<RouteSumRow>(source, {
      sql: `SELECT route, COUNT(*) AS requests, SUM(credits_charged) AS credits, SUM(input_tokens) AS input_tokens, SUM(cached_input_tokens) AS cached_input_tokens,
              SUM(output_tokens) AS output_tokens, SUM(reasoning_tokens) AS reasoning_tokens
            FROM receipts WHERE project_id = @project AND period = @period GROUP BY route ORDER BY route`,
      params: p
    })
    const versions = await allRows<{ v: string }>(source, { sql: "SELECT DISTINCT rate_card_version AS v FROM receipts WHERE project_id = @project AND period = @period ORDER BY v", params: p })
    const by_model: Record<string, ModelTotals> = {}
    for (const s of sums) {
      by_model[s.route] = {
        requests: Number(s.requests),
        tokens: { input: Number(s.input_tokens), cached_input: Number(s.cached_input_tokens), output: Number(s.output_tokens), reasoning: Number(s.reasoning_tokens) },
        credits: Number(s.credits)
      }
    }
    const totals: StatementTotals = {
      spent: Object.values(by_model).reduce((n, m) => n + m.credits, 0),
      receipt_count: Object.values(by_model).reduce((n, m) => n + m.requests, 0),
      by_model,
      rate_card_versions: versions.map((v) => v.v)
    }
    checkStatement(row, totals, (id) => keys.get(id), report)
  }
  return { checked: statements.length, findings }
}

/** The audit's result with the statements' pass added: their findings counted, listed within `limit`, and the count checked. */
export const withStatements = <R extends { readonly summary: AuditSummary; readonly findings: ReadonlyArray<Finding>; readonly omitted: number }>(
  result: R,
  statements: StatementsAudit,
  limit: number
): R & { readonly statementsChecked: number } => {
  const byKind: Partial<Record<FindingKind, number>> = { ...result.summary.byKind }
  for (const f of statements.findings) byKind[f.kind] = (byKind[f.kind] ?? 0) + 1
  const room = Math.max(0, limit - result.findings.length)
  return {
    ...result,
    summary: { ...result.summary, clean: result.summary.clean && statements.findings.length === 0, findings: result.summary.findings + statements.findings.length, byKind },
    findings: [...result.findings, ...statements.findings.slice(0, room)],
    omitted: result.omitted + Math.max(0, statements.findings.length - room),
    statementsChecked: statements.checked
  }
}
