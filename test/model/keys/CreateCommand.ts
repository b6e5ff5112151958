/** Issue a key for a project and environment: active at once. */
import { Effect } from "effect"
import { expect } from "vitest"
import * as Keys from "../../../spec/keys.ts"
import { KeyRegistry } from "../../../src/services/KeyRegistry.ts"
import { nowMillis, run } from "../support/runtime.ts"
import { checkInvariants, ENVIRONMENTS, type KeysCommand, type KeysModel, type KeysReal } from "./model.ts"

export class CreateCommand implements KeysCommand {
  constructor(readonly project: number, readonly environment: number) {}
  check = () => true as const
  async run(m: KeysModel, r: KeysReal): Promise<void> {
    const now = await nowMillis(r.rt)
    const env = ENVIRONMENTS[this.environment]!
    const issued = await run(r.rt, Effect.orDie(Effect.flatMap(KeyRegistry, (k) => k.create(r.projects[this.project]!, env))))
    const step = Keys.create(m.state, issued.id, issued.project_id, issued.environment, now)
    r.coverage.hit("Create", step.outcome._tag)
    expect(step.outcome._tag).toBe("Created")
    expect([issued.project_id, issued.environment]).toEqual([r.projects[this.project], env])
    m.state = step.state
    m.ids.push(issued.id)
    r.tokens.set(issued.id, issued.secret)
    await checkInvariants(m, r, issued.id)
  }
  toString = () => `Create(p${this.project}, ${ENVIRONMENTS[this.environment]})`
}
