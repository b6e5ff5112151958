/**
 * The idempotency records' rows and statements (`idempotency` table), scoped to (project,
 * environment, key). The claim is one INSERT on the primary key (ON CONFLICT DO NOTHING): two racing
 * claims can never both win. Synchronous, over one better-sqlite3 connection, inside its transactions.
 */
import type BetterSqlite3 from "better-sqlite3"

export interface Scope {
  readonly projectId: string
  readonly environment: string
}

export interface StoredResult {
  readonly status: number
  readonly contentType: string
  readonly body: Uint8Array
  readonly requestId: string
}

export type ClaimOutcome =
  | { readonly _tag: "Claimed" }
  | { readonly _tag: "Replay"; readonly result: StoredResult }
  | { readonly _tag: "Conflict" }
  | { readonly _tag: "InFlight"; readonly requestId: string }

/** A stored idempotency record, as read. */
export interface IdempotencyRow {
  readonly fingerprint: string
  readonly request_id: string
  readonly state: "in_flight" | "finished"
  readonly status: number | null
  readonly content_type: string | null
  readonly body: Uint8Array | null
  readonly expires_at: number
}

/** A stored body as a Buffer, without a copy when it is one already. */
export const asBuffer = (b: Uint8Array): Buffer => (Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength))

export const outcomeOf = (row: IdempotencyRow, fingerprint: string): ClaimOutcome => {
  if (row.fingerprint !== fingerprint) return { _tag: "Conflict" }
  if (row.state === "in_flight") return { _tag: "InFlight", requestId: row.request_id }
  return {
    _tag: "Replay",
    result: { status: row.status ?? 200, contentType: row.content_type ?? "application/json", body: row.body ?? new Uint8Array(), requestId: row.request_id }
  }
}

/** The idempotency records' statements over one better-sqlite3 connection, synchronous, inside its transactions. */
export const makeIdempotencyStatements = (db: BetterSqlite3.Database) => {
  // Prepared once on the connection the writes run on (the main thread's or the store worker's).
  const selectLive = db.prepare<[string, string, string, number], IdempotencyRow>(
    `SELECT fingerprint, request_id, state, status, content_type, body, expires_at FROM idempotency
     WHERE project_id = ? AND environment = ? AND key = ? AND expires_at > ?`
  )
  // The claim carries its process's epoch from the INSERT (migration 0004), not from a second UPDATE.
  const insertClaim = db.prepare<[string, string, string, string, string, number, number, number | null]>(
    `INSERT INTO idempotency (project_id, environment, key, fingerprint, request_id, state, created_at, expires_at, epoch)
     VALUES (?, ?, ?, ?, ?, 'in_flight', ?, ?, ?) ON CONFLICT DO NOTHING`
  )
  const deleteExpired = db.prepare<[string, string, string, number]>(
    "DELETE FROM idempotency WHERE project_id = ? AND environment = ? AND key = ? AND expires_at <= ?"
  )
  const updateFinished = db.prepare<[number, string, Uint8Array, number, string, string, string, string, number]>(
    `UPDATE idempotency SET state = 'finished', status = ?, content_type = ?, body = ?, expires_at = ?
     WHERE project_id = ? AND environment = ? AND key = ? AND request_id = ? AND state = 'in_flight' AND expires_at > ?`
  )
  const deleteClaim = db.prepare<[string, string, string, string]>(
    "DELETE FROM idempotency WHERE project_id = ? AND environment = ? AND key = ? AND request_id = ? AND state = 'in_flight'"
  )
  const deleteClaimsOf = db.prepare<[string]>("DELETE FROM idempotency WHERE request_id = ? AND state = 'in_flight'")
  const updateExpiry = db.prepare<[number, string, string, string, string]>(
    "UPDATE idempotency SET expires_at = ? WHERE project_id = ? AND environment = ? AND key = ? AND request_id = ? AND state = 'in_flight'"
  )

  const find = (scope: Scope, key: string, now: number): IdempotencyRow | undefined => selectLive.get(scope.projectId, scope.environment, key, now)

  /** Read-only look at `now`: what a claim would meet. Fast path before routing and pricing. */
  const peekAt = (scope: Scope, key: string, fingerprint: string, now: number): ClaimOutcome => {
    const row = find(scope, key, now)
    return row === undefined ? { _tag: "Claimed" } : outcomeOf(row, fingerprint)
  }

  /**
   * The atomic claim, synchronous: call it inside a transaction (`Sqlite.transact`), where the
   * INSERT and the rare expired-record DELETE cannot interleave with any other claim. `epoch`: the
   * claiming process's (src/store/epochs.ts), null for a claim no epoch recovers.
   */
  const claimSync = (scope: Scope, key: string, fingerprint: string, requestId: string, claimExpiresAt: number, now: number, epoch: number | null): ClaimOutcome => {
    const args = [scope.projectId, scope.environment, key, fingerprint, requestId, now, claimExpiresAt, epoch] as const
    if (insertClaim.run(...args).changes === 1) return { _tag: "Claimed" }
    // Taken: by a live record, or by an expired one that may be replaced (the rare path).
    if (deleteExpired.run(scope.projectId, scope.environment, key, now).changes > 0 && insertClaim.run(...args).changes === 1) {
      return { _tag: "Claimed" }
    }
    return outcomeOf(find(scope, key, now)!, fingerprint)
  }

  /**
   * Store the final response so replays return it byte for byte. Part of the settlement transaction.
   * Only the owner's live in-flight claim: a finished result is final, an expired claim is gone.
   */
  const finishSync = (scope: Scope, key: string, requestId: string, result: Omit<StoredResult, "requestId">, ttlMs: number, now: number): void => {
    const body = asBuffer(result.body)
    updateFinished.run(result.status, result.contentType, body, now + ttlMs, scope.projectId, scope.environment, key, requestId, now)
  }

  /** A failure that charged nothing frees the key, so a retry runs again. */
  const releaseSync = (scope: Scope, key: string, requestId: string): void => {
    deleteClaim.run(scope.projectId, scope.environment, key, requestId)
  }

  /** Free the in-flight claim a request holds, whatever its key (the recovery sweep knows only the request). */
  const releaseRequestSync = (requestId: string): void => {
    deleteClaimsOf.run(requestId)
  }

  /** Keep an in-flight claim alive as long as its hold. */
  const extendClaimSync = (scope: Scope, key: string, requestId: string, expiresAt: number): void => {
    updateExpiry.run(expiresAt, scope.projectId, scope.environment, key, requestId)
  }

  return { peekAt, claimSync, finishSync, releaseSync, releaseRequestSync, extendClaimSync } as const
}

