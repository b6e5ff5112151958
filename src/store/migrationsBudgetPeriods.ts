/**
 * Migration 0019_budget_periods — issue 41, item 2 (spec/periods.ts): a project's budget period and
 * time zone. `budget_period` is `month` (the default: every project so far), `week`, `day` or `total`;
 * `time_zone` an IANA name (default `UTC`), checked by the admin API where it is written (the database
 * cannot check a zone name). A call's window label is decided by its start in that zone, so the
 * ledger's rows are unchanged: `budget_windows.period`, `scope_windows.period`, `reservations.period`
 * and `receipts.period` hold the label of whatever kind the project's period is.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

const STATEMENTS = [
  `ALTER TABLE projects ADD COLUMN budget_period TEXT NOT NULL DEFAULT 'month' CHECK (budget_period IN ('month', 'week', 'day', 'total'))`,
  `ALTER TABLE projects ADD COLUMN time_zone TEXT NOT NULL DEFAULT 'UTC'`
]

export const migrationBudgetPeriods = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* Effect.forEach(STATEMENTS, (s) => sql.unsafe(s), { discard: true })
})
