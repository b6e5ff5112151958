/**
 * A call that charged nothing is abandoned through the store port, which frees its key — only the
 * owner's in-flight claim, never a finished one; abandoning twice changes nothing.
 */
import { Effect } from "effect"
import * as Idem from "../../../spec/idempotency.ts"
import { ChatStore } from "../../../src/store/ChatStore.ts"
import { abandonArgs } from "../../support/portArgs.ts"
import { nowMillis, run } from "../support/runtime.ts"
import { checkInvariants, type IdemCommand, type IdemModel, type IdemReal, specScope, sweep } from "./model.ts"

export class ReleaseCommand implements IdemCommand {
  constructor(readonly pick: number) {}
  check = (m: Readonly<IdemModel>) => m.claims.length > 0
  async run(m: IdemModel, r: IdemReal): Promise<void> {
    const c = m.claims[this.pick % m.claims.length]!
    const scope = r.scopes[c.scope]!
    const now = await nowMillis(r.rt)
    await run(r.rt, Effect.flatMap(ChatStore, (s) => s.abandon(abandonArgs(r.calls.get(c.requestId)!, { now }))))
    c.open = false
    sweep(m, now)
    const step = Idem.release(m.state, specScope(scope), c.key, c.requestId)
    r.coverage.hit("Release", step.outcome._tag)
    m.state = step.state
    await checkInvariants(m, r, { key: c.key })
  }
  toString = () => `Release(#${this.pick})`
}
