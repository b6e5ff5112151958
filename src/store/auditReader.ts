/**
 * The store reader of `tollgate audit` (src/cli/audit.ts is the command): checks a SQLite store
 * against the rulebook (spec/audit.ts) and returns the summary and the findings.
 *
 * Reads the SQLite file read-only, in one read transaction (a consistent snapshot while the gateway
 * keeps writing), streaming every large table with `.iterate()` so memory stays bounded whatever the
 * number of receipts. Joins are done by SQLite (indexed), so each receipt arrives with its request and
 * reservation. A PostgreSQL reader (issue 16) would feed the same auditor the same rows.
 */
import Database from "better-sqlite3"
import { sqliteFilename } from "../domain/databaseUrl.ts"
import {
  type AuditScope,
  type AuditSummary,
  type Finding,
  type IdempotencyRow,
  type KeyRow,
  makeAuditor,
  type ReceiptRow,
  receiptKeyId,
  scopeBounds,
  type UnreceiptedRow
} from "../../spec/audit.ts"
import { isPeriod } from "../../spec/ledger.ts"
import { GENESIS_HASH } from "../../spec/receipt.ts"

export interface AuditOptions {
  /** DATABASE_URL form (`sqlite:<path>`) or a plain path to the SQLite file. */
  readonly database: string
  readonly project?: string | undefined
  readonly period?: string | undefined
  /** Trust only these public keys (PEM text) instead of the store's receipt_keys table. */
  readonly publicKeys?: ReadonlyArray<string> | undefined
  /** Keep at most this many findings in detail (all are counted). Default 1000. */
  readonly limit?: number | undefined
  readonly onFinding?: ((finding: Finding) => void) | undefined
  /** Called about once a second while receipts stream by. */
  readonly onProgress?: ((progress: { readonly receipts: number; readonly total: number; readonly elapsedMs: number }) => void) | undefined
}

export interface AuditResult {
  readonly database: string
  readonly scope: AuditScope
  readonly summary: AuditSummary
  /** The first `limit` findings, in the order found. */
  readonly findings: ReadonlyArray<Finding>
  readonly omitted: number
  readonly durationMs: number
  readonly receiptsPerSecond: number
  readonly keySource: "store" | "pinned"
}

/** The SQLite file to audit: a DATABASE_URL (`sqlite:<path>`) or a plain path. */
export const databaseFile = (database: string): string => {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(database) && !database.startsWith("sqlite:")) {
    throw new Error(`tollgate audit reads SQLite stores (sqlite:<path>); got ${database.split(":")[0]}:…`)
  }
  const path = database.startsWith("sqlite:") ? sqliteFilename(database) : database
  if (path === ":memory:") throw new Error("an in-memory store cannot be audited from outside the gateway")
  return path
}

const RECEIPT_COLUMNS = `
  r.id, r.request_id, r.project_id, r.environment, r.period, r.seq, r.credits_charged, r.rate_card_version, r.body,
  r.prev_hash, r.hash, r.signature, r.signing_key_id, r.created_at,
  q.id AS q_id, q.project_id AS q_project_id, q.environment AS q_environment, q.status AS q_status, q.receipt_id AS q_receipt_id,
  q.credits_charged AS q_credits_charged, q.credits_reserved AS q_credits_reserved, q.rate_card_version AS q_rate_card_version,
  q.created_at AS q_created_at,
  v.id AS v_id, v.project_id AS v_project_id, v.period AS v_period, v.amount AS v_amount, v.state AS v_state, v.charge AS v_charge
  FROM receipts r
  LEFT JOIN requests q ON q.id = r.request_id
  LEFT JOIN reservations v ON v.request_id = r.request_id`

interface FlatReceipt extends Omit<ReceiptRow, "request" | "reservation"> {
  readonly q_id: string | null
  readonly q_project_id: string
  readonly q_environment: string
  readonly q_status: string
  readonly q_receipt_id: string | null
  readonly q_credits_charged: number | null
  readonly q_credits_reserved: number
  readonly q_rate_card_version: string | null
  readonly q_created_at: number
  readonly v_id: string | null
  readonly v_project_id: string
  readonly v_period: string
  readonly v_amount: number
  readonly v_state: string
  readonly v_charge: number | null
}

const nest = (f: FlatReceipt): ReceiptRow => ({
  id: f.id,
  request_id: f.request_id,
  project_id: f.project_id,
  environment: f.environment,
  period: f.period,
  seq: f.seq,
  credits_charged: f.credits_charged,
  rate_card_version: f.rate_card_version,
  body: f.body,
  prev_hash: f.prev_hash,
  hash: f.hash,
  signature: f.signature,
  signing_key_id: f.signing_key_id,
  created_at: f.created_at,
  request:
    f.q_id === null
      ? null
      : {
          id: f.q_id,
          project_id: f.q_project_id,
          environment: f.q_environment,
          status: f.q_status,
          receipt_id: f.q_receipt_id,
          credits_charged: f.q_credits_charged,
          credits_reserved: f.q_credits_reserved,
          rate_card_version: f.q_rate_card_version,
          created_at: f.q_created_at
        },
  reservation:
    f.v_id === null
      ? null
      : { id: f.v_id, project_id: f.v_project_id, period: f.v_period, amount: f.v_amount, state: f.v_state, charge: f.v_charge }
})

/** Audit one SQLite store. Synchronous: better-sqlite3 is. Throws when the store cannot be read. */
export const auditStore = (options: AuditOptions): AuditResult => {
  const file = databaseFile(options.database)
  if (options.period !== undefined && !isPeriod(options.period)) throw new Error(`--period must be YYYY-MM (got ${options.period})`)
  const scope: AuditScope = { project: options.project, period: options.period }
  const limit = options.limit ?? 1000
  const kept: Array<Finding> = []
  let omitted = 0
  const auditor = makeAuditor((f) => {
    options.onFinding?.(f)
    if (kept.length < limit) kept.push(f)
    else omitted++
  }, scope)

  const db = new Database(file, { readonly: true, fileMustExist: true })
  const started = performance.now()
  try {
    db.pragma("query_only = ON")
    // One read transaction: every query below sees the same snapshot (WAL), however long the walk.
    db.exec("BEGIN")
    const project = options.project ?? null
    const period = options.period ?? null
    const bounds = period === null ? null : scopeBounds(period)
    const p = { project, period, start: bounds?.startMillis ?? null, end: bounds?.endMillis ?? null }
    const byProject = (col: string) => (project === null ? "1" : `${col} = @project`)
    const byPeriod = (col: string) => (period === null ? "1" : `${col} = @period`)
    const byTime = (col: string) => (period === null ? "1" : `${col} >= @start AND ${col} < @end`)
    const bind = <T extends object>(sql: string) => {
      const stmt = db.prepare(sql)
      const params: Record<string, unknown> = {}
      for (const [k, v] of Object.entries(p)) if (sql.includes(`@${k}`)) params[k] = v
      return { iterate: () => stmt.iterate(params) as IterableIterator<T>, get: () => stmt.get(params) as T | undefined }
    }

    // ---- context: small tables
    const pinned = options.publicKeys
    auditor.keys(
      pinned !== undefined && pinned.length > 0
        ? pinned.map((pem): KeyRow => ({ id: safeKeyId(pem), public_key: pem, retired_at: null }))
        : bind<KeyRow>(`SELECT id, public_key, retired_at FROM receipt_keys`).iterate()
    )
    auditor.rateCards(bind<{ version: string; effective_from: string; prices: string }>(`SELECT version, effective_from, prices FROM rate_cards`).iterate())
    auditor.projects(bind<{ id: string; budget_credits: number; updated_at: number }>(`SELECT id, budget_credits, updated_at FROM projects`).iterate())
    auditor.windows(
      // last_hold_at: when the window's latest reservation was made (the grandfathered-cap rule, spec/ledger.ts).
      bind<{ project_id: string; period: string; spent: number; reserved: number; last_hold_at: number | null }>(
        `SELECT w.project_id, w.period, w.spent, w.reserved, r.last_hold_at FROM budget_windows w
         LEFT JOIN (SELECT project_id, period, MAX(created_at) AS last_hold_at FROM reservations GROUP BY project_id, period) r
           ON r.project_id = w.project_id AND r.period = w.period
         WHERE ${byProject("w.project_id")} AND ${byPeriod("w.period")}`
      ).iterate()
    )
    if (period === null) {
      auditor.chainHeads(bind<{ project_id: string; seq: number; hash: string }>(`SELECT project_id, seq, hash FROM chain_heads WHERE ${byProject("project_id")}`).iterate())
    }

    // ---- receipts, in settlement order per project
    const total =
      bind<{ n: number }>(`SELECT COUNT(*) AS n FROM receipts r WHERE ${byProject("r.project_id")} AND ${byPeriod("r.period")}`).get()?.n ?? 0
    let seen = 0
    let lastTick = started
    const feed = (rows: IterableIterator<FlatReceipt>) => {
      for (const row of rows) {
        auditor.receipt(nest(row))
        if ((++seen & 1023) === 0 && options.onProgress !== undefined) {
          const now = performance.now()
          if (now - lastTick >= 1000) {
            lastTick = now
            options.onProgress({ receipts: seen, total, elapsedMs: now - started })
          }
        }
      }
    }
    if (period === null) {
      feed(bind<FlatReceipt>(`SELECT ${RECEIPT_COLUMNS} WHERE ${byProject("r.project_id")} ORDER BY r.project_id, r.seq`).iterate())
    } else {
      // A window's receipts interleave with the neighbouring windows' near its edges, so walk each
      // chain over the seq range the window spans, starting from the link before it.
      const ranges = [
        ...bind<{ project_id: string; lo: number; hi: number }>(
          `SELECT project_id, MIN(seq) AS lo, MAX(seq) AS hi FROM receipts WHERE ${byProject("project_id")} AND period = @period GROUP BY project_id ORDER BY project_id`
        ).iterate()
      ]
      const before = db.prepare(`SELECT hash FROM receipts WHERE project_id = ? AND seq = ?`)
      const walk = db.prepare(`SELECT ${RECEIPT_COLUMNS} WHERE r.project_id = ? AND r.seq BETWEEN ? AND ? ORDER BY r.seq`)
      for (const range of ranges) {
        const prev = range.lo <= 1 ? GENESIS_HASH : (before.get(range.project_id, range.lo - 1) as { hash: string } | undefined)?.hash
        auditor.chainStart(range.project_id, range.lo, prev)
        feed(walk.iterate(range.project_id, range.lo, range.hi) as IterableIterator<FlatReceipt>)
      }
    }

    // ---- reservations still held, requests settled without a receipt, idempotency records
    for (const row of bind<{ id: string; project_id: string; period: string; amount: number }>(
      `SELECT id, project_id, period, amount FROM reservations WHERE state = 'held' AND ${byProject("project_id")} AND ${byPeriod("period")}`
    ).iterate()) auditor.heldReservation(row)

    for (const row of bind<UnreceiptedRow>(
      `SELECT q.id AS request_id, q.project_id, q.status AS request_status, v.id AS reservation_id, v.state AS reservation_state
         FROM requests q LEFT JOIN reservations v ON v.request_id = q.id
        WHERE (q.status = 'completed' OR v.state = 'settled')
          AND NOT EXISTS (SELECT 1 FROM receipts c WHERE c.request_id = q.id)
          AND ${byProject("q.project_id")} AND ${byTime("q.created_at")}
       UNION ALL
       SELECT v.request_id, v.project_id, NULL, v.id, v.state
         FROM reservations v
        WHERE v.state = 'settled'
          AND NOT EXISTS (SELECT 1 FROM requests q WHERE q.id = v.request_id)
          AND NOT EXISTS (SELECT 1 FROM receipts c WHERE c.request_id = v.request_id)
          AND ${byProject("v.project_id")} AND ${byPeriod("v.period")}`
    ).iterate()) auditor.unreceipted(row)

    for (const row of bind<IdempotencyRow>(
      `SELECT i.project_id, i.environment, i.key, i.request_id, i.state, i.status, i.body,
              q.status AS request_status, c.id AS receipt_id, c.project_id AS receipt_project_id,
              c.environment AS receipt_environment, c.credits_charged AS receipt_credits_charged
         FROM idempotency i
         LEFT JOIN requests q ON q.id = i.request_id
         LEFT JOIN receipts c ON c.request_id = i.request_id
        WHERE ${byProject("i.project_id")} AND ${byTime("i.created_at")}`
    ).iterate()) auditor.idempotency(row)

    db.exec("COMMIT")
    const summary = auditor.finish()
    const durationMs = performance.now() - started
    return {
      database: file,
      scope,
      summary,
      findings: kept,
      omitted,
      durationMs,
      receiptsPerSecond: durationMs > 0 ? Math.round((summary.stats.receipts * 1000) / durationMs) : 0,
      keySource: pinned !== undefined && pinned.length > 0 ? "pinned" : "store"
    }
  } finally {
    db.close()
  }
}

/** A pinned key's id; an unreadable PEM gets an id the checker will reject as invalid. */
const safeKeyId = (pem: string): string => {
  try {
    return receiptKeyId(pem)
  } catch {
    return "rk_unreadable"
  }
}

