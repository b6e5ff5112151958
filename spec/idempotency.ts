/**
 * Idempotency rules (docs/contract.md §5): the reference model of idempotency records.
 *
 * A record is scoped to a tenant (project + environment) and a client-chosen key. It remembers the
 * fingerprint of the request that claimed it (SHA-256 of method, path and canonical body), so a key
 * reused for a different request is refused instead of replaying someone else's answer.
 *
 *   claim   no live record                 -> Claimed   (the caller runs the request; the claim lives
 *                                                       until the deadline the caller gives — the
 *                                                       gateway gives its hold's, so a crashed
 *                                                       request frees its key when its hold is swept)
 *           same fingerprint, finished     -> Replay    (the stored status and body, no new charge)
 *           same fingerprint, in flight    -> InFlight  (the caller waits, then replays)
 *           different fingerprint          -> Conflict  (409; nothing changes, even in flight)
 *   finish  live claim -> finished with the result to replay, kept a TTL (≥ 24 h) from then
 *   extend  live claim -> a later deadline (a stream that outlives its hold's first deadline)
 *   release in flight -> gone: a failure that charged nothing lets a retry run again
 *   expire  drops the records past their deadline (a record past it is already treated as absent)
 *
 * Pure functions `(state, command) -> { state, outcome }` on immutable data; a refused command
 * returns the state it was given, unchanged.
 */

export interface Scope {
  readonly project: string
  readonly environment: string
}

export interface StoredResult {
  readonly status: number
  /** The exact response body, replayed byte for byte. */
  readonly body: string
}

export type IdempotencyRecord =
  | {
      readonly state: "in_flight"
      readonly scope: Scope
      readonly key: string
      readonly fingerprint: string
      /** The request that owns the claim; only it may finish or release it. */
      readonly requestId: string
      readonly createdAtMillis: number
      /** The claim is gone at this instant (the caller's deadline, see `claim`). */
      readonly expiresAtMillis: number
    }
  | {
      readonly state: "finished"
      readonly scope: Scope
      readonly key: string
      readonly fingerprint: string
      readonly requestId: string
      readonly createdAtMillis: number
      readonly finishedAtMillis: number
      /** `finishedAtMillis` + a TTL of at least 24 h. */
      readonly expiresAtMillis: number
      readonly result: StoredResult
    }

export interface IdempotencyState {
  /** Records by `recordKey(scope, key)`. */
  readonly records: ReadonlyMap<string, IdempotencyRecord>
}

export const empty: IdempotencyState = { records: new Map() }

/** Keys live at least this long (docs/contract.md §5). */
export const MIN_TTL_MILLIS = 24 * 60 * 60 * 1000
export const DEFAULT_TTL_MILLIS = MIN_TTL_MILLIS

/** Unambiguous map key: the same client key in two tenants is two different records. */
export const recordKey = (scope: Scope, key: string): string => JSON.stringify([scope.project, scope.environment, key])

/** 1–255 printable ASCII characters (docs/contract.md §5); checked at the edge, before any claim. */
export const isValidKey = (key: string): boolean => /^[\x20-\x7e]{1,255}$/.test(key)

/** The record of `key`; with `nowMillis`, only if it is still live then (a record past its deadline is absent). */
export const lookup = (state: IdempotencyState, scope: Scope, key: string, nowMillis?: number): IdempotencyRecord | undefined => {
  const r = state.records.get(recordKey(scope, key))
  return r === undefined || (nowMillis !== undefined && !isLive(r, nowMillis)) ? undefined : r
}

/** A record exists until its deadline, exclusive. */
export const isLive = (r: IdempotencyRecord, nowMillis: number): boolean => nowMillis < r.expiresAtMillis

// ---------------------------------------------------------------------------------------------
// Commands and outcomes

export type Command =
  | {
      readonly _tag: "Claim"
      readonly scope: Scope
      readonly key: string
      readonly fingerprint: string
      readonly requestId: string
      readonly nowMillis: number
      readonly expiresAtMillis: number
    }
  | {
      readonly _tag: "Finish"
      readonly scope: Scope
      readonly key: string
      readonly requestId: string
      readonly result: StoredResult
      readonly nowMillis: number
      readonly ttlMillis: number
    }
  | { readonly _tag: "Extend"; readonly scope: Scope; readonly key: string; readonly requestId: string; readonly nowMillis: number; readonly expiresAtMillis: number }
  | { readonly _tag: "Release"; readonly scope: Scope; readonly key: string; readonly requestId: string }
  | { readonly _tag: "Expire"; readonly nowMillis: number }

export type Outcome =
  | { readonly _tag: "Claimed" }
  | { readonly _tag: "Replay"; readonly result: StoredResult; readonly requestId: string }
  | { readonly _tag: "Conflict" }
  | { readonly _tag: "InFlight"; readonly requestId: string }
  | { readonly _tag: "Finished" }
  | { readonly _tag: "Extended" }
  | { readonly _tag: "Released" }
  | { readonly _tag: "UnknownKey" }
  /** finish/release of a record that is already finished: its result is final. */
  | { readonly _tag: "AlreadyFinished" }
  /** finish/release by a request that does not own the claim (e.g. its claim expired and was re-taken). */
  | { readonly _tag: "NotOwner"; readonly requestId: string }
  | { readonly _tag: "Expired"; readonly removed: number }
  | { readonly _tag: "TtlTooShort"; readonly ttlMillis: number }

export interface Step {
  readonly state: IdempotencyState
  readonly outcome: Outcome
}

/**
 * Claim `key` for a request, until `expiresAtMillis` unless it finishes first. Atomic in the real
 * store: one insert on a unique index (a record past its deadline is replaced).
 */
export const claim = (
  state: IdempotencyState,
  scope: Scope,
  key: string,
  fingerprint: string,
  requestId: string,
  nowMillis: number,
  expiresAtMillis: number = nowMillis + DEFAULT_TTL_MILLIS
): Step => {
  const existing = lookup(state, scope, key, nowMillis)
  if (existing === undefined) {
    const record: IdempotencyRecord = { state: "in_flight", scope, key, fingerprint, requestId, createdAtMillis: nowMillis, expiresAtMillis }
    return { state: { records: new Map(state.records).set(recordKey(scope, key), record) }, outcome: { _tag: "Claimed" } }
  }
  // Checked before the in-flight case: a different request must never be told to wait for, or be
  // given, another request's answer.
  if (existing.fingerprint !== fingerprint) return { state, outcome: { _tag: "Conflict" } }
  if (existing.state === "in_flight") return { state, outcome: { _tag: "InFlight", requestId: existing.requestId } }
  return { state, outcome: { _tag: "Replay", result: existing.result, requestId: existing.requestId } }
}

/** The claim's owner, or why the caller may not touch the record. */
const owned = (state: IdempotencyState, scope: Scope, key: string, requestId: string, nowMillis?: number): IdempotencyRecord | Outcome => {
  const r = lookup(state, scope, key, nowMillis)
  if (r === undefined) return { _tag: "UnknownKey" }
  if (r.requestId !== requestId) return { _tag: "NotOwner", requestId: r.requestId }
  if (r.state === "finished") return { _tag: "AlreadyFinished" }
  return r
}

const isOutcome = (x: IdempotencyRecord | Outcome): x is Outcome => "_tag" in x

/**
 * Store the response to replay, kept `ttlMillis` (≥ 24 h) from now. Only the owner's live claim: a
 * claim past its deadline is gone. In the real store this commits with the charge and the receipt.
 */
export const finish = (
  state: IdempotencyState,
  scope: Scope,
  key: string,
  requestId: string,
  result: StoredResult,
  nowMillis: number,
  ttlMillis: number = DEFAULT_TTL_MILLIS
): Step => {
  if (!(ttlMillis >= MIN_TTL_MILLIS)) return { state, outcome: { _tag: "TtlTooShort", ttlMillis } }
  const r = owned(state, scope, key, requestId, nowMillis)
  if (isOutcome(r)) return { state, outcome: r }
  const done: IdempotencyRecord = { ...r, state: "finished", result, finishedAtMillis: nowMillis, expiresAtMillis: nowMillis + ttlMillis }
  return { state: { records: new Map(state.records).set(recordKey(scope, key), done) }, outcome: { _tag: "Finished" } }
}

/** Move the owner's live claim's deadline (never a finished record's: its TTL is fixed at finish). */
export const extend = (state: IdempotencyState, scope: Scope, key: string, requestId: string, nowMillis: number, expiresAtMillis: number): Step => {
  const r = owned(state, scope, key, requestId, nowMillis)
  if (isOutcome(r)) return { state, outcome: r }
  return { state: { records: new Map(state.records).set(recordKey(scope, key), { ...r, expiresAtMillis }) }, outcome: { _tag: "Extended" } }
}

/**
 * Free the key after a failure that charged nothing, so a retry runs again. A finished record is
 * never released: its request may have been charged, and a retry must replay it, not pay twice.
 */
export const release = (state: IdempotencyState, scope: Scope, key: string, requestId: string): Step => {
  const r = owned(state, scope, key, requestId)
  if (isOutcome(r)) return { state, outcome: r }
  const records = new Map(state.records)
  records.delete(recordKey(scope, key))
  return { state: { records }, outcome: { _tag: "Released" } }
}

/** Drop every record past its deadline (finished or stuck in flight); they are already absent to every read. */
export const expire = (state: IdempotencyState, nowMillis: number): Step => {
  const records = new Map<string, IdempotencyRecord>()
  for (const [k, r] of state.records) if (isLive(r, nowMillis)) records.set(k, r)
  return { state: { records }, outcome: { _tag: "Expired", removed: state.records.size - records.size } }
}

/** One entry point for model-based tests and replays. */
export const step = (state: IdempotencyState, command: Command): Step => {
  switch (command._tag) {
    case "Claim":
      return claim(state, command.scope, command.key, command.fingerprint, command.requestId, command.nowMillis, command.expiresAtMillis)
    case "Finish":
      return finish(state, command.scope, command.key, command.requestId, command.result, command.nowMillis, command.ttlMillis)
    case "Extend":
      return extend(state, command.scope, command.key, command.requestId, command.nowMillis, command.expiresAtMillis)
    case "Release":
      return release(state, command.scope, command.key, command.requestId)
    case "Expire":
      return expire(state, command.nowMillis)
  }
}
