/** The owner stores its response; only the owner, only while in flight (a finished result is final). */
import { Effect } from "effect"
import * as Idem from "../../../spec/idempotency.ts"
import { IdempotencyStore } from "../../../src/services/IdempotencyStore.ts"
import { nowMillis, run } from "../support/runtime.ts"
import { checkInvariants, type IdemCommand, type IdemModel, type IdemReal, RESULT_TTL_MS, specScope, sweep } from "./model.ts"

const encoder = new TextEncoder()

export class FinishCommand implements IdemCommand {
  constructor(readonly pick: number, readonly status: number, readonly body: string) {}
  check = (m: Readonly<IdemModel>) => m.claims.length > 0
  async run(m: IdemModel, r: IdemReal): Promise<void> {
    const c = m.claims[this.pick % m.claims.length]!
    const scope = r.scopes[c.scope]!
    const now = await nowMillis(r.rt)
    await run(r.rt, Effect.flatMap(IdempotencyStore, (s) => s.finish(scope, c.key, c.requestId, { status: this.status, contentType: "application/json", body: encoder.encode(this.body) }, RESULT_TTL_MS)))
    sweep(m, now)
    const step = Idem.finish(m.state, specScope(scope), c.key, c.requestId, { status: this.status, body: this.body }, now, RESULT_TTL_MS)
    r.coverage.hit("Finish", step.outcome._tag)
    m.state = step.state
    await checkInvariants(m, r, { key: c.key })
  }
  toString = () => `Finish(#${this.pick}, ${this.status}, ${JSON.stringify(this.body)})`
}
