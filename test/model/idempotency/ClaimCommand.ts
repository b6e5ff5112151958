/**
 * Claim a key (inside a transaction, as the Gateway does): Claimed, Replay (identical bytes, no new
 * work), Conflict (different payload — nothing changes) or InFlight, exactly as the model says.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { expect } from "vitest"
import * as Idem from "../../../spec/idempotency.ts"
import { IdempotencyStore } from "../../../src/services/IdempotencyStore.ts"
import { nowMillis, run } from "../support/runtime.ts"
import { CLAIM_TTL_MS, checkInvariants, expectedOutcome, FINGERPRINTS, type IdemCommand, type IdemModel, type IdemReal, KEYS, observed, specScope, sweep } from "./model.ts"

export class ClaimCommand implements IdemCommand {
  constructor(readonly scope: number, readonly key: number, readonly fp: number) {}
  check = () => true as const
  async run(m: IdemModel, r: IdemReal): Promise<void> {
    const scope = r.scopes[this.scope]!
    const key = KEYS[this.key]!
    const fp = FINGERPRINTS[this.fp]!
    const requestId = `req_${r.nextId()}`
    const now = await nowMillis(r.rt)
    const outcome = await run(
      r.rt,
      Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(Effect.flatMap(IdempotencyStore, (s) => s.claim(scope, key, fp, requestId, now + CLAIM_TTL_MS)))).pipe(Effect.orDie)
    )
    sweep(m, now)
    const step = Idem.claim(m.state, specScope(scope), key, fp, requestId, now, now + CLAIM_TTL_MS)
    r.coverage.hit("Claim", step.outcome._tag)
    expect(observed(outcome)).toEqual(expectedOutcome(step.outcome))
    m.state = step.state
    if (step.outcome._tag === "Claimed") m.claims.push({ scope: this.scope, key, requestId })
    await checkInvariants(m, r, { key })
  }
  toString = () => `Claim(s${this.scope}, ${JSON.stringify(KEYS[this.key])}, ${FINGERPRINTS[this.fp]})`
}
