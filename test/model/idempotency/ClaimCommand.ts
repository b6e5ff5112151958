/**
 * A call with an idempotency key reserves through the store port (the claim first, in the
 * reservation transaction): Claimed, Replay (identical bytes, no new work), Conflict (different
 * payload — nothing changes) or InFlight, exactly as the model says.
 */
import { Effect } from "effect"
import { expect } from "vitest"
import * as Idem from "../../../spec/idempotency.ts"
import { ChatStore } from "../../../src/store/ChatStore.ts"
import { nowMillis, run } from "../support/runtime.ts"
import { CLAIM_TTL_MS, checkInvariants, claimCall, claimOutcomeOf, expectedOutcome, FINGERPRINTS, type IdemCommand, type IdemModel, type IdemReal, KEYS, observed, specScope, sweep } from "./model.ts"

export class ClaimCommand implements IdemCommand {
  constructor(readonly scope: number, readonly key: number, readonly fp: number) {}
  check = () => true as const
  async run(m: IdemModel, r: IdemReal): Promise<void> {
    const scope = r.scopes[this.scope]!
    const key = KEYS[this.key]!
    const fp = FINGERPRINTS[this.fp]!
    const requestId = `req_${r.nextId()}`
    const now = await nowMillis(r.rt)
    const call = claimCall(scope, key, fp, requestId, now)
    const outcome = claimOutcomeOf(await run(r.rt, Effect.either(Effect.flatMap(ChatStore, (s) => s.reserve(call)))))
    sweep(m, now)
    const step = Idem.claim(m.state, specScope(scope), key, fp, requestId, now, now + CLAIM_TTL_MS)
    r.coverage.hit("Claim", step.outcome._tag)
    expect(observed(outcome)).toEqual(expectedOutcome(step.outcome))
    m.state = step.state
    if (step.outcome._tag === "Claimed") {
      m.claims.push({ scope: this.scope, key, requestId, open: true })
      r.calls.set(requestId, call)
    }
    await checkInvariants(m, r, { key })
  }
  toString = () => `Claim(s${this.scope}, ${JSON.stringify(KEYS[this.key])}, ${FINGERPRINTS[this.fp]})`
}
