/**
 * The audit's check of the stored monthly statements (issue 43): each one is a well-formed statement
 * of its row's project and period, signed by a trusted receipt key over its documented bytes
 * (spec/statement.ts), and its totals are the sums of that period's receipts in the store — the same
 * rule `tollgate verify` applies to a customer's copy. The caller passes the receipts' totals (summed
 * from rows whose columns the receipt checks hold to their signed bodies) and the keys.
 */
import { fromBase64Any, type RawCheck } from "../platform.ts"
import { type Statement, statementProblem, statementSignedBytes, type StatementTotals, totalsDifferences } from "../statement.ts"
import type { Report } from "./findings.ts"

export interface StoredStatement {
  readonly project_id: string
  readonly period: string
  readonly body: string
}

const fromBase64Url = (s: string): Uint8Array | undefined => (/^[A-Za-z0-9_-]+$/.test(s) ? fromBase64Any(s.replace(/-/g, "+").replace(/_/g, "/")) : undefined)

/** Report what is wrong with one stored statement, against its period's receipts' totals. */
export const checkStatement = (row: StoredStatement, receipts: StatementTotals, checkOf: (keyId: string) => RawCheck | undefined, report: Report): void => {
  const subject = `${row.project_id}/${row.period}`
  let value: unknown
  try {
    value = JSON.parse(row.body)
  } catch {
    value = undefined
  }
  const problem = value === undefined ? "not JSON" : statementProblem(value)
  if (problem !== undefined) return report("statement_malformed", subject, row.project_id, `the stored statement is not a statement: ${problem}`)
  const s = value as Statement
  if (s.project_id !== row.project_id || s.period !== row.period) {
    return report("statement_malformed", subject, row.project_id, `the stored statement is of ${s.project_id}/${s.period}, kept as ${subject}`)
  }
  const check = checkOf(s.signing_key_id)
  const signature = fromBase64Url(s.signature)
  if (check === undefined || signature === undefined || !check(statementSignedBytes(s), signature)) {
    report("statement_signature_invalid", subject, row.project_id, `the statement's signature does not verify with ${check === undefined ? "a trusted key (unknown key " + s.signing_key_id + ")" : s.signing_key_id}`)
  }
  for (const d of totalsDifferences(s, receipts)) {
    report("statement_totals_mismatch", subject, row.project_id, `the statement's ${d.field} is ${d.statement}; the period's receipts sum to ${d.receipts}`, { ...d })
  }
}
