/**
 * The budget ledger's reads (docs/contract.md, "Credits"): a project's window, a receipt, usage.
 * Its writes — reserve, settle, void, extend, expire — are the store port's transactions
 * (src/store/ChatStore.ts over src/store/ledgerStatements.ts), which the Gateway and the recovery
 * sweep call: one code path, the one the model tests drive.
 */
import { Effect } from "effect"
import { periodOf } from "../../spec/ledger.ts"
import { type BudgetPeriod, DEFAULT_BUDGET_PERIOD, DEFAULT_TIME_ZONE, isBudgetPeriod, isWindowLabel, LABEL_FORM, windowAt } from "../../spec/periods.ts"
import type { Receipt } from "../../spec/receipt.ts"
import { InvalidRequest, RequestNotFound } from "../domain/errors.ts"
import type { Scope } from "../store/idempotencyStatements.ts"
import { LedgerRepo, type UsageGroup } from "../store/ledgerRepo.ts"

export { periodOf }

/** A project's period and zone as the admin API and the principal carry them (absent: month in UTC). */
export interface PeriodOf {
  readonly budgetPeriod?: BudgetPeriod | undefined
  readonly timeZone?: string | undefined
}

/** The project's settings as a `PeriodOf` (a stored project row or its admin answer). */
export const periodSettings = (p: { readonly budget_period: string; readonly time_zone: string }): PeriodOf => ({
  budgetPeriod: isBudgetPeriod(p.budget_period) ? p.budget_period : DEFAULT_BUDGET_PERIOD,
  timeZone: p.time_zone
})

/**
 * A window a caller names (`?period=`), checked against the project's kind: a 400 naming `period`
 * unless it is a label of that kind (spec/periods.ts), else the label.
 */
export const windowParam = (p: PeriodOf, period: string): Effect.Effect<string, InvalidRequest> => {
  const kind = p.budgetPeriod ?? DEFAULT_BUDGET_PERIOD
  return isWindowLabel(kind, period)
    ? Effect.succeed(period)
    : Effect.fail(new InvalidRequest({ message: `period must be a window of the project's ${kind} budget period, written ${LABEL_FORM[kind]}.`, param: "period" }))
}

/**
 * The window a call starting at `millis` belongs to: its project's budget period in its time zone
 * (spec/periods.ts); month in UTC — every project's until migration 0019 — is the ledger's `periodOf`.
 */
export const windowOfCall = (p: PeriodOf, millis: number): string => {
  const kind = p.budgetPeriod ?? DEFAULT_BUDGET_PERIOD
  const zone = p.timeZone ?? DEFAULT_TIME_ZONE
  return kind === "month" && zone === "UTC" ? periodOf(millis) : windowAt(kind, zone, millis)
}

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

    return { window, scopeWindows: repo.scopeWindows, receipt, usage, periodOf } as const
  }),
  dependencies: [LedgerRepo.Default]
}) {}
