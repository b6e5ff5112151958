/**
 * The receipt log's statements (issue 43; tables of migration 0011, src/store/migrationsReceiptLog.ts),
 * the export's reads and the statements' sums, in the SQL both engines speak. src/services/ReceiptLog.ts
 * runs them off the governed call path: they read receipts already committed and write only the
 * log's own tables.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { UsageRow } from "./ledgerRepo.ts"

export interface CheckpointRow {
  readonly tree_size: number
  readonly root: string
  readonly note: string
  readonly created_at: number
}

/** One route's sums over a period's receipts (the usage read's row, over every environment). */
export type RouteSumRow = UsageRow

export const makeReceiptLogRepo = (sql: SqlClient.SqlClient) => ({
  withTransaction: sql.withTransaction,

  /** Projects whose chain is longer than their log: head and log sizes. */
  behind: () =>
    sql<{ project_id: string; head: number; tree_size: number | null }>`
      SELECT h.project_id AS project_id, h.seq AS head, l.tree_size AS tree_size
      FROM chain_heads h LEFT JOIN receipt_log l ON l.project_id = h.project_id
      WHERE h.seq > COALESCE(l.tree_size, 0)`,

  /** The log's size for a project (0 when it has none). */
  size: (projectId: string) =>
    Effect.map(sql<{ tree_size: number }>`SELECT tree_size FROM receipt_log WHERE project_id = ${projectId}`, (rows) => rows[0]?.tree_size ?? 0),

  /** The chain head's seq (0 when the project has no receipt). */
  head: (projectId: string) => Effect.map(sql<{ seq: number }>`SELECT seq FROM chain_heads WHERE project_id = ${projectId}`, (rows) => rows[0]?.seq ?? 0),

  /** Receipt hashes of seq lo+1..hi (leaf indices lo..hi−1), in order. */
  leafHashes: (projectId: string, lo: number, hi: number) =>
    sql<{ seq: number; hash: string }>`SELECT seq, hash FROM receipts WHERE project_id = ${projectId} AND seq > ${lo} AND seq <= ${hi} ORDER BY seq`,

  /** Stored nodes by id. */
  nodes: (projectId: string, ids: ReadonlyArray<number>) =>
    ids.length === 0 ? Effect.succeed([]) : sql<{ node: number; hash: string }>`SELECT node, hash FROM receipt_log_nodes WHERE project_id = ${projectId} AND ${sql.in("node", ids)}`,

  /** Store nodes (a node already there is the same node: left as it is). */
  insertNodes: (projectId: string, rows: ReadonlyArray<{ readonly node: number; readonly hash: string }>) =>
    rows.length === 0
      ? Effect.void
      : Effect.asVoid(sql`INSERT INTO receipt_log_nodes ${sql.insert(rows.map((r) => ({ project_id: projectId, node: r.node, hash: r.hash })))} ON CONFLICT DO NOTHING`),

  /** The log covers `size` receipts (never shrinks: a slower instance's smaller size is ignored). */
  grow: (projectId: string, size: number) =>
    Effect.asVoid(sql`INSERT INTO receipt_log (project_id, tree_size) VALUES (${projectId}, ${size})
      ON CONFLICT (project_id) DO UPDATE SET tree_size = excluded.tree_size WHERE receipt_log.tree_size < excluded.tree_size`),

  latestCheckpoint: (projectId: string) =>
    Effect.map(
      sql<CheckpointRow>`SELECT tree_size, root, note, created_at FROM receipt_checkpoints WHERE project_id = ${projectId} ORDER BY tree_size DESC LIMIT 1`,
      (rows) => rows[0]
    ),

  checkpointAt: (projectId: string, size: number) =>
    Effect.map(sql<CheckpointRow>`SELECT tree_size, root, note, created_at FROM receipt_checkpoints WHERE project_id = ${projectId} AND tree_size = ${size}`, (rows) => rows[0]),

  /** Store a checkpoint unless one of that size is stored (the first stored is the one served). */
  insertCheckpoint: (projectId: string, row: CheckpointRow) =>
    Effect.asVoid(sql`INSERT INTO receipt_checkpoints (project_id, tree_size, root, note, created_at)
      VALUES (${projectId}, ${row.tree_size}, ${row.root}, ${row.note}, ${row.created_at}) ON CONFLICT DO NOTHING`),

  /** A receipt's seq by its request, in the tenant scope (as GET /v1/requests/{id}/receipt reads it). */
  seqOfRequest: (projectId: string, environment: string, requestId: string) =>
    Effect.map(
      sql<{ seq: number }>`SELECT seq FROM receipts WHERE request_id = ${requestId} AND project_id = ${projectId} AND environment = ${environment}`,
      (rows) => rows[0]?.seq
    ),

  // -- export

  projectExists: (projectId: string) => Effect.map(sql<{ id: string }>`SELECT id FROM projects WHERE id = ${projectId}`, (rows) => rows.length > 0),

  /** The seq range of a period's receipts (undefined when it has none). */
  periodRange: (projectId: string, period: string) =>
    Effect.map(
      sql<{ lo: number | null; hi: number | null }>`SELECT MIN(seq) AS lo, MAX(seq) AS hi FROM receipts WHERE project_id = ${projectId} AND period = ${period}`,
      (rows) => (rows[0]?.lo == null || rows[0].hi == null ? undefined : { lo: rows[0].lo, hi: rows[0].hi })
    ),

  /** Up to `limit` stored bodies of seq lo..hi (and of `period`, when given), in chain order. */
  bodies: (projectId: string, lo: number, hi: number, period: string | null, limit: number) =>
    period === null
      ? sql<{ seq: number; body: string }>`SELECT seq, body FROM receipts WHERE project_id = ${projectId} AND seq >= ${lo} AND seq <= ${hi} ORDER BY seq LIMIT ${limit}`
      : sql<{ seq: number; body: string }>`SELECT seq, body FROM receipts WHERE project_id = ${projectId} AND seq >= ${lo} AND seq <= ${hi} AND period = ${period} ORDER BY seq LIMIT ${limit}`,

  // -- statements

  statement: (projectId: string, period: string) =>
    Effect.map(sql<{ body: string }>`SELECT body FROM statements WHERE project_id = ${projectId} AND period = ${period}`, (rows) => rows[0]?.body),

  insertStatement: (projectId: string, period: string, body: string, now: number) =>
    Effect.asVoid(sql`INSERT INTO statements (project_id, period, body, created_at) VALUES (${projectId}, ${period}, ${body}, ${now}) ON CONFLICT DO NOTHING`),

  /** Every stored statement (the audit's check), oldest period first. */
  allStatements: () => sql<{ project_id: string; period: string; body: string }>`SELECT project_id, period, body FROM statements ORDER BY project_id, period`,

  /** Reservations of a project's period still held: the period is not closed while any is. */
  heldIn: (projectId: string, period: string) =>
    Effect.map(sql<{ n: number }>`SELECT COUNT(*) AS n FROM reservations WHERE project_id = ${projectId} AND period = ${period} AND state = 'held'`, (rows) => rows[0]?.n ?? 0),

  /** The figures of a period's receipts, per route, over every environment. */
  routeSums: (projectId: string, period: string) =>
    sql<RouteSumRow>`SELECT route, COUNT(*) AS requests, SUM(credits_charged) AS credits,
         SUM(input_tokens) AS input_tokens, SUM(cached_input_tokens) AS cached_input_tokens,
         SUM(output_tokens) AS output_tokens, SUM(reasoning_tokens) AS reasoning_tokens
       FROM receipts WHERE project_id = ${projectId} AND period = ${period} GROUP BY route ORDER BY route`,

  rateCardVersions: (projectId: string, period: string) =>
    Effect.map(sql<{ v: string }>`SELECT DISTINCT rate_card_version AS v FROM receipts WHERE project_id = ${projectId} AND period = ${period} ORDER BY v`, (rows) => rows.map((r) => r.v)),

  window: (projectId: string, period: string) =>
    Effect.map(
      sql<{ cap: number; spent: number | null; created_at: number }>`SELECT p.budget_credits AS cap, w.spent AS spent, p.created_at AS created_at FROM projects p
        LEFT JOIN budget_windows w ON w.project_id = p.id AND w.period = ${period} WHERE p.id = ${projectId}`,
      (rows) => rows[0]
    ),

  /** Projects with a budget window of `period` and no statement of it yet. */
  withoutStatement: (period: string) =>
    sql<{ project_id: string }>`SELECT w.project_id AS project_id FROM budget_windows w
      WHERE w.period = ${period} AND NOT EXISTS (SELECT 1 FROM statements s WHERE s.project_id = w.project_id AND s.period = ${period})`
})

export class ReceiptLogRepo extends Effect.Service<ReceiptLogRepo>()("tollgate/ReceiptLogRepo", {
  effect: Effect.map(SqlClient.SqlClient, makeReceiptLogRepo)
}) {}
