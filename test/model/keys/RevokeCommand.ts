/** Revoke: dead at once on this instance (active or in grace), never valid again. Idempotent for the admin. */
import { Effect } from "effect"
import { expect } from "vitest"
import * as Keys from "../../../spec/keys.ts"
import { KeyRegistry } from "../../../src/services/KeyRegistry.ts"
import { run } from "../support/runtime.ts"
import { checkInvariants, type KeysCommand, type KeysModel, type KeysReal } from "./model.ts"

export class RevokeCommand implements KeysCommand {
  constructor(readonly pick: number) {}
  check = (m: Readonly<KeysModel>) => m.ids.length > 0
  async run(m: KeysModel, r: KeysReal): Promise<void> {
    const id = m.ids[this.pick % m.ids.length]!
    const info = await run(r.rt, Effect.orDie(Effect.flatMap(KeyRegistry, (k) => k.revoke(id))))
    const step = Keys.revoke(m.state, id)
    r.coverage.hit("Revoke", step.outcome._tag)
    expect(info.status).toBe("revoked")
    m.state = step.state
    await checkInvariants(m, r, id)
  }
  toString = () => `Revoke(#${this.pick})`
}
