/** Rotate: the new key works at once, the old one until now + grace (exclusive); only an active key rotates. */
import { Effect, Exit } from "effect"
import { expect } from "vitest"
import * as Keys from "../../../spec/keys.ts"
import { KeyRegistry } from "../../../src/services/KeyRegistry.ts"
import { nowMillis, runExit } from "../support/runtime.ts"
import { checkInvariants, type KeysCommand, type KeysModel, type KeysReal } from "./model.ts"

export class RotateCommand implements KeysCommand {
  constructor(readonly pick: number, readonly graceSeconds: number) {}
  check = (m: Readonly<KeysModel>) => m.ids.length > 0
  async run(m: KeysModel, r: KeysReal): Promise<void> {
    const id = m.ids[this.pick % m.ids.length]!
    const now = await nowMillis(r.rt)
    const exit = await runExit(r.rt, Effect.flatMap(KeyRegistry, (k) => k.rotate(id, this.graceSeconds)))
    // A key past its grace is "expired" to the registry and to the model alike (rotated, no longer valid).
    const newId = Exit.isSuccess(exit) ? exit.value.id : "key_never"
    const step = Keys.rotate(m.state, id, newId, now, this.graceSeconds)
    r.coverage.hit("Rotate", step.outcome._tag)
    if (step.outcome._tag === "Rotated") {
      if (!Exit.isSuccess(exit)) return expect.fail(`rotate ${id}: ${String(exit)}`)
      const v = exit.value
      expect([v.replaces, Date.parse(v.old_key_expires_at)]).toEqual([id, step.outcome.oldKeyExpiresAtMillis])
      m.ids.push(v.id)
      r.tokens.set(v.id, v.secret)
    } else {
      expect(Exit.isFailure(exit) && exit.cause._tag === "Fail" && ["AdminConflict", "InvalidRequest"].includes(exit.cause.error._tag), `rotate ${id} (${step.outcome._tag}): ${String(exit)}`).toBe(true)
    }
    m.state = step.state
    await checkInvariants(m, r, id)
  }
  toString = () => `Rotate(#${this.pick}, grace ${this.graceSeconds}s)`
}
