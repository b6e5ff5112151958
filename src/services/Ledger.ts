/**
 * The budget ledger's reads (docs/contract.md, "Credits"): a project's window, a receipt, usage.
 * Its writes — reserve, settle, void, extend, expire — are the store port's transactions
 * (src/store/ChatStore.ts over src/store/ledgerStatements.ts), which the Gateway and the recovery
 * sweep call: one code path, the one the model tests drive.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { periodOf } from "../../spec/ledger.ts"
import type { Receipt } from "../../spec/receipt.ts"
import { RequestNotFound } from "../domain/errors.ts"
import { Sqlite } from "../store/Database.ts"
import type { Scope } from "../store/idempotencyStatements.ts"
import { type BudgetWindow, makeLedgerStatements } from "../store/ledgerStatements.ts"

export { periodOf }

export type { BudgetWindow, Hold, Sealer, Settlement } from "../store/ledgerStatements.ts"

export class Ledger extends Effect.Service<Ledger>()("tollgate/Ledger", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const { db } = yield* Sqlite
    // Reads only: the statements need no signer (nothing is settled through this connection here).
    const { windowSync } = makeLedgerStatements(db, {
      keyId: "",
      seal: () => {
        throw new Error("the Ledger service does not settle: settlements go through ChatStore")
      }
    })
    const window = (projectId: string, period: string): Effect.Effect<BudgetWindow> => Effect.sync(() => windowSync(projectId, period))

    const receipt = (requestId: string, scope: Scope): Effect.Effect<Receipt, RequestNotFound> =>
      Effect.flatMap(
        sql<{ body: string }>`SELECT body FROM receipts WHERE request_id = ${requestId}
                              AND project_id = ${scope.projectId} AND environment = ${scope.environment}`.pipe(Effect.orDie),
        (rows) =>
          rows[0] === undefined
            ? Effect.fail(new RequestNotFound({ message: `No settled request with id ${requestId} in this project and environment.` }))
            : Effect.succeed(JSON.parse(rows[0].body) as Receipt)
      )

    /** Usage of one tenant scope in one window: every figure is a sum over that window's receipts. */
    const usage = (scope: Scope, period: string) =>
      Effect.gen(function* () {
        const rows = yield* sql<{
          route: string
          requests: number
          credits: number
          input_tokens: number
          cached_input_tokens: number
          output_tokens: number
          reasoning_tokens: number
        }>`SELECT route, COUNT(*) AS requests, SUM(credits_charged) AS credits,
             SUM(input_tokens) AS input_tokens, SUM(cached_input_tokens) AS cached_input_tokens,
             SUM(output_tokens) AS output_tokens, SUM(reasoning_tokens) AS reasoning_tokens
           FROM receipts WHERE project_id = ${scope.projectId} AND environment = ${scope.environment} AND period = ${period}
           GROUP BY route ORDER BY route`
        return rows.map((r) => ({
          model: r.route,
          requests: Number(r.requests),
          credits: Number(r.credits),
          tokens: {
            input: Number(r.input_tokens),
            cached_input: Number(r.cached_input_tokens),
            output: Number(r.output_tokens),
            reasoning: Number(r.reasoning_tokens)
          }
        }))
      }).pipe(Effect.orDie)

    return { window, windowSync, receipt, usage, periodOf } as const
  })
}) {}
