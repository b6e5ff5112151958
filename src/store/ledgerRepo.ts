/**
 * The Ledger service's reads (src/services/Ledger.ts): a project's budget window, a receipt, usage.
 * The window is read synchronously on SQLite's own connection when there is one (no statement
 * compiled per call), through SqlClient otherwise (PostgreSQL). The writes are the store port's
 * (src/store/ChatStore.ts over src/store/ledgerStatements.ts).
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Option } from "effect"
import { Sqlite } from "./Database.ts"
import type { Scope } from "./idempotencyStatements.ts"
import { type BudgetWindow, makeLedgerStatements } from "./ledgerStatements.ts"

/** What usage can be broken down by: the route (the model as the caller named it), the key, the end user. */
export type UsageGroup = "model" | "key" | "end_user"

/** One group's sums over a window's receipts (`route` is the group's value: a route, a key id, an end user). */
export interface UsageRow {
  readonly route: string
  readonly requests: number
  readonly credits: number
  readonly input_tokens: number
  readonly cached_input_tokens: number
  readonly output_tokens: number
  readonly reasoning_tokens: number
}

/** The window read on SQLite's connection, synchronously. */
const windowOnSqlite = (db: Context.Tag.Service<typeof Sqlite>["db"]) => {
  // Reads only: the statements need no signer (nothing is settled through this connection here).
  const { windowSync } = makeLedgerStatements(db, {
    keyId: "",
    seal: () => {
      throw new Error("the Ledger service does not settle: settlements go through ChatStore")
    }
  })
  return (projectId: string, period: string): Effect.Effect<BudgetWindow> => Effect.sync(() => windowSync(projectId, period))
}

/** The statements; `window` is a defect on a store failure, the others are run by the service. */
export const makeLedgerRepo = (sql: SqlClient.SqlClient, sqlite: Option.Option<Context.Tag.Service<typeof Sqlite>>) => ({
  /** Project `projectId`'s budget window `period` (zero when it has not opened yet). */
  window: Option.match(sqlite, {
    onSome: ({ db }) => windowOnSqlite(db),
    onNone: () => (projectId: string, period: string): Effect.Effect<BudgetWindow> =>
      Effect.map(
        sql<{ cap: number; spent: number | null; reserved: number | null }>`
          SELECT p.budget_credits AS cap, w.spent AS spent, w.reserved AS reserved
          FROM projects p LEFT JOIN budget_windows w ON w.project_id = p.id AND w.period = ${period}
          WHERE p.id = ${projectId}`.pipe(Effect.orDie),
        ([row]) => ({ period, cap: row?.cap ?? 0, spent: row?.spent ?? 0, reserved: row?.reserved ?? 0 })
      )
  }),

  /** Request `requestId`'s receipt body, in `scope`. */
  receipt: (requestId: string, scope: Scope) =>
    sql<{ body: string }>`SELECT body FROM receipts WHERE request_id = ${requestId}
                          AND project_id = ${scope.projectId} AND environment = ${scope.environment}`,

  /**
   * One tenant scope's receipts of window `period`, summed per group: per route (`model`), per key
   * (the request's key), per end user (the hold's; receipts of calls that named none are left out).
   */
  usage: (scope: Scope, period: string, by: UsageGroup = "model") => {
    const sums = sql.literal(`COUNT(*) AS requests, SUM(r.credits_charged) AS credits,
         SUM(r.input_tokens) AS input_tokens, SUM(r.cached_input_tokens) AS cached_input_tokens,
         SUM(r.output_tokens) AS output_tokens, SUM(r.reasoning_tokens) AS reasoning_tokens`)
    const where = sql`r.project_id = ${scope.projectId} AND r.environment = ${scope.environment} AND r.period = ${period}`
    switch (by) {
      case "model":
        return sql<UsageRow>`SELECT r.route AS route, ${sums} FROM receipts r WHERE ${where} GROUP BY r.route ORDER BY r.route`
      case "key":
        return sql<UsageRow>`SELECT q.key_id AS route, ${sums} FROM receipts r JOIN requests q ON q.id = r.request_id
                             WHERE ${where} GROUP BY q.key_id ORDER BY q.key_id`
      case "end_user":
        return sql<UsageRow>`SELECT h.end_user AS route, ${sums} FROM receipts r JOIN reservations h ON h.request_id = r.request_id
                             WHERE ${where} AND h.end_user IS NOT NULL GROUP BY h.end_user ORDER BY h.end_user`
    }
  }
})

export class LedgerRepo extends Effect.Service<LedgerRepo>()("tollgate/LedgerRepo", {
  effect: Effect.zipWith(SqlClient.SqlClient, Effect.serviceOption(Sqlite), makeLedgerRepo)
}) {}
