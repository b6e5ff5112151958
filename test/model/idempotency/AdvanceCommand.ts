/** Time passes (TestClock): in-flight claims pass their deadline, finished records their TTL. */
import { advance } from "../support/runtime.ts"
import { checkInvariants, type IdemCommand, type IdemModel, type IdemReal } from "./model.ts"

export class AdvanceCommand implements IdemCommand {
  constructor(readonly millis: number) {}
  check = () => true as const
  async run(m: IdemModel, r: IdemReal): Promise<void> {
    await advance(r.rt, this.millis)
    r.coverage.hit("Advance")
    await checkInvariants(m, r)
  }
  toString = () => `Advance(${this.millis}ms)`
}
