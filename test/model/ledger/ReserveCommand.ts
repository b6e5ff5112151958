/**
 * Reserve a worst case through the store port, as the Gateway does (sized on the window read in the
 * reservation transaction, then the guarded UPDATE): admitted iff spent + reserved + amount ≤ cap
 * (402 otherwise, nothing changes — no hold, no request row).
 */
import { Effect, Either } from "effect"
import { expect } from "vitest"
import * as Ledger from "../../../spec/ledger.ts"
import { ChatStore } from "../../../src/store/ChatStore.ts"
import { run } from "../support/runtime.ts"
import { checkInvariants, type LedgerCommand, type LedgerModel, type LedgerReal, PERIODS, reservationOf } from "./model.ts"

export class ReserveCommand implements LedgerCommand {
  constructor(readonly project: number, readonly period: number, readonly amount: number) {}
  check = () => true as const
  async run(m: LedgerModel, r: LedgerReal): Promise<void> {
    const args = reservationOf(r, r.projects[this.project]!, PERIODS[this.period]!, this.amount)
    const result = await run(r.rt, Effect.either(Effect.flatMap(ChatStore, (s) => s.reserve(args))))
    const step = Ledger.reserve(m.state, args.hold.reservationId, args.hold.projectId, args.hold.period, this.amount)
    r.coverage.hit("Reserve", step.outcome._tag)
    if (step.outcome._tag === "Reserved") {
      expect(result, `reserve ${this.amount} should be admitted`).toEqual(Either.right({ outputCap: 1, reservation: this.amount }))
      r.holds.set(args.hold.reservationId, args)
    } else {
      expect(step.outcome._tag).toBe("BudgetExceeded")
      expect(Either.isLeft(result) && result.left._tag === "OverBudget", `reserve ${this.amount} should be refused: ${JSON.stringify(result)}`).toBe(true)
    }
    m.state = step.state
    await checkInvariants(m, r)
  }
  toString = () => `Reserve(p${this.project}, ${PERIODS[this.period]}, ${this.amount})`
}
