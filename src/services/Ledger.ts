/**
 * The budget ledger's reads (docs/contract.md, "Credits"): a project's window, a receipt, usage.
 * Its writes — reserve, settle, void, extend, expire — are the store port's transactions
 * (src/store/ChatStore.ts over src/store/ledgerStatements.ts), which the Gateway and the recovery
 * sweep call: one code path, the one the model tests drive.
 */
import { Effect } from "effect"
import { periodOf } from "../../spec/ledger.ts"
import type { Receipt } from "../../spec/receipt.ts"
import { RequestNotFound } from "../domain/errors.ts"
import type { Scope } from "../store/idempotencyStatements.ts"
import { LedgerRepo, type UsageGroup } from "../store/ledgerRepo.ts"

export { periodOf }

export type { BudgetWindow, Hold, Sealer, Settlement } from "../store/ledgerStatements.ts"

export class Ledger extends Effect.Service<Ledger>()("tollgate/Ledger", {
  effect: Effect.gen(function* () {
    const repo = yield* LedgerRepo
    const window = repo.window

    const receipt = (requestId: string, scope: Scope): Effect.Effect<Receipt, RequestNotFound> =>
      Effect.flatMap(
        repo.receipt(requestId, scope).pipe(Effect.orDie),
        (rows) =>
          rows[0] === undefined
            ? Effect.fail(new RequestNotFound({ message: `No settled request with id ${requestId} in this project and environment.` }))
            : Effect.succeed(JSON.parse(rows[0].body) as Receipt)
      )

    /** Usage of one tenant scope in one window: every figure is a sum over that window's receipts. */
    const usage = (scope: Scope, period: string, by: UsageGroup = "model") =>
      Effect.gen(function* () {
        const rows = yield* repo.usage(scope, period, by)
        return rows.map((r) => ({
          group: r.route,
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

    return { window, receipt, usage, periodOf } as const
  }),
  dependencies: [LedgerRepo.Default]
}) {}
