/**
 * Migration 0013_pg_bounded_waits — issue 40, item 3 (docs/decisions/0046): a reservation's wait for a
 * hot row is bounded. `tollgate_reserve_bounded(lock_timeout_ms, batch)` is `tollgate_reserve_many`
 * (migration 0010) with PostgreSQL's `lock_timeout` set for its own transaction only (`set_config(…,
 * true)`: the statement is its transaction, so the pooled connection keeps the server's setting for
 * everything else — settlements, voids and the sweep still wait as long as they must). A lock it waits
 * for past the bound (a budget window, an idempotency claim another instance is committing) raises
 * SQLSTATE 55P03 and rolls the whole statement back: no claim, no request row, no hold. The caller
 * answers 503 server_overloaded. Nothing on SQLite: its writer is one connection and waits for nobody.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export const migrationBoundedWaits = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    orElse: () => Effect.void,
    pg: () =>
      sql.unsafe(`CREATE FUNCTION tollgate_reserve_bounded(p_lock_timeout_ms INTEGER, p_batch JSONB)
  RETURNS TABLE (o_i INTEGER, o_outcome TEXT, o_cap BIGINT, o_spent BIGINT, o_reserved BIGINT, o_fingerprint TEXT, o_request_id TEXT,
    o_state TEXT, o_status BIGINT, o_content_type TEXT, o_body BYTEA, o_expires_at BIGINT)
  LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout_ms::TEXT || 'ms', true);
  RETURN QUERY SELECT * FROM tollgate_reserve_many(p_batch);
END
$fn$`)
  })
})
