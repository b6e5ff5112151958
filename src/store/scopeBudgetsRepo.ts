/**
 * The key and end-user budgets' rows (issue 41, migration 0014; src/services/ScopeBudgets.ts): a key's
 * `budget_credits`, a project's `end_user_budget_credits`, the `end_users` overrides, and the scopes'
 * windows (`scope_windows`, named by spec/scopes.ts `accountOf`) the admin API shows with them.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { UpstreamLimitFields } from "../domain/adminFields.ts"
import { endUserAccount, keyAccount } from "./ledgerStatements.ts"

/** An end user's override as stored, with its window's figures. */
export interface EndUserRow {
  readonly project_id: string
  readonly end_user: string
  readonly budget_credits: number | null
  /** Its own upstream limits (migration 0022; NULL: none). */
  readonly tokens_per_minute: number | null
  readonly max_concurrent: number | null
  readonly created_at: number
  readonly updated_at: number
  readonly spent: number | null
  readonly reserved: number | null
}

export interface ScopeWindowRow {
  readonly spent: number | null
  readonly reserved: number | null
}

/** A key with a budget, with its window's figures. */
export interface KeyBudgetRow extends ScopeWindowRow {
  readonly id: string
  readonly project_id: string
  readonly budget_credits: number
}

/** Where a page of end users by spend starts: after this one (spent descending, then name). */
export interface SpentPosition {
  readonly spent: number
  readonly user: string
}

export const makeScopeBudgetsRepo = (sql: SqlClient.SqlClient) => ({
  /** Key `keyId`'s project and budget. */
  key: (keyId: string) => sql<{ id: string; project_id: string; budget_credits: number | null }>`SELECT id, project_id, budget_credits FROM api_keys WHERE id = ${keyId}`,

  /** Set (or, null, clear) key `keyId`'s budget: a row back when the key exists. */
  setKey: (keyId: string, cap: number | null, now: number) =>
    sql<{ id: string }>`UPDATE api_keys SET budget_credits = ${cap}, budget_changed_at = ${now} WHERE id = ${keyId} RETURNING id`,

  /** A project's default budget for its end users. */
  endUserDefault: (projectId: string) => sql<{ end_user_budget_credits: number | null }>`SELECT end_user_budget_credits FROM projects WHERE id = ${projectId}`,

  setEndUserDefault: (projectId: string, cap: number | null, now: number) =>
    sql<{ id: string }>`UPDATE projects SET end_user_budget_credits = ${cap}, updated_at = ${now} WHERE id = ${projectId} RETURNING id`,

  /** A key's window of `period` (none yet: no row). */
  keyWindow: (keyId: string, period: string) => sql<ScopeWindowRow>`SELECT spent, reserved FROM scope_windows WHERE scope = ${keyAccount(keyId)} AND period = ${period}`,

  /** End user `user` of project `projectId`: its override (none: no row) and its window of `period` (none yet: nulls). */
  endUser: (projectId: string, user: string, period: string) =>
    sql<EndUserRow>`SELECT ${projectId} AS project_id, ${user} AS end_user, e.budget_credits, e.tokens_per_minute, e.max_concurrent, e.created_at, e.updated_at, w.spent, w.reserved
      FROM (SELECT 1 AS one) AS one
      LEFT JOIN end_users e ON e.project_id = ${projectId} AND e.end_user = ${user}
      LEFT JOIN scope_windows w ON w.scope = ${endUserAccount(projectId, user)} AND w.period = ${period}`,

  /** Set end user `user`'s override (cap null: no budget at all, whatever the project's default) and its own limits (null: none). */
  putEndUser: (projectId: string, user: string, cap: number | null, limits: UpstreamLimitFields, now: number) =>
    sql`INSERT INTO end_users (project_id, end_user, budget_credits, tokens_per_minute, max_concurrent, created_at, updated_at)
        VALUES (${projectId}, ${user}, ${cap}, ${limits.tokensPerMinute}, ${limits.maxConcurrent}, ${now}, ${now})
        ON CONFLICT (project_id, end_user) DO UPDATE SET budget_credits = excluded.budget_credits,
          tokens_per_minute = excluded.tokens_per_minute, max_concurrent = excluded.max_concurrent, updated_at = excluded.updated_at`,

  /** Remove end user `user`'s override (the project's default applies again): a row back when there was one. */
  deleteEndUser: (projectId: string, user: string) =>
    sql<{ end_user: string }>`DELETE FROM end_users WHERE project_id = ${projectId} AND end_user = ${user} RETURNING end_user`,

  /** Up to `limit` of a project's overrides after `after` (by name), each with its window of `period`. */
  endUsers: (projectId: string, after: string | undefined, limit: number, period: string) =>
    sql<EndUserRow>`SELECT e.project_id, e.end_user, e.budget_credits, e.tokens_per_minute, e.max_concurrent, e.created_at, e.updated_at, w.spent, w.reserved
      FROM (SELECT * FROM end_users WHERE project_id = ${projectId} ${after === undefined ? sql`` : sql`AND end_user > ${after}`} ORDER BY end_user LIMIT ${limit}) e
      LEFT JOIN scope_windows w ON w.scope = ${`end_user:${projectId}/`} || e.end_user AND w.period = ${period}
      ORDER BY e.end_user`,

  endUsersBySpent: endUsersBySpent(sql),

  /** Up to `limit` of a project's keys with a budget after key `after` (by id), each with its window of `period`. */
  keyBudgets: (projectId: string, after: string | undefined, limit: number, period: string) =>
    sql<KeyBudgetRow>`SELECT k.id, k.project_id, k.budget_credits, w.spent, w.reserved
      FROM api_keys k LEFT JOIN scope_windows w ON w.scope = ${keyAccount("")} || k.id AND w.period = ${period}
      WHERE k.project_id = ${projectId} AND k.budget_credits IS NOT NULL ${after === undefined ? sql`` : sql`AND k.id > ${after}`}
      ORDER BY k.id LIMIT ${limit}`
})

/**
 * Up to `limit` of project `projectId`'s end users with a window of `period` (they called, or hold),
 * most spent first, then by name; after `after` when given. An end user's window is named
 * `end_user:<project>/<user>`: the project's are the names between that prefix and the same with '0'
 * (the character after '/'), an index range — compared bytewise, as PostgreSQL's "C" collation does
 * whatever the database's, so the range and the order mean the same on both engines.
 * Cost: SQLite reads the range of the primary key (0.37 ms for a project of 1,000 end users among
 * 200,000 windows); PostgreSQL cannot use the primary key (built in the database's collation) for a
 * "C" comparison and scans scope_windows (31 ms for the same, against 0.6 ms for the range in a
 * database whose collation is already bytewise). An index on (period, scope COLLATE "C") would
 * make it a range there too — an admin read, so not yet worth a write on every new window.
 */
const endUsersBySpent = (sql: SqlClient.SqlClient) => (projectId: string, after: SpentPosition | undefined, limit: number, period: string) => {
  const prefix = endUserAccount(projectId, "")
  const bytewise = sql.onDialectOrElse({ pg: () => sql.literal(`COLLATE "C"`), orElse: () => sql.literal("") })
  const scope = sql`w.scope ${bytewise}`
  const start = after === undefined
    ? sql``
    : sql`AND (w.spent < ${after.spent} OR (w.spent = ${after.spent} AND ${scope} > ${endUserAccount(projectId, after.user)}))`
  return Effect.map(
    sql<Omit<EndUserRow, "project_id" | "end_user"> & { readonly scope: string }>`SELECT w.scope, e.budget_credits, e.tokens_per_minute, e.max_concurrent, e.created_at, e.updated_at, w.spent, w.reserved
      FROM scope_windows w
      LEFT JOIN end_users e ON e.project_id = ${projectId} AND w.scope = ${prefix} || e.end_user
      WHERE w.period = ${period} AND ${scope} > ${prefix} AND ${scope} < ${`end_user:${projectId}0`} ${start}
      ORDER BY w.spent DESC, ${scope} LIMIT ${limit}`,
    (rows): Array<EndUserRow> => rows.map(({ scope, ...row }) => ({ ...row, project_id: projectId, end_user: scope.slice(prefix.length) }))
  )
}

export class ScopeBudgetsRepo extends Effect.Service<ScopeBudgetsRepo>()("tollgate/ScopeBudgetsRepo", {
  effect: Effect.map(SqlClient.SqlClient, makeScopeBudgetsRepo)
}) {}
