/**
 * API key lifecycle rules (docs/contract.md §2): the reference model of which key ids authenticate.
 *
 *   active  --rotate-->  rotated (valid strictly before expiresAt = rotation time + grace)
 *   active | rotated  --revoke-->  revoked (never valid again)
 *
 * Rotation issues a new active key at once and keeps the old one working for a grace period, so
 * clients can roll their secret without downtime. Only an active key can be rotated: rotating a
 * rotated key would fork the chain of replacements, and a revoked key must stay dead.
 *
 * Secrets are not modelled: the registry compares SHA-256(secret) before consulting these rules.
 * Pure functions `(state, command) -> { state, outcome }`; a refused command changes nothing.
 */

export const DEFAULT_GRACE_SECONDS = 86_400

export type KeyStatus = "active" | "rotated" | "revoked"

export interface ApiKey {
  readonly id: string
  readonly project: string
  readonly environment: string
  readonly status: KeyStatus
  readonly createdAtMillis: number
  /** Set once rotated: the first instant the old key no longer works. */
  readonly expiresAtMillis?: number
  /** The key this one was rotated into / the key this one replaced. */
  readonly replacedBy?: string
  readonly replaces?: string
}

export interface KeysState {
  readonly keys: ReadonlyMap<string, ApiKey>
}

export const empty: KeysState = { keys: new Map() }

// ---------------------------------------------------------------------------------------------
// Commands and outcomes

export type Command =
  | { readonly _tag: "Create"; readonly id: string; readonly project: string; readonly environment: string; readonly nowMillis: number }
  | { readonly _tag: "Rotate"; readonly id: string; readonly newId: string; readonly nowMillis: number; readonly graceSeconds: number }
  | { readonly _tag: "Revoke"; readonly id: string }

export type Outcome =
  | { readonly _tag: "Created"; readonly key: ApiKey }
  | { readonly _tag: "Rotated"; readonly newKey: ApiKey; readonly oldKeyExpiresAtMillis: number }
  | { readonly _tag: "Revoked" }
  | { readonly _tag: "UnknownKey"; readonly id: string }
  | { readonly _tag: "DuplicateKey"; readonly id: string }
  | { readonly _tag: "KeyRevoked"; readonly id: string }
  | { readonly _tag: "AlreadyRotated"; readonly id: string; readonly replacedBy: string }
  | { readonly _tag: "AlreadyRevoked"; readonly id: string }
  | { readonly _tag: "InvalidGrace"; readonly graceSeconds: number }

export interface Step {
  readonly state: KeysState
  readonly outcome: Outcome
}

const put = (state: KeysState, ...keys: ReadonlyArray<ApiKey>): KeysState => {
  const next = new Map(state.keys)
  for (const k of keys) next.set(k.id, k)
  return { keys: next }
}

/** Issue a new active key. Ids are never reused, not even a revoked one's. */
export const create = (state: KeysState, id: string, project: string, environment: string, nowMillis: number): Step => {
  if (state.keys.has(id)) return { state, outcome: { _tag: "DuplicateKey", id } }
  const key: ApiKey = { id, project, environment, status: "active", createdAtMillis: nowMillis }
  return { state: put(state, key), outcome: { _tag: "Created", key } }
}

/**
 * Replace active key `id` by a new active key `newId` in the same project and environment; the old
 * key keeps working until nowMillis + graceSeconds·1000 (exclusive). Grace is whole seconds ≥ 0.
 */
export const rotate = (
  state: KeysState,
  id: string,
  newId: string,
  nowMillis: number,
  graceSeconds: number = DEFAULT_GRACE_SECONDS
): Step => {
  const old = state.keys.get(id)
  if (old === undefined) return { state, outcome: { _tag: "UnknownKey", id } }
  if (old.status === "revoked") return { state, outcome: { _tag: "KeyRevoked", id } }
  if (old.status === "rotated") return { state, outcome: { _tag: "AlreadyRotated", id, replacedBy: old.replacedBy ?? "" } }
  if (!(Number.isSafeInteger(graceSeconds) && graceSeconds >= 0)) return { state, outcome: { _tag: "InvalidGrace", graceSeconds } }
  if (state.keys.has(newId)) return { state, outcome: { _tag: "DuplicateKey", id: newId } }
  const expiresAtMillis = nowMillis + graceSeconds * 1000
  const newKey: ApiKey = {
    id: newId,
    project: old.project,
    environment: old.environment,
    status: "active",
    createdAtMillis: nowMillis,
    replaces: id
  }
  return {
    state: put(state, { ...old, status: "rotated", expiresAtMillis, replacedBy: newId }, newKey),
    outcome: { _tag: "Rotated", newKey, oldKeyExpiresAtMillis: expiresAtMillis }
  }
}

/** Kill a key at once, whether active or still in its rotation grace. */
export const revoke = (state: KeysState, id: string): Step => {
  const k = state.keys.get(id)
  if (k === undefined) return { state, outcome: { _tag: "UnknownKey", id } }
  if (k.status === "revoked") return { state, outcome: { _tag: "AlreadyRevoked", id } }
  return { state: put(state, { ...k, status: "revoked" }), outcome: { _tag: "Revoked" } }
}

/** One entry point for model-based tests and replays. */
export const step = (state: KeysState, command: Command): Step => {
  switch (command._tag) {
    case "Create":
      return create(state, command.id, command.project, command.environment, command.nowMillis)
    case "Rotate":
      return rotate(state, command.id, command.newId, command.nowMillis, command.graceSeconds)
    case "Revoke":
      return revoke(state, command.id)
  }
}

// ---------------------------------------------------------------------------------------------
// Query

export type AuthResult =
  | { readonly _tag: "Valid"; readonly key: ApiKey }
  | { readonly _tag: "Expired"; readonly key: ApiKey }
  | { readonly _tag: "Revoked"; readonly key: ApiKey }
  | { readonly _tag: "Unknown" }

/**
 * Does key id `keyId` authenticate at `nowMillis`? The caller still checks that the key's project
 * and environment match the request (a key for another project is as bad as an unknown one).
 */
export const authenticate = (state: KeysState, keyId: string, nowMillis: number): AuthResult => {
  const key = state.keys.get(keyId)
  if (key === undefined) return { _tag: "Unknown" }
  switch (key.status) {
    case "revoked":
      return { _tag: "Revoked", key }
    case "active":
      return { _tag: "Valid", key }
    case "rotated":
      // Strictly before: with grace 0 the old key stops at the very instant of rotation.
      return nowMillis < (key.expiresAtMillis ?? nowMillis) ? { _tag: "Valid", key } : { _tag: "Expired", key }
  }
}
