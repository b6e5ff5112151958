/**
 * N reservations race on one window through the store port: sent from racing fibers, they reach the
 * store worker in one batch or spread over several (the scheduled property's scheduler picks the
 * order they start in, and a tiny fiber yield budget lets them interleave), where each is sized and
 * guarded in its own savepoint of a group commit.
 *
 * Linearizable iff the admitted ones fit together and each refused one would not fit on top of all
 * admitted ones: then "admitted first, refused after" is a serial order the model agrees with.
 */
import { Effect, Exit } from "effect"
import { expect } from "vitest"
import * as Ledger from "../../../spec/ledger.ts"
import { ChatStore } from "../../../src/store/ChatStore.ts"
import { runExit } from "../support/runtime.ts"
import { checkInvariants, type LedgerCommand, type LedgerModel, type LedgerReal, PERIODS, reservationOf } from "./model.ts"

export class ConcurrentReserveCommand implements LedgerCommand {
  constructor(readonly project: number, readonly period: number, readonly amounts: ReadonlyArray<number>, readonly opsBeforeYield: number) {}
  check = () => true as const
  async run(m: LedgerModel, r: LedgerReal): Promise<void> {
    const args = this.amounts.map((a) => reservationOf(r, r.projects[this.project]!, PERIODS[this.period]!, a))
    const holds = args.map((a, i) => ({ ...a.hold, amount: this.amounts[i]! }))
    const start = (i: number) =>
      runExit(r.rt, Effect.flatMap(ChatStore, (s) => s.reserve(args[i]!)).pipe(Effect.withMaxOpsBeforeYield(this.opsBeforeYield)))
    const s = r.scheduler
    const all = Promise.all(holds.map((_, i) => (s === undefined ? start(i) : s.schedule(Promise.resolve(i), `reserve#${i}`).then(start))))
    // The racing starts use their own scheduler: inside scheduledModelRun this command already runs
    // as a task of the run's scheduler, which cannot release tasks scheduled from within one of its
    // own tasks (fast-check 3.23's waitOne awaits the running task), so a second one drives them.
    const exits = await (s === undefined ? all : s.waitFor(all))
    for (const e of exits) {
      expect(Exit.isSuccess(e) || (e.cause._tag === "Fail" && e.cause.error._tag === "OverBudget"), String(e)).toBe(true)
    }
    const admitted = holds.filter((_, i) => Exit.isSuccess(exits[i]!))
    const refused = holds.filter((_, i) => !Exit.isSuccess(exits[i]!))
    let state = m.state
    for (const h of [...admitted, ...refused]) {
      const step = Ledger.reserve(state, h.reservationId, h.projectId, h.period, h.amount)
      const wasAdmitted = admitted.includes(h)
      expect(step.outcome._tag, `no serial order explains ${wasAdmitted ? "admitting" : "refusing"} ${h.amount} (admitted ${admitted.map((x) => x.amount)}, refused ${refused.map((x) => x.amount)})`).toBe(
        wasAdmitted ? "Reserved" : "BudgetExceeded"
      )
      if (wasAdmitted) r.holds.set(h.reservationId, args[holds.indexOf(h)]!)
      state = step.state
    }
    m.state = state
    r.coverage.hit("ConcurrentReserve", refused.length === 0 ? "AllAdmitted" : admitted.length === 0 ? "AllRefused" : "Mixed")
    await checkInvariants(m, r)
  }
  toString = () => `ConcurrentReserve(p${this.project}, ${PERIODS[this.period]}, [${this.amounts}], yield/${this.opsBeforeYield})`
}
