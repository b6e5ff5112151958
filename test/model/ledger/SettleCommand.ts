/**
 * Settle a reservation through the store port (charge, signed receipt, request completed, in one
 * transaction): post the charge (clamped to the hold, as pricing.settledCharge does), release the
 * rest, write exactly one receipt — at most once. Settling a resolved hold is a bug the store refuses
 * loudly (a defect) and that changes nothing.
 */
import { Effect, Exit } from "effect"
import { expect } from "vitest"
import * as Ledger from "../../../spec/ledger.ts"
import { ChatStore } from "../../../src/store/ChatStore.ts"
import { settleArgs } from "../../support/portArgs.ts"
import { runExit } from "../support/runtime.ts"
import { checkInvariants, type LedgerCommand, type LedgerModel, type LedgerReal, reservationIds } from "./model.ts"

export class SettleCommand implements LedgerCommand {
  constructor(readonly pick: number, readonly charge: number) {}
  check = (m: Readonly<LedgerModel>) => m.state.reservations.size > 0
  async run(m: LedgerModel, r: LedgerReal): Promise<void> {
    const ids = reservationIds(m)
    const id = ids[this.pick % ids.length]!
    const held = m.state.reservations.get(id)!
    const args = settleArgs(r.holds.get(id)!, held.amount, this.charge, { now: Date.now() })
    const exit = await runExit(r.rt, Effect.flatMap(ChatStore, (s) => s.settle(args)))
    const step = Ledger.settle(m.state, id, Math.min(this.charge, held.amount))
    r.coverage.hit("Settle", step.outcome._tag === "Settled" ? (this.charge > held.amount ? "SettledClamped" : "Settled") : step.outcome._tag)
    if (step.outcome._tag === "Settled") {
      expect(Exit.isSuccess(exit), `settle ${id} should succeed: ${String(exit)}`).toBe(true)
    } else {
      expect(step.outcome._tag).toBe("AlreadyResolved")
      expect(Exit.isFailure(exit) && exit.cause._tag === "Die", `settling resolved ${id} must be refused: ${String(exit)}`).toBe(true)
    }
    m.state = step.state
    await checkInvariants(m, r)
  }
  toString = () => `Settle(#${this.pick}, ${this.charge})`
}
