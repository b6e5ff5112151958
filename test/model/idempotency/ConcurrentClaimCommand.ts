/**
 * N calls with the same key race to reserve through the store port (one batch of the worker or
 * several, as the scheduler orders them): the claim itself must be atomic (one INSERT on the unique
 * key, never check-then-insert). Exactly one wins when the key is free; every other one sees the
 * winner in flight (same payload) or a conflict (another one).
 */
import { Effect, Exit } from "effect"
import { expect } from "vitest"
import * as Idem from "../../../spec/idempotency.ts"
import { ChatStore } from "../../../src/store/ChatStore.ts"
import { nowMillis, runExit } from "../support/runtime.ts"
import { CLAIM_TTL_MS, checkInvariants, claimCall, claimOutcomeOf, expectedOutcome, FINGERPRINTS, type IdemCommand, type IdemModel, type IdemReal, KEYS, observed, specScope, sweep } from "./model.ts"

export class ConcurrentClaimCommand implements IdemCommand {
  constructor(readonly scope: number, readonly key: number, readonly fps: ReadonlyArray<number>, readonly opsBeforeYield: number) {}
  check = () => true as const
  async run(m: IdemModel, r: IdemReal): Promise<void> {
    const scope = r.scopes[this.scope]!
    const key = KEYS[this.key]!
    const now = await nowMillis(r.rt)
    const racers = this.fps.map((fp) => ({ fp: FINGERPRINTS[fp]!, requestId: `req_${r.nextId()}` }))
    const calls = racers.map((x) => claimCall(scope, key, x.fp, x.requestId, now))
    const start = (i: number) =>
      runExit(r.rt, Effect.either(Effect.flatMap(ChatStore, (s) => s.reserve(calls[i]!))).pipe(Effect.withMaxOpsBeforeYield(this.opsBeforeYield)))
    const s = r.scheduler
    const all = Promise.all(racers.map((_, i) => (s === undefined ? start(i) : s.schedule(Promise.resolve(i), `claim#${i}`).then(start))))
    const exits = await (s === undefined ? all : s.waitFor(all))
    for (const e of exits) expect(Exit.isSuccess(e), `a racing claim failed: ${String(e)}`).toBe(true)
    const outcomes = exits.map((e) => claimOutcomeOf((e as Exit.Success<Parameters<typeof claimOutcomeOf>[0], never>).value))
    sweep(m, now)
    // Linearize: the winner (if any) first, then everyone else.
    const order = [...racers.keys()].sort((a, b) => Number(outcomes[b]!._tag === "Claimed") - Number(outcomes[a]!._tag === "Claimed"))
    let state = m.state
    for (const i of order) {
      const step = Idem.claim(state, specScope(scope), key, racers[i]!.fp, racers[i]!.requestId, now, now + CLAIM_TTL_MS)
      expect(observed(outcomes[i]!), `racer ${i} of ${racers.length}`).toEqual(expectedOutcome(step.outcome))
      if (step.outcome._tag === "Claimed") {
        m.claims.push({ scope: this.scope, key, requestId: racers[i]!.requestId, open: true })
        r.calls.set(racers[i]!.requestId, calls[i]!)
      }
      state = step.state
    }
    m.state = state
    r.coverage.hit("ConcurrentClaim", outcomes.some((o) => o._tag === "Claimed") ? "OneWinner" : outcomes[0]!._tag)
    await checkInvariants(m, r, { key })
  }
  toString = () => `ConcurrentClaim(s${this.scope}, ${JSON.stringify(KEYS[this.key])}, [${this.fps.map((f) => FINGERPRINTS[f])}], yield/${this.opsBeforeYield})`
}
