/** An operator changes a project's budget cap (PATCH /admin/v1/projects/{id}), raising or lowering it. */
import { Effect } from "effect"
import { expect } from "vitest"
import * as Ledger from "../../../spec/ledger.ts"
import { Projects } from "../../../src/services/Projects.ts"
import { run } from "../support/runtime.ts"
import { checkInvariants, type LedgerCommand, type LedgerModel, type LedgerReal, PERIODS } from "./model.ts"

export class SetCapCommand implements LedgerCommand {
  constructor(readonly project: number, readonly cap: number) {}
  check = () => true as const
  async run(m: LedgerModel, r: LedgerReal): Promise<void> {
    const project = r.projects[this.project]!
    const updated = await run(r.rt, Effect.flatMap(Projects, (p) => p.update(project, { budget_credits: this.cap })))
    // The real cap is the project's standing cap for every window; the model's SetCap from the first
    // window on is the same thing for the windows this model uses.
    const step = Ledger.setCap(m.state, project, this.cap, PERIODS[0])
    m.state = step.state
    expect(updated.budget_credits).toBe(this.cap)
    r.coverage.hit("SetCap", step.outcome._tag)
    await checkInvariants(m, r)
  }
  toString = () => `SetCap(p${this.project}, ${this.cap})`
}
