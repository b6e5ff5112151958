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

/** One route's sums over a window's receipts. */
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

  /** One tenant scope's receipts of window `period`, summed per route. */
  usage: (scope: Scope, period: string) =>
    sql<UsageRow>`SELECT route, COUNT(*) AS requests, SUM(credits_charged) AS credits,
         SUM(input_tokens) AS input_tokens, SUM(cached_input_tokens) AS cached_input_tokens,
         SUM(output_tokens) AS output_tokens, SUM(reasoning_tokens) AS reasoning_tokens
       FROM receipts WHERE project_id = ${scope.projectId} AND environment = ${scope.environment} AND period = ${period}
       GROUP BY route ORDER BY route`
})

export class LedgerRepo extends Effect.Service<LedgerRepo>()("tollgate/LedgerRepo", {
  effect: Effect.zipWith(SqlClient.SqlClient, Effect.serviceOption(Sqlite), makeLedgerRepo)
}) {}
