/** Time passes (TestClock). */
import { advance } from "../support/runtime.ts"
import { checkInvariants, type RateCommand, type RateModel, type RateReal } from "./model.ts"

export class AdvanceCommand implements RateCommand {
  constructor(readonly millis: number) {}
  check = () => true as const
  async run(m: RateModel, r: RateReal): Promise<void> {
    await advance(r.rt, this.millis)
    r.coverage.hit("Advance")
    checkInvariants(m, r)
  }
  toString = () => `Advance(${this.millis}ms)`
}
