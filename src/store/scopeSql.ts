/**
 * The key and end-user scopes' guards in SQL (issue 41, spec/scopes.ts), one text for both engines:
 * SQLite's statements (src/store/ledgerStatements.ts) and PostgreSQL's `tollgate_reserve`
 * (src/store/migrationsScopes.ts) read a scope's cap and hold in its window the same way.
 */
/** The largest cap a scope can have (spec/scopes.ts UNLIMITED): an uncapped scope's guard. */
export const UNLIMITED_SQL = "9007199254740991"

/** A key's cap, read inside a statement (`k` the key id's expression). */
export const keyCapSql = (k: string) => `COALESCE((SELECT kc.budget_credits FROM api_keys kc WHERE kc.id = ${k}), ${UNLIMITED_SQL})`

/** An end user's cap: its override (a NULL override: none), else the project's default, else none. */
export const endUserCapSql = (project: string, user: string) =>
  `COALESCE((SELECT CASE WHEN eu.project_id IS NOT NULL THEN eu.budget_credits ELSE pc.end_user_budget_credits END
     FROM projects pc LEFT JOIN end_users eu ON eu.project_id = pc.id AND eu.end_user = ${user} WHERE pc.id = ${project}), ${UNLIMITED_SQL})`

/**
 * The guarded hold in one scope's window, opening it if absent: one statement, the cap read inside it.
 * Changes one row if and only if spent + reserved + amount ≤ cap afterwards (a new window: amount ≤ cap).
 */
export const scopeHoldSql = (scope: string, period: string, amount: string, cap: string) =>
  `INSERT INTO scope_windows AS sw (scope, period, spent, reserved) SELECT ${scope}, ${period}, 0, ${amount} WHERE ${amount} <= ${cap}
   ON CONFLICT (scope, period) DO UPDATE SET reserved = sw.reserved + excluded.reserved
   WHERE sw.spent + sw.reserved + excluded.reserved <= ${cap}`

