/**
 * Migration 0020_key_budget_changed — when a key's `budget_credits` last changed, so `tollgate audit`
 * applies the ledger's grandfathered-cap rule (spec/ledger.ts: a cap lowered below what a window
 * already committed is not an overspend) to a key's windows as it does to a project's (whose
 * `updated_at` serves) and an end user's (`end_users.updated_at`). NULL: never set since 0020.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export const migrationKeyBudgetChanged = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () => sql.unsafe(`ALTER TABLE api_keys ADD COLUMN budget_changed_at BIGINT`),
    orElse: () => sql.unsafe(`ALTER TABLE api_keys ADD COLUMN budget_changed_at INTEGER`)
  })
})
