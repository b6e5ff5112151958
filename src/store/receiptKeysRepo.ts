/**
 * The ReceiptSigner service's public keys (`receipt_keys` table, src/services/ReceiptSigner.ts):
 * registered at start, retired on rotation, kept forever so old receipts keep verifying.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export interface ReceiptKeyRow {
  readonly id: string
  readonly public_key: string
  readonly created_at: number
  readonly retired_at: number | null
}

/** The statements, and the transaction runner the service keeps its boundary with. */
export const makeReceiptKeysRepo = (sql: SqlClient.SqlClient) => ({
  withTransaction: sql.withTransaction,

  /** Register key `id` (once: a key already registered stays as stored). */
  register: (id: string, publicPem: string, now: number) =>
    sql`INSERT INTO receipt_keys (id, public_key, created_at) VALUES (${id}, ${publicPem}, ${now})
        ON CONFLICT (id) DO NOTHING`,

  /** Back to a key that was retired: it signs again, so it is no longer retired. */
  unretire: (id: string) => sql`UPDATE receipt_keys SET retired_at = NULL WHERE id = ${id}`,

  /** Retire every active key but `id`, at `now`: the ids retired. */
  retireOthers: (id: string, now: number) =>
    sql<{ id: string }>`UPDATE receipt_keys SET retired_at = ${now} WHERE id <> ${id} AND retired_at IS NULL RETURNING id`,

  /** Every key ever registered, oldest first. */
  all: () => sql<ReceiptKeyRow>`SELECT id, public_key, created_at, retired_at FROM receipt_keys ORDER BY created_at`
})

export class ReceiptKeysRepo extends Effect.Service<ReceiptKeysRepo>()("tollgate/ReceiptKeysRepo", {
  effect: Effect.map(SqlClient.SqlClient, makeReceiptKeysRepo)
}) {}
