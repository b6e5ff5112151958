/**
 * Migration 0011_receipt_log — issue 43 (DESIGN §11): the per-project Merkle log of the receipts, its
 * signed checkpoints and the monthly statements. Tables only; the receipts table is not touched, so
 * the governed call writes exactly what it wrote before (the log is built afterwards, from receipts
 * already committed, by src/services/ReceiptLog.ts).
 *
 * - receipt_log: how many of a project's receipts (seq 1..tree_size) the stored nodes cover.
 * - receipt_log_nodes: the complete subtrees of 16 leaves and more (RFC 9162 §2.1 node hashes, hex),
 *   `node` = index × 64 + level (level ≥ 4: 2^level leaves from leaf index × 2^level). A subtree of
 *   fewer leaves is hashed again from the receipts' own hashes when a proof needs it (≤ 15 rows), so
 *   the log writes one row every 8 receipts, not two a receipt. Rows are a pure function of the
 *   receipts: instances that build the same node write the same row (ON CONFLICT DO NOTHING).
 * - receipt_checkpoints: one signed note per project and tree size, the first one stored wins.
 * - statements: one signed statement per project and closed period, the first one stored wins.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { pgDdl } from "./migrations.ts"

const TABLES = [
  `CREATE TABLE receipt_log (project_id TEXT PRIMARY KEY, tree_size INTEGER NOT NULL CHECK (tree_size >= 0))`,
  `CREATE TABLE receipt_log_nodes (project_id TEXT NOT NULL, node INTEGER NOT NULL, hash TEXT NOT NULL, PRIMARY KEY (project_id, node))`,
  `CREATE TABLE receipt_checkpoints (
    project_id TEXT NOT NULL,
    tree_size INTEGER NOT NULL,
    root TEXT NOT NULL,
    note TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, tree_size)
  )`,
  `CREATE TABLE statements (
    project_id TEXT NOT NULL,
    period TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, period)
  )`
]

export const migrationReceiptLog = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  for (const text of TABLES) yield* sql.onDialectOrElse({ pg: () => sql.unsafe(pgDdl(text)), orElse: () => sql.unsafe(text) })
})
