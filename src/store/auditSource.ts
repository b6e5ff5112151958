/**
 * The port `tollgate audit` reads a store through: one snapshot of the store, read as plain rows in
 * batches, whatever the engine (src/store/auditSqlite.ts, src/store/auditPg.ts). The reader
 * (src/store/auditReader.ts) runs the queries below through it and feeds the rows to the rulebook's
 * checker (spec/audit.ts), which never learns the engine.
 *
 * The queries are written once, in the SQL both engines speak (`TRUE`, joins, `UNION ALL`, no JSON
 * functions), with `@name` parameters: SQLite binds them as named, PostgreSQL as `$n`. Integer
 * columns arrive as JavaScript numbers on both (PostgreSQL's BIGINT parsed, see auditPg.ts).
 */
import type { AuditScope, ChainHeadRow, IdempotencyRow, KeyRow, ProjectRow, RateCardRow, ReceiptRow, UnreceiptedRow, WindowRow, HeldReservationRow } from "../../spec/audit.ts"
import { scopeBounds } from "../../spec/audit.ts"

export type Params = Readonly<Record<string, string | number | null>>

/** One snapshot of a store: every read sees the same committed state, however long the walk. */
export interface AuditSource {
  /** What to call the store in the report (a file path, or the PostgreSQL URL without credentials). */
  readonly label: string
  /** The rows of one query, in batches of at most `batch` rows, in the query's order. */
  readonly batches: <T>(sql: string, params: Params, batch: number) => AsyncIterable<ReadonlyArray<T>>
  /** The same, each row an array of its columns in the query's order (cheaper for the long walks). */
  readonly arrays: (sql: string, params: Params, batch: number) => AsyncIterable<ReadonlyArray<ArrayRow>>
  /** End the snapshot and let the connection go. */
  readonly close: () => Promise<void>
}

/** A query of the audit and the parameters it names. */
export interface AuditQuery {
  readonly sql: string
  readonly params: Params
}

/** The rows of one query, one at a time (batched underneath). */
export async function* rows<T>(source: AuditSource, q: AuditQuery, batch = 1000): AsyncIterable<T> {
  for await (const chunk of source.batches<T>(q.sql, q.params, batch)) yield* chunk
}

/** All rows of a small query. */
export const allRows = async <T>(source: AuditSource, q: AuditQuery): Promise<Array<T>> => {
  const out: Array<T> = []
  for await (const row of rows<T>(source, q)) out.push(row)
  return out
}

/** A project's chain over the seq range a window spans (a --period walk). */
export interface ChainRange {
  readonly project_id: string
  readonly lo: number
  readonly hi: number
}

/**
 * The joined receipts row's columns, in the order a row read as an array carries them (`nest` reads
 * them by position: no object per row from the driver, ≈ a third of the read's CPU on SQLite).
 */
const RECEIPT_FIELDS = [
  "r.id", "r.request_id", "r.project_id", "r.environment", "r.period", "r.seq", "r.credits_charged", "r.rate_card_version", "r.body",
  "r.prev_hash", "r.hash", "r.signature", "r.signing_key_id", "r.created_at",
  "q.id", "q.project_id", "q.environment", "q.status", "q.receipt_id", "q.credits_charged", "q.credits_reserved", "q.rate_card_version",
  "q.created_at",
  "v.id", "v.project_id", "v.period", "v.amount", "v.state", "v.charge"
] as const

/** The position of each column in a receipts row read as an array. */
const C = Object.fromEntries(RECEIPT_FIELDS.map((f, i) => [f, i])) as { readonly [K in (typeof RECEIPT_FIELDS)[number]]: number }

const RECEIPT_COLUMNS = `
  ${RECEIPT_FIELDS.join(", ")}
  FROM receipts r
  LEFT JOIN requests q ON q.id = r.request_id
  LEFT JOIN reservations v ON v.request_id = r.request_id`

/** The audit's queries for one scope. */
export const auditQueries = (scope: AuditScope) => {
  const project = scope.project ?? null
  const period = scope.period ?? null
  const bounds = period === null ? null : scopeBounds(period)
  const all: Params = { project, period, start: bounds?.startMillis ?? null, end: bounds?.endMillis ?? null }
  const byProject = (col: string) => (project === null ? "TRUE" : `${col} = @project`)
  const byPeriod = (col: string) => (period === null ? "TRUE" : `${col} = @period`)
  const byTime = (col: string) => (period === null ? "TRUE" : `${col} >= @start AND ${col} < @end`)
  /** Only the parameters the text names (PostgreSQL counts every `$n` it is given). */
  const q = (sql: string, extra: Params = {}): AuditQuery => {
    const p = { ...all, ...extra }
    return { sql, params: Object.fromEntries(Object.entries(p).filter(([k]) => new RegExp(`@${k}\\b`).test(sql))) }
  }
  return {
    keys: q(`SELECT id, public_key, retired_at FROM receipt_keys ORDER BY id`),
    rateCards: q(`SELECT version, effective_from, prices FROM rate_cards ORDER BY version`),
    projects: q(`SELECT id, budget_credits, updated_at FROM projects ORDER BY id`),
    // last_hold_at: when the window's latest reservation was made (the grandfathered-cap rule, spec/ledger.ts).
    windows: q(
      `SELECT w.project_id, w.period, w.spent, w.reserved, r.last_hold_at FROM budget_windows w
       LEFT JOIN (SELECT project_id, period, MAX(created_at) AS last_hold_at FROM reservations GROUP BY project_id, period) r
         ON r.project_id = w.project_id AND r.period = w.period
       WHERE ${byProject("w.project_id")} AND ${byPeriod("w.period")}
       ORDER BY w.project_id, w.period`
    ),
    // The key and end-user scopes' windows (issue 41): the stored rows, each window's sums over the holds
    // made in it (its settled holds' receipts, its held amounts), and the caps; filtered by project in JS
    // (a key's project is its row's), by period here.
    scopeWindows: q(`SELECT scope, period, spent, reserved FROM scope_windows WHERE ${byPeriod("period")} ORDER BY scope, period`),
    scopeHolds: q(
      `SELECT h.scope, h.period, h.project_id, SUM(h.receipt) AS receipt_sum, SUM(h.held) AS held_sum,
              SUM(h.receipted) AS receipts, MAX(h.created_at) AS last_hold_at
         FROM (SELECT CASE WHEN x.k = 1 THEN 'key:' || v.key_id ELSE 'end_user:' || v.project_id || '/' || v.end_user END AS scope,
                      v.period, v.project_id, v.created_at,
                      COALESCE(c.credits_charged, 0) AS receipt, CASE WHEN c.id IS NULL THEN 0 ELSE 1 END AS receipted,
                      CASE WHEN v.state = 'held' THEN v.amount ELSE 0 END AS held
                 FROM reservations v
                 JOIN (SELECT 1 AS k UNION ALL SELECT 2) x ON (x.k = 1 AND v.key_id IS NOT NULL) OR (x.k = 2 AND v.end_user IS NOT NULL)
                 LEFT JOIN receipts c ON c.request_id = v.request_id AND v.state = 'settled'
                WHERE ${byProject("v.project_id")} AND ${byPeriod("v.period")}) h
        GROUP BY h.scope, h.period, h.project_id ORDER BY h.scope, h.period`
    ),
    scopeCaps: q(
      `SELECT 'key:' || id AS scope, project_id, budget_credits AS cap, budget_changed_at AS cap_changed_at FROM api_keys WHERE ${byProject("project_id")}
       UNION ALL
       SELECT 'end_user:' || project_id || '/' || end_user, project_id, budget_credits, updated_at FROM end_users WHERE ${byProject("project_id")}`
    ),
    endUserDefaults: q(`SELECT id AS project_id, end_user_budget_credits AS cap, updated_at AS cap_changed_at FROM projects WHERE ${byProject("id")}`),
    chainHeads: q(`SELECT project_id, seq, hash FROM chain_heads WHERE ${byProject("project_id")} ORDER BY project_id`),
    receiptCount: q(`SELECT COUNT(*) AS n FROM receipts r WHERE ${byProject("r.project_id")} AND ${byPeriod("r.period")}`),
    /** Every receipt in scope, in settlement order per project (no period filter). */
    receipts: q(`SELECT ${RECEIPT_COLUMNS} WHERE ${byProject("r.project_id")} ORDER BY r.project_id, r.seq`),
    // A window's receipts interleave with the neighbouring windows' near its edges, so a --period walk
    // follows each chain over the seq range the window spans, starting from the link before it.
    chainRanges: q(
      `SELECT project_id, MIN(seq) AS lo, MAX(seq) AS hi FROM receipts WHERE ${byProject("project_id")} AND period = @period GROUP BY project_id ORDER BY project_id`
    ),
    hashAt: (project: string, seq: number) => q(`SELECT hash FROM receipts WHERE project_id = @chain AND seq = @seq`, { chain: project, seq }),
    walk: (range: ChainRange) =>
      q(`SELECT ${RECEIPT_COLUMNS} WHERE r.project_id = @chain AND r.seq BETWEEN @lo AND @hi ORDER BY r.seq`, { chain: range.project_id, lo: range.lo, hi: range.hi }),
    held: q(
      `SELECT id, project_id, period, amount FROM reservations WHERE state = 'held' AND ${byProject("project_id")} AND ${byPeriod("period")} ORDER BY id`
    ),
    unreceipted: q(
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
    ),
    idempotency: q(
      `SELECT i.project_id, i.environment, i.key, i.request_id, i.state, i.status, i.body,
              q.status AS request_status, c.id AS receipt_id, c.project_id AS receipt_project_id,
              c.environment AS receipt_environment, c.credits_charged AS receipt_credits_charged
         FROM idempotency i
         LEFT JOIN requests q ON q.id = i.request_id
         LEFT JOIN receipts c ON c.request_id = i.request_id
        WHERE ${byProject("i.project_id")} AND ${byTime("i.created_at")}`
    )
  }
}

export type { ChainHeadRow, HeldReservationRow, IdempotencyRow, KeyRow, ProjectRow, RateCardRow, UnreceiptedRow, WindowRow }

/** A row read as an array: its columns in the query's order. */
export type ArrayRow = ReadonlyArray<unknown>

/** The checker's shape of a joined receipts row read as an array (`receipts` and `walk` select RECEIPT_FIELDS). */
export const nest = (a: ArrayRow): ReceiptRow => ({
  id: a[C["r.id"]] as string,
  request_id: a[C["r.request_id"]] as string,
  project_id: a[C["r.project_id"]] as string,
  environment: a[C["r.environment"]] as string,
  period: a[C["r.period"]] as string,
  seq: a[C["r.seq"]] as number,
  credits_charged: a[C["r.credits_charged"]] as number,
  rate_card_version: a[C["r.rate_card_version"]] as string,
  body: a[C["r.body"]] as string,
  prev_hash: a[C["r.prev_hash"]] as string,
  hash: a[C["r.hash"]] as string,
  signature: a[C["r.signature"]] as string,
  signing_key_id: a[C["r.signing_key_id"]] as string,
  created_at: a[C["r.created_at"]] as number,
  request:
    a[C["q.id"]] === null
      ? null
      : {
          id: a[C["q.id"]] as string,
          project_id: a[C["q.project_id"]] as string,
          environment: a[C["q.environment"]] as string,
          status: a[C["q.status"]] as string,
          receipt_id: a[C["q.receipt_id"]] as string | null,
          credits_charged: a[C["q.credits_charged"]] as number | null,
          credits_reserved: a[C["q.credits_reserved"]] as number,
          rate_card_version: a[C["q.rate_card_version"]] as string | null,
          created_at: a[C["q.created_at"]] as number
        },
  reservation:
    a[C["v.id"]] === null
      ? null
      : {
          id: a[C["v.id"]] as string,
          project_id: a[C["v.project_id"]] as string,
          period: a[C["v.period"]] as string,
          amount: a[C["v.amount"]] as number,
          state: a[C["v.state"]] as string,
          charge: a[C["v.charge"]] as number | null
        }
})
