/** Time passes (TestClock): grace periods run out, cached keys go stale. */
import { advance } from "../support/runtime.ts"
import { checkInvariants, type KeysCommand, type KeysModel, type KeysReal } from "./model.ts"

export class AdvanceCommand implements KeysCommand {
  constructor(readonly millis: number) {}
  check = () => true as const
  async run(m: KeysModel, r: KeysReal): Promise<void> {
    await advance(r.rt, this.millis)
    r.coverage.hit("Advance")
    await checkInvariants(m, r)
  }
  toString = () => `Advance(${this.millis}ms)`
}
