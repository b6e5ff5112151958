/**
 * KeyRegistry model run: the real registry (SQLite, TestClock, its 1 s key cache included) against
 * spec/keys.ts. After every command every key issued in the run is presented — with its secret, with
 * a forged secret, and for the wrong environment — and must authenticate exactly when the model says
 * Valid, as its own project and environment; its admin status must match the model's.
 */
import { Effect, Exit } from "effect"
import type fc from "fast-check"
import { expect } from "vitest"
import * as Keys from "../../../spec/keys.ts"
import { formatKey, newSecret } from "../../../src/domain/apiKey.ts"
import type { Environment } from "../../../src/domain/ids.ts"
import { KeyRegistry } from "../../../src/services/KeyRegistry.ts"
import type { Coverage } from "../support/coverage.ts"
import { nowMillis, run, type ServicesRuntime } from "../support/runtime.ts"

export const ENVIRONMENTS: ReadonlyArray<Environment> = ["development", "staging", "production"]

export interface KeysModel {
  state: Keys.KeysState
  /** Key ids in issue order (commands pick among them by index). */
  readonly ids: Array<string>
}

export interface KeysReal {
  readonly rt: ServicesRuntime
  readonly coverage: Coverage
  readonly projects: ReadonlyArray<string>
  /** The full token of each issued key, shown once by the registry and kept here. */
  readonly tokens: Map<string, string>
}

export type KeysCommand = fc.AsyncCommand<KeysModel, KeysReal>

const statusOf = (k: Keys.ApiKey, now: number): string =>
  k.status === "rotated" ? (Keys.authenticate({ keys: new Map([[k.id, k]]) }, k.id, now)._tag === "Valid" ? "rotated" : "expired") : k.status

/**
 * Every key's real token must authenticate exactly as the model says, and its admin view match. The
 * forged-secret and wrong-environment probes (refused whatever the key's state) are made for the
 * key the command touched, or for every key when `focus` is absent.
 */
export const checkInvariants = async (m: KeysModel, r: KeysReal, focus?: string): Promise<void> => {
  const now = await nowMillis(r.rt)
  const probes = m.ids.map((id) => {
    const k = m.state.keys.get(id)!
    const other = ENVIRONMENTS.find((e) => e !== k.environment)!
    const good = r.tokens.get(id)!
    const bad = focus === undefined || focus === id ? [formatKey(id, k.environment as Environment, newSecret()), formatKey(id, other, good.split("_")[3]!.slice(0, 32))] : []
    return { id, good, bad }
  })
  const results = await run(
    r.rt,
    Effect.flatMap(KeyRegistry, (reg) =>
      Effect.forEach(probes, (p) =>
        Effect.all({
          good: Effect.exit(reg.authenticate(`Bearer ${p.good}`)),
          bad: Effect.forEach(p.bad, (token) => Effect.exit(reg.authenticate(`Bearer ${token}`))),
          info: Effect.orDie(reg.info(p.id))
        })
      )
    )
  )
  probes.forEach((p, i) => {
    const res = results[i]!
    const want = Keys.authenticate(m.state, p.id, now)
    const key = m.state.keys.get(p.id)!
    if (want._tag === "Valid") {
      expect(Exit.isSuccess(res.good) ? { keyId: res.good.value.keyId, projectId: res.good.value.projectId, environment: res.good.value.environment } : String(res.good), `${p.id} should authenticate`).toEqual({
        keyId: p.id,
        projectId: key.project,
        environment: key.environment
      })
    } else {
      expect(Exit.isFailure(res.good) && res.good.cause._tag === "Fail" && res.good.cause.error._tag === "InvalidApiKey", `${p.id} is ${want._tag}: must be refused, got ${String(res.good)}`).toBe(true)
    }
    // A forged secret or another environment is an unknown key, whatever the key's state.
    for (const bad of res.bad) {
      expect(Exit.isFailure(bad) && bad.cause._tag === "Fail" && bad.cause.error._tag === "InvalidApiKey" && bad.cause.error.message === "Unknown API key.", String(bad)).toBe(true)
    }
    expect({ id: p.id, status: res.info.status, replaced_by: res.info.replaced_by, replaces: res.info.replaces }).toEqual({
      id: p.id,
      status: statusOf(key, now),
      replaced_by: key.replacedBy ?? null,
      replaces: key.replaces ?? null
    })
  })
}
