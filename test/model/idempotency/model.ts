/**
 * Idempotency model run: the store port production runs — the claim inside the reservation, the
 * stored result inside the settlement, the release inside the abandonment (src/store/ChatStore.ts),
 * in the store worker on a SQLite file — and the IdempotencyStore service's `peek`, on TestClock,
 * against spec/idempotency.ts.
 *
 * Expiry follows the spec: an in-flight claim lives until the deadline its caller passes (the
 * reservation deadline, so a crashed request frees its key), a finished record `idempotencyTtl`
 * after it finished, and a record past its deadline is absent to every read. The store expires
 * lazily (a read ignores, a claim deletes, rows past `expires_at`); the model sweeps with the spec's
 * `expire` before comparing, which is what a lazy store looks like from outside.
 */
import { Effect } from "effect"
import type fc from "fast-check"
import { expect } from "vitest"
import * as Idem from "../../../spec/idempotency.ts"
import { periodOf } from "../../../spec/ledger.ts"
import { type ClaimOutcome, IdempotencyStore, type Scope } from "../../../src/services/IdempotencyStore.ts"
import type { ReserveArgs } from "../../../src/store/chatTransactions.ts"
import { reserveArgs } from "../../support/portArgs.ts"
import type { Coverage } from "../support/coverage.ts"
import { nowMillis, run, select, type TimedPortRuntime } from "../support/runtime.ts"

/** The claim deadline callers pass (the reservation TTL) and the finished-record TTL (≥ 24 h). */
export const CLAIM_TTL_MS = 15 * 60_000
export const RESULT_TTL_MS = Idem.MIN_TTL_MILLIS
/** A small key space so claims collide; a key with a leading space and one with a trailing one. */
export const KEYS = ["k-1", "k-2", " lead", "trail "] as const
export const FINGERPRINTS = ["fp-a", "fp-b"] as const

export interface IdemModel {
  state: Idem.IdempotencyState
  /**
   * Every claim that won, for finish/release to pick from (including stale ones). `open` until its
   * call settled or was abandoned: a call settles at most once (settling twice is a defect the ledger
   * refuses), so only an open claim can finish.
   */
  readonly claims: Array<{ readonly scope: number; readonly key: string; readonly requestId: string; open: boolean }>
}

export interface IdemReal {
  readonly rt: TimedPortRuntime
  readonly coverage: Coverage
  readonly scopes: ReadonlyArray<Scope>
  /** The reservation each winning claim was made with, by request id (settle and abandon need it). */
  readonly calls: Map<string, ReserveArgs>
  /** Drives the start order of racing claims (a scheduler of its own, see ConcurrentClaimCommand). */
  readonly scheduler: fc.Scheduler | undefined
  nextId: () => string
}

export type IdemCommand = fc.AsyncCommand<IdemModel, IdemReal>

/** The reservation a call with an idempotency key sends: the claim, and a hold of 0 Credits. */
export const claimCall = (scope: Scope, key: string, fingerprint: string, requestId: string, now: number): ReserveArgs =>
  reserveArgs(scope.projectId, 0, {
    now,
    period: periodOf(now),
    deadline: now + CLAIM_TTL_MS,
    claim: { key, fingerprint, environment: scope.environment },
    ids: { reservationId: `rsv_${requestId.slice(4)}`, requestId }
  })

/** What the port's reserve answered, as a claim outcome. */
export const claimOutcomeOf = (result: { readonly _tag: "Right" } | { readonly _tag: "Left"; readonly left: { readonly _tag: string; readonly outcome?: ClaimOutcome } }): ClaimOutcome => {
  if (result._tag === "Right") return { _tag: "Claimed" }
  if (result.left._tag !== "ClaimLost" || result.left.outcome === undefined) throw new Error(`reserve refused: ${JSON.stringify(result.left)}`)
  return result.left.outcome
}

export const specScope = (s: Scope): Idem.Scope => ({ project: s.projectId, environment: s.environment })

/** Drop the records past their deadline (the spec's `expire`): the store's lazy expiry, seen from outside. */
export const sweep = (m: IdemModel, now: number): void => {
  m.state = Idem.expire(m.state, now).state
}

/** The outcome the model expects a claim (or a peek) to meet, as the store reports it. */
export const expectedOutcome = (o: Idem.Outcome): unknown => {
  switch (o._tag) {
    case "Claimed":
    case "Conflict":
      return { _tag: o._tag }
    case "InFlight":
      return { _tag: "InFlight", requestId: o.requestId }
    case "Replay":
      return { _tag: "Replay", status: o.result.status, body: o.result.body, requestId: o.requestId }
    default:
      throw new Error(`not a claim outcome: ${o._tag}`)
  }
}

const decoder = new TextDecoder()
export const observed = (o: ClaimOutcome): unknown =>
  o._tag === "Replay" ? { _tag: "Replay", status: o.result.status, body: decoder.decode(o.result.body), requestId: o.result.requestId } : o

interface RecordRow {
  project_id: string
  environment: string
  key: string
  fingerprint: string
  request_id: string
  state: string
  status: number | null
  body: Uint8Array | null
}

/**
 * The store equals the model: every live row is the model's record (same fingerprint, owner, state,
 * stored status and bytes) and vice versa; and reads through `peek` agree with the model's claim
 * outcome — for every key and fingerprint of the scopes in `focus` (the command's key in every
 * scope, so a write that leaks into another scope is seen), or for all of them when `focus` is absent.
 */
export const checkInvariants = async (m: IdemModel, r: IdemReal, focus?: { readonly key: string }): Promise<void> => {
  const now = await nowMillis(r.rt)
  sweep(m, now)
  const probes = r.scopes.flatMap((scope) => KEYS.filter((k) => focus === undefined || k === focus.key).flatMap((key) => FINGERPRINTS.map((fp) => ({ scope, key, fp }))))
  const [peeks, rows] = await run(
    r.rt,
    Effect.all([
      Effect.flatMap(IdempotencyStore, (s) => Effect.forEach(probes, (p) => s.peek(p.scope, p.key, p.fp))),
      select<RecordRow>(
        `SELECT project_id, environment, key, fingerprint, request_id, state, status, body FROM idempotency
         WHERE project_id IN (${r.scopes.map(() => "?").join(",")}) AND expires_at > ?`,
        ...r.scopes.map((s) => s.projectId),
        now
      )
    ])
  )
  probes.forEach((p, i) => {
    const want = expectedOutcome(Idem.claim(m.state, specScope(p.scope), p.key, p.fp, "probe", now).outcome)
    expect(observed(peeks[i]!), `peek ${JSON.stringify(p.scope)} ${JSON.stringify(p.key)} ${p.fp}`).toEqual(want)
  })
  const stored = rows
    .map((x) => ({
      record: Idem.recordKey({ project: x.project_id, environment: x.environment }, x.key),
      fingerprint: x.fingerprint,
      requestId: x.request_id,
      state: x.state,
      result: x.state === "finished" ? { status: x.status, body: decoder.decode(x.body ?? new Uint8Array()) } : undefined
    }))
    .sort((a, b) => a.record.localeCompare(b.record))
  const modelled = [...m.state.records.entries()]
    .map(([record, x]) => ({ record, fingerprint: x.fingerprint, requestId: x.requestId, state: x.state, result: x.state === "finished" ? x.result : undefined }))
    .sort((a, b) => a.record.localeCompare(b.record))
  expect(stored).toEqual(modelled)
}
