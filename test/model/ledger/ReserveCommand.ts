/** Reserve a worst case: admitted iff spent + reserved + amount ≤ cap (402 otherwise, nothing changes). */
import { Effect, Exit } from "effect"
import { SqlClient } from "@effect/sql"
import { expect } from "vitest"
import * as Ledger from "../../../spec/ledger.ts"
import { Ledger as LedgerService } from "../../../src/services/Ledger.ts"
import { runExit } from "../support/runtime.ts"
import { checkInvariants, holdOf, type LedgerCommand, type LedgerModel, type LedgerReal, PERIODS } from "./model.ts"

export class ReserveCommand implements LedgerCommand {
  constructor(readonly project: number, readonly period: number, readonly amount: number) {}
  check = () => true as const
  async run(m: LedgerModel, r: LedgerReal): Promise<void> {
    const hold = holdOf(r, r.projects[this.project]!, PERIODS[this.period]!, this.amount)
    // As the Gateway does: the reservation runs inside the claim transaction.
    const exit = await runExit(
      r.rt,
      Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(Effect.flatMap(LedgerService, (l) => l.reserve(hold)))).pipe(Effect.catchTag("SqlError", Effect.die))
    )
    const step = Ledger.reserve(m.state, hold.reservationId, hold.projectId, hold.period, hold.amount)
    r.coverage.hit("Reserve", step.outcome._tag)
    if (step.outcome._tag === "Reserved") {
      expect(Exit.isSuccess(exit), `reserve ${this.amount} should be admitted: ${String(exit)}`).toBe(true)
      r.holds.set(hold.reservationId, hold)
    } else {
      expect(step.outcome._tag).toBe("BudgetExceeded")
      expect(Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error._tag === "BudgetExceeded", `reserve ${this.amount} should be refused: ${String(exit)}`).toBe(true)
    }
    m.state = step.state
    await checkInvariants(m, r)
  }
  toString = () => `Reserve(p${this.project}, ${PERIODS[this.period]}, ${this.amount})`
}
