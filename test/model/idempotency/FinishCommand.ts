/**
 * The owner's call settles through the store port, storing its response for replay in the settlement
 * transaction; only the owner, only while in flight (a finished result is final, an expired claim is gone).
 */
import { Effect } from "effect"
import * as Idem from "../../../spec/idempotency.ts"
import { ChatStore } from "../../../src/store/ChatStore.ts"
import { settleArgs } from "../../support/portArgs.ts"
import { nowMillis, run } from "../support/runtime.ts"
import { checkInvariants, type IdemCommand, type IdemModel, type IdemReal, RESULT_TTL_MS, specScope, sweep } from "./model.ts"

export class FinishCommand implements IdemCommand {
  constructor(readonly pick: number, readonly status: number, readonly body: string) {}
  check = (m: Readonly<IdemModel>) => m.claims.some((c) => c.open)
  async run(m: IdemModel, r: IdemReal): Promise<void> {
    const open = m.claims.filter((c) => c.open)
    const c = open[this.pick % open.length]!
    const scope = r.scopes[c.scope]!
    const now = await nowMillis(r.rt)
    const call = r.calls.get(c.requestId)!
    await run(r.rt, Effect.flatMap(ChatStore, (s) => s.settle(settleArgs(call, 0, 0, { now, result: { status: this.status, body: this.body }, ttlMs: RESULT_TTL_MS }))))
    c.open = false
    sweep(m, now)
    const step = Idem.finish(m.state, specScope(scope), c.key, c.requestId, { status: this.status, body: this.body }, now, RESULT_TTL_MS)
    r.coverage.hit("Finish", step.outcome._tag)
    m.state = step.state
    await checkInvariants(m, r, { key: c.key })
  }
  toString = () => `Finish(#${this.pick}, ${this.status}, ${JSON.stringify(this.body)})`
}
