/**
 * The budget ledger's rows and statements (`budget_windows`, `reservations`, `receipts`,
 * `chain_heads`): per project and settlement window, two-phase holds — reserve the worst case, then
 * settle the actual charge (≤ reserved) or void — and the receipt chain written in the same
 * transaction as the charge.
 *
 * Invariant at every instant: spent + reserved ≤ cap (spec/ledger.ts). It is enforced by ONE guarded
 * UPDATE (the cap is read inside the statement), so no interleaving of requests or instances can
 * overspend. A hold is resolved at most once: settle and void only move rows still in state 'held'.
 */
import type BetterSqlite3 from "better-sqlite3"
import type { WindowFacts } from "../../spec/ledger.ts"
import type { TokenCounts } from "../../spec/pricing.ts"
import { GENESIS_HASH, type Receipt, type SealedReceipt, type UnsignedReceipt } from "../../spec/receipt.ts"
import { type ScopeKind, UNLIMITED } from "../../spec/scopes.ts"
import type { ScopeWindow } from "../domain/budgetSizing.ts"
import { endUserCapSql, keyCapSql, scopeHoldSql } from "./scopeSql.ts"
import type { Verification } from "./requestStatements.ts"

/** What a store reads of one window for the rulebook's check, in one statement (both engines' columns). */
export interface WindowFactsRow {
  readonly cap: number | null
  readonly cap_changed_at: number | null
  readonly spent: number | null
  readonly reserved: number | null
  readonly receipt_sum: number
  readonly held_sum: number
  readonly last_hold_at: number | null
}

/** A window as spec/ledger.ts `checkWindow` reads it: a missing window or project reads as zeros. */
export const windowFactsOf = (r: WindowFactsRow): WindowFacts => ({
  cap: r.cap ?? 0,
  spent: r.spent ?? 0,
  reserved: r.reserved ?? 0,
  receiptSum: r.receipt_sum,
  heldSum: r.held_sum,
  capChangedAt: r.cap_changed_at ?? undefined,
  lastHoldAt: r.last_hold_at ?? undefined
})

export interface BudgetWindow {
  readonly period: string
  readonly cap: number
  readonly spent: number
  readonly reserved: number
}

export interface Hold {
  readonly reservationId: string
  readonly requestId: string
  readonly projectId: string
  readonly period: string
  readonly amount: number
  readonly deadline: number
  /** The key the call came with: its scope is held too (spec/scopes.ts; absent only for a hold made before migration 0014). */
  readonly keyId?: string | undefined
  /** The end user the call names (`user`, else `metadata.end_user`), if any: its scope is held too. */
  readonly endUser?: string | undefined
}

/** A scope's window account (spec/scopes.ts `accountOf`). */
export const keyAccount = (keyId: string): string => `key:${keyId}`
export const endUserAccount = (projectId: string, user: string): string => `end_user:${projectId}/${user}`

export interface Settlement {
  readonly hold: Hold
  readonly receiptId: string
  readonly organization: string
  readonly environment: string
  readonly model: string
  readonly route: string
  readonly rateCardVersion: string
  readonly tokens: TokenCounts
  readonly usageSource: "reported" | "counted"
  readonly charge: number
  readonly verification: Verification
}

/**
 * The receipt a settlement appends, before its signature: the settlement's facts, the resolved hold
 * (what it reserved and where it posted), and its place in the project's chain. One builder for
 * every engine (SQLite here, PostgreSQL in pgChatStore.ts), so receipts read the same whoever wrote them.
 */
export const unsignedReceipt = (
  s: Omit<Settlement, "charge">,
  hold: { readonly project_id: string; readonly period: string; readonly amount: number; readonly charge: number },
  chain: { readonly seq: number; readonly prevHash: string; readonly now: number; readonly keyId: string }
): UnsignedReceipt => ({
  ...(s.hold.keyId === undefined ? {} : { key_id: s.hold.keyId }),
  ...(s.hold.endUser === undefined ? {} : { end_user: s.hold.endUser }),
  object: "receipt",
  receipt_id: s.receiptId,
  request_id: s.hold.requestId,
  organization: s.organization,
  project_id: hold.project_id,
  environment: s.environment,
  status: "completed",
  verification: s.verification,
  model: s.model,
  route: s.route,
  rate_card_version: s.rateCardVersion,
  tokens: s.tokens,
  usage_source: s.usageSource,
  credits_reserved: hold.amount,
  credits_charged: hold.charge,
  period: hold.period,
  seq: chain.seq,
  created_at: new Date(chain.now).toISOString(),
  prev_hash: chain.prevHash,
  signing_key_id: chain.keyId
})

/** What signs a receipt: the service's key (ReceiptSigner) or the same key in the store worker. */
export interface Sealer {
  readonly keyId: string
  readonly seal: (unsigned: UnsignedReceipt) => SealedReceipt
}

/** A resolved hold's row: what it held and every scope it was held in. */
interface HoldScopes {
  readonly amount: number
  readonly project_id: string
  readonly period: string
  readonly key_id: string | null
  readonly end_user: string | null
}

/**
 * The ledger's statements over one better-sqlite3 connection, as plain synchronous functions: the
 * writes run inside a transaction of that connection (`Sqlite.transact` on the main thread, the
 * store worker's batches off it, src/store/storeWorker.ts).
 */
export const makeLedgerStatements = (db: BetterSqlite3.Database, signer: Sealer) => {
  // Prepared once on the connection the writes run on (the main thread's or the store worker's).
  const selectWindow = db.prepare<[string, string], { cap: number; spent: number | null; reserved: number | null }>(
    `SELECT p.budget_credits AS cap, w.spent AS spent, w.reserved AS reserved
     FROM projects p LEFT JOIN budget_windows w ON w.project_id = p.id AND w.period = ?
     WHERE p.id = ?`
  )
  // The guard: the cap is read inside the statement, so no interleaving can overspend.
  const guardedHold = db.prepare<[number, string, string, number, string]>(
    `UPDATE budget_windows SET reserved = reserved + ?
     WHERE project_id = ? AND period = ? AND spent + reserved + ? <= (SELECT budget_credits FROM projects WHERE id = ?)`
  )
  const openWindow = db.prepare<[string, string]>(
    "INSERT INTO budget_windows (project_id, period, spent, reserved) VALUES (?, ?, 0, 0) ON CONFLICT DO NOTHING"
  )
  // The hold carries its process's epoch from the INSERT (migration 0004), not from a second UPDATE.
  const insertHold = db.prepare<[string, string, string, string, number, number, number, number | null, string | null, string | null]>(
    `INSERT INTO reservations (id, request_id, project_id, period, amount, state, deadline, created_at, epoch, key_id, end_user)
     VALUES (?, ?, ?, ?, ?, 'held', ?, ?, ?, ?, ?)`
  )
  // The key's and the end user's windows (migration 0014): one guarded upsert each, the cap read inside it.
  type ScopeParams = { scope: string; period: string; amount: number; key: string | null; project: string; user: string | null }
  const keyHold = db.prepare<[ScopeParams]>(scopeHoldSql("@scope", "@period", "@amount", keyCapSql("@key")))
  const endUserHold = db.prepare<[ScopeParams]>(scopeHoldSql("@scope", "@period", "@amount", endUserCapSql("@project", "@user")))
  type ScopeRead = { scope: string; period: string; key: string | null; project: string; user: string | null }
  const scopeFigures = (cap: string) =>
    db.prepare<[ScopeRead], { cap: number; spent: number | null; reserved: number | null }>(
      `SELECT ${cap} AS cap, w.spent AS spent, w.reserved AS reserved
       FROM (SELECT 1) LEFT JOIN scope_windows w ON w.scope = @scope AND w.period = @period`
    )
  const selectKeyWindow = scopeFigures(keyCapSql("@key"))
  const selectEndUserWindow = scopeFigures(endUserCapSql("@project", "@user"))
  const postScopeCharge = db.prepare<[number, number, string, string]>(
    "UPDATE scope_windows SET spent = spent + ?, reserved = reserved - ? WHERE scope = ? AND period = ?"
  )
  // One guarded UPDATE resolves the hold and clamps the charge to the amount stored with it
  // (never to what the caller says it reserved).
  const resolveSettled = db.prepare<[number, number, number, string], HoldScopes & { charge: number }>(
    `UPDATE reservations SET state = 'settled', resolved_at = ?, charge = CASE WHEN ? < amount THEN ? ELSE amount END
     WHERE id = ? AND state = 'held' RETURNING amount, charge, project_id, period, key_id, end_user`
  )
  const resolveVoided = db.prepare<[number, string], HoldScopes>(
    `UPDATE reservations SET state = 'voided', charge = 0, resolved_at = ?
     WHERE id = ? AND state = 'held' RETURNING amount, project_id, period, key_id, end_user`
  )
  const postCharge = db.prepare<[number, number, string, string]>(
    "UPDATE budget_windows SET spent = spent + ?, reserved = reserved - ? WHERE project_id = ? AND period = ?"
  )
  const selectHead = db.prepare<[string], { seq: number; hash: string }>("SELECT seq, hash FROM chain_heads WHERE project_id = ?")
  const insertReceipt = db.prepare(
    `INSERT INTO receipts (id, request_id, project_id, environment, period, seq, credits_charged, rate_card_version,
       body, prev_hash, hash, signature, signing_key_id, created_at,
       route, input_tokens, cached_input_tokens, output_tokens, reasoning_tokens)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
  )
  const upsertHead = db.prepare<[string, number, string]>(
    "INSERT INTO chain_heads (project_id, seq, hash) VALUES (?, ?, ?) ON CONFLICT (project_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash"
  )
  // What the rulebook's window check needs (spec/ledger.ts `checkWindow`), read in one statement.
  const selectWindowFacts = db.prepare<[{ project: string; period: string }], {
    cap: number | null; cap_changed_at: number | null; spent: number | null; reserved: number | null
    receipt_sum: number; held_sum: number; last_hold_at: number | null
  }>(
    `SELECT (SELECT budget_credits FROM projects WHERE id = @project) AS cap,
            (SELECT updated_at FROM projects WHERE id = @project) AS cap_changed_at,
            w.spent AS spent, w.reserved AS reserved,
            (SELECT COALESCE(SUM(credits_charged), 0) FROM receipts WHERE project_id = @project AND period = @period) AS receipt_sum,
            (SELECT COALESCE(SUM(amount), 0) FROM reservations WHERE project_id = @project AND period = @period AND state = 'held') AS held_sum,
            (SELECT MAX(created_at) FROM reservations WHERE project_id = @project AND period = @period) AS last_hold_at
     FROM (SELECT 1) LEFT JOIN budget_windows w ON w.project_id = @project AND w.period = @period`
  )
  const selectReservationWindow = db.prepare<[string], { project_id: string; period: string }>("SELECT project_id, period FROM reservations WHERE id = ?")
  const selectExpired = db.prepare<[number], { id: string; request_id: string }>(
    "SELECT id, request_id FROM reservations WHERE state = 'held' AND deadline <= ?"
  )
  const updateDeadline = db.prepare<[number, string]>("UPDATE reservations SET deadline = ? WHERE id = ? AND state = 'held'")

  /** Post a resolved hold's charge (0: a void) and release its amount in every scope it was held in, once. */
  const postToScopes = (row: HoldScopes, charge: number): void => {
    postCharge.run(charge, row.amount, row.project_id, row.period)
    if (row.key_id !== null) postScopeCharge.run(charge, row.amount, keyAccount(row.key_id), row.period)
    if (row.end_user !== null) postScopeCharge.run(charge, row.amount, endUserAccount(row.project_id, row.end_user), row.period)
  }

  const scopeRead = (hold: Pick<Hold, "projectId" | "period" | "keyId" | "endUser">, scope: string): ScopeRead => ({
    scope,
    period: hold.period,
    key: hold.keyId ?? null,
    project: hold.projectId,
    user: hold.endUser ?? null
  })

  /**
   * Every scope the hold is in, in SCOPE_ORDER, as its reservation reads them (spec/scopes.ts): the
   * project's window, the key's and the end user's (an uncapped one's cap is UNLIMITED).
   */
  const scopeWindowsSync = (hold: Pick<Hold, "projectId" | "period" | "keyId" | "endUser">): ReadonlyArray<ScopeWindow> => {
    const project = windowSync(hold.projectId, hold.period)
    const out: Array<ScopeWindow> = [{ scope: "project", cap: project.cap, spent: project.spent, reserved: project.reserved }]
    if (hold.keyId !== undefined) {
      const k = selectKeyWindow.get(scopeRead(hold, keyAccount(hold.keyId)))!
      out.push({ scope: "key", cap: k.cap ?? UNLIMITED, spent: k.spent ?? 0, reserved: k.reserved ?? 0 })
    }
    if (hold.endUser !== undefined) {
      const e = selectEndUserWindow.get(scopeRead(hold, endUserAccount(hold.projectId, hold.endUser)))!
      out.push({ scope: "end_user", cap: e.cap ?? UNLIMITED, spent: e.spent ?? 0, reserved: e.reserved ?? 0 })
    }
    return out
  }

  const windowSync = (projectId: string, period: string): BudgetWindow => {
    const row = selectWindow.get(period, projectId)
    return { period, cap: row?.cap ?? 0, spent: row?.spent ?? 0, reserved: row?.reserved ?? 0 }
  }

  /**
   * Hold `amount` Credits in every scope of the hold (spec/scopes.ts), if it fits under each cap:
   * "held", or the first scope, in SCOPE_ORDER, that refused — then the caller MUST roll the
   * transaction back (what was held in the scopes before it is not undone here: all or none is the
   * transaction's). Synchronous, inside a transaction. `epoch`: the holding process's
   * (src/store/epochs.ts), null for a hold only the deadline sweep recovers.
   */
  const reserveSync = (hold: Hold, now: number, epoch: number | null): "held" | ScopeKind => {
    const guarded = () => guardedHold.run(hold.amount, hold.projectId, hold.period, hold.amount, hold.projectId).changes === 1
    // The window may not exist yet (first hold of the month): open it and try once more.
    if (!(guarded() || (openWindow.run(hold.projectId, hold.period), guarded()))) return "project"
    const params = (scope: string): ScopeParams => ({ ...scopeRead(hold, scope), amount: hold.amount })
    if (hold.keyId !== undefined && keyHold.run(params(keyAccount(hold.keyId))).changes !== 1) return "key"
    if (hold.endUser !== undefined && endUserHold.run(params(endUserAccount(hold.projectId, hold.endUser))).changes !== 1) return "end_user"
    insertHold.run(hold.reservationId, hold.requestId, hold.projectId, hold.period, hold.amount, hold.deadline, now, epoch, hold.keyId ?? null, hold.endUser ?? null)
    return "held"
  }

  /**
   * Post the charge, release the rest of the hold, append the receipt to the project's chain.
   * Synchronous: call it inside the settlement transaction. Throws (a defect) if the hold was already
   * resolved — a bug, never a race: only the request that made the hold, or the recovery sweep after
   * its deadline, resolves it.
   */
  const settleSync = (s: Settlement, now: number): Receipt => {
    const row = resolveSettled.get(now, s.charge, s.charge, s.hold.reservationId)
    if (row === undefined) throw new Error(`reservation ${s.hold.reservationId} was already resolved`)
    const charge = row.charge
    postToScopes(row, charge)
    const head = selectHead.get(row.project_id)
    const seq = (head?.seq ?? 0) + 1
    // The scopes the receipt names are the hold's, as stored (a recovered hold's caller does not know them).
    const scoped = { ...s, hold: { ...s.hold, keyId: row.key_id ?? undefined, endUser: row.end_user ?? undefined } }
    const unsigned = unsignedReceipt(scoped, { ...row, charge }, { seq, prevHash: head?.hash ?? GENESIS_HASH, now, keyId: signer.keyId })
    const { receipt, body } = signer.seal(unsigned)
    insertReceipt.run(
      receipt.receipt_id, receipt.request_id, receipt.project_id, receipt.environment, receipt.period,
      seq, charge, receipt.rate_card_version, body, receipt.prev_hash, receipt.hash,
      receipt.signature, receipt.signing_key_id, now,
      s.route, s.tokens.input, s.tokens.cached_input, s.tokens.output, s.tokens.reasoning
    )
    upsertHead.run(row.project_id, seq, receipt.hash)
    return receipt
  }

  /** Release a hold with no charge. Returns false if it was already resolved. Synchronous, in a transaction. */
  const releaseSync = (reservationId: string, now: number): boolean => {
    const row = resolveVoided.get(now, reservationId)
    if (row === undefined) return false
    postToScopes(row, 0)
    return true
  }

  /** Push a live hold's deadline out, so a long stream is not swept. Synchronous, in a transaction. */
  const extendHoldSync = (reservationId: string, deadline: number): void => {
    updateDeadline.run(deadline, reservationId)
  }

  /** Holds whose deadline passed at `now`: their process died or hung (the recovery sweep). */
  const expiredSync = (now: number): ReadonlyArray<{ id: string; request_id: string }> => selectExpired.all(now)

  /** A window as the rulebook's check reads it (spec/ledger.ts `WindowFacts`). */
  const windowFactsSync = (projectId: string, period: string): WindowFacts => windowFactsOf(selectWindowFacts.get({ project: projectId, period })!)

  /** The window a reservation belongs to. */
  const reservationWindowSync = (reservationId: string): { readonly projectId: string; readonly period: string } | undefined => {
    const r = selectReservationWindow.get(reservationId)
    return r === undefined ? undefined : { projectId: r.project_id, period: r.period }
  }

  return { windowSync, scopeWindowsSync, reserveSync, settleSync, releaseSync, extendHoldSync, expiredSync, windowFactsSync, reservationWindowSync } as const
}

