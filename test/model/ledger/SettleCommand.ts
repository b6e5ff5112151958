/**
 * Settle a reservation: post the charge (clamped to the hold, as pricing.settledCharge does), release
 * the rest, write exactly one receipt — at most once. Settling a resolved hold is a bug the service
 * refuses loudly (a defect) and that changes nothing.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Exit } from "effect"
import { expect } from "vitest"
import * as Ledger from "../../../spec/ledger.ts"
import { Ledger as LedgerService, type Settlement } from "../../../src/services/Ledger.ts"
import { runExit } from "../support/runtime.ts"
import { checkInvariants, type LedgerCommand, type LedgerModel, type LedgerReal, reservationIds } from "./model.ts"

export class SettleCommand implements LedgerCommand {
  constructor(readonly pick: number, readonly charge: number) {}
  check = (m: Readonly<LedgerModel>) => m.state.reservations.size > 0
  async run(m: LedgerModel, r: LedgerReal): Promise<void> {
    const ids = reservationIds(m)
    const id = ids[this.pick % ids.length]!
    const hold = r.holds.get(id)!
    const settlement: Settlement = {
      hold,
      receiptId: `rcpt_${r.nextId()}`,
      organization: "org_model",
      environment: "development",
      model: "m",
      route: "m",
      rateCardVersion: "rc_model",
      tokens: { input: this.charge, cached_input: 0, output: 0, reasoning: 0 },
      usageSource: "reported",
      charge: this.charge,
      verification: { state: "verified", checks: ["route", "schema", "budget"], failed_checks: [] }
    }
    const exit = await runExit(r.rt, Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(Effect.flatMap(LedgerService, (l) => l.settle(settlement)))).pipe(Effect.catchTag("SqlError", Effect.die)))
    const held = m.state.reservations.get(id)!
    const step = Ledger.settle(m.state, id, Math.min(this.charge, held.amount))
    r.coverage.hit("Settle", step.outcome._tag === "Settled" ? (this.charge > held.amount ? "SettledClamped" : "Settled") : step.outcome._tag)
    if (step.outcome._tag === "Settled") {
      if (!Exit.isSuccess(exit)) return expect.fail(`settle ${id} should succeed: ${String(exit)}`)
      const receipt = exit.value
      expect([receipt.credits_charged, receipt.credits_reserved]).toEqual([step.outcome.charge, held.amount])
    } else {
      expect(step.outcome._tag).toBe("AlreadyResolved")
      expect(Exit.isFailure(exit) && exit.cause._tag === "Die", `settling resolved ${id} must be refused: ${String(exit)}`).toBe(true)
    }
    m.state = step.state
    await checkInvariants(m, r)
  }
  toString = () => `Settle(#${this.pick}, ${this.charge})`
}
