/**
 * The request records' rows and statements (`requests` table). Created `pending` with the
 * reservation, then `completed` (with the receipt, in the settlement transaction) or `failed`.
 * Synchronous, over one better-sqlite3 connection, inside its transactions (src/store/chatTransactions.ts).
 */
import type BetterSqlite3 from "better-sqlite3"

export interface Verification {
  readonly state: "verified" | "unverified"
  readonly checks: ReadonlyArray<string>
  readonly failed_checks: ReadonlyArray<string>
}

export interface Attempt {
  readonly route: string
  readonly provider: string
  readonly outcome: "ok" | "error" | "skipped"
  readonly status?: number | undefined
  readonly error?: string | undefined
  readonly duration_ms: number
}

export interface NewRequest {
  readonly id: string
  readonly projectId: string
  readonly environment: string
  readonly keyId: string
  readonly endpoint: string
  readonly model: string
  readonly route: string
  readonly stream: boolean
  readonly idempotencyKey: string | null
  readonly rateCardVersion: string
  readonly creditsReserved: number
  readonly createdAt: number
}

export interface RequestRow {
  readonly id: string
  readonly project_id: string
  readonly environment: string
  readonly endpoint: string
  readonly model: string
  readonly route: string | null
  readonly stream: number
  readonly status: "pending" | "completed" | "failed"
  readonly idempotency_key: string | null
  readonly rate_card_version: string | null
  readonly credits_reserved: number
  readonly credits_charged: number | null
  readonly receipt_id: string | null
  readonly verification: string | null
  readonly attempts: string | null
  readonly error_code: string | null
  readonly error_message: string | null
  readonly created_at: number
  readonly completed_at: number | null
}

export interface Completion {
  readonly route: string
  readonly creditsCharged: number
  readonly receiptId: string
  readonly verification: Verification
  readonly attempts: ReadonlyArray<Attempt>
  readonly completedAt: number
}

export interface Failure {
  readonly code: string
  readonly message: string
  readonly attempts: ReadonlyArray<Attempt>
  readonly completedAt: number
}

export const requestView = (r: RequestRow) => ({
  id: r.id,
  object: "governed_request" as const,
  status: r.status,
  endpoint: r.endpoint,
  model: r.model,
  route: r.route,
  stream: r.stream === 1,
  verification: r.verification === null ? null : (JSON.parse(r.verification) as Verification),
  credits_reserved: r.credits_reserved,
  credits_charged: r.credits_charged,
  rate_card_version: r.rate_card_version,
  receipt_id: r.receipt_id,
  attempts: r.attempts === null ? [] : (JSON.parse(r.attempts) as ReadonlyArray<Attempt>),
  error: r.error_code === null ? null : { code: r.error_code, message: r.error_message },
  created_at: new Date(r.created_at).toISOString(),
  completed_at: r.completed_at === null ? null : new Date(r.completed_at).toISOString()
})

/** The request records' writes over one better-sqlite3 connection, synchronous, inside its transactions. */
export const makeRequestStatements = (db: BetterSqlite3.Database) => {
  // Prepared once on the connection the writes run on (the main thread's or the store worker's).
  const insertRow = db.prepare<[string, string, string, string, string, string, string, number, string | null, string, number, number]>(
    `INSERT INTO requests (id, project_id, environment, key_id, endpoint, model, route, stream, status,
       idempotency_key, rate_card_version, credits_reserved, created_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)`
  )
  const updateCompleted = db.prepare<[string, number, string, string, string, number, string]>(
    `UPDATE requests SET status = 'completed', route = ?, credits_charged = ?, receipt_id = ?, verification = ?,
       attempts = ?, completed_at = ? WHERE id = ? AND status = 'pending'`
  )
  const updateFailed = db.prepare<[string, string, string, number, string]>(
    `UPDATE requests SET status = 'failed', credits_charged = 0, error_code = ?, error_message = ?, attempts = ?, completed_at = ?
     WHERE id = ? AND status = 'pending'`
  )

  /** Synchronous: call inside a transaction (`Sqlite.transact`). */
  const insertPendingSync = (r: NewRequest): void => {
    insertRow.run(r.id, r.projectId, r.environment, r.keyId, r.endpoint, r.model, r.route, r.stream ? 1 : 0, r.idempotencyKey, r.rateCardVersion, r.creditsReserved, r.createdAt)
  }

  /** Synchronous: call inside the settlement transaction. */
  const completeSync = (id: string, c: Completion): void => {
    updateCompleted.run(c.route, c.creditsCharged, c.receiptId, JSON.stringify(c.verification), JSON.stringify(c.attempts), c.completedAt, id)
  }

  const failSync = (id: string, f: Failure): void => {
    updateFailed.run(f.code, f.message, JSON.stringify(f.attempts), f.completedAt, id)
  }

  return { insertPendingSync, completeSync, failSync } as const
}

