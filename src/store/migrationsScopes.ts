/**
 * Migration 0014_budget_scopes — issue 41, item 1 (spec/scopes.ts, docs/decisions/0047 and 0049):
 * budgets held at the key and end-user scopes besides the project, all or none.
 *
 * - `api_keys.budget_credits`: a key's cap (NULL: none — still held, without a limit);
 * - `projects.end_user_budget_credits`: the project's default cap for each of its end users (NULL: none);
 * - `end_users`: an end user's own cap, which overrides the default (a row whose cap is NULL: no
 *   budget at all). The column is `end_user`, not `user` (a reserved word in PostgreSQL);
 * - `scope_windows`: the key and end-user scopes' windows, named by spec/scopes.ts `accountOf`
 *   (`key:<key id>`, `end_user:<project>/<user>`); the project keeps its `budget_windows` row;
 * - `reservations.key_id`, `reservations.end_user`: the scopes a hold is in, so a settlement, a void and
 *   the recovery sweep resolve it in every one of them without being told.
 *
 * Lock order, on PostgreSQL: a scope's row is only written by a transaction that holds its project's
 * `budget_windows` row already (a key and an end user belong to one project), so adding them to the
 * reservation, the settlement and the abandonment adds no cycle to the order they had.
 *
 * PostgreSQL: `tollgate_reserve` takes the key and the end user, and holds in every scope in the same
 * statement — the project's guarded UPDATE as before, then one guarded upsert per other scope (the cap
 * read inside it, on the locked row); a refusal undoes what the function held (it holds the rows'
 * locks, nobody saw it) and answers every scope's figures and the scope that refused. The settlement
 * and the abandonment are the same functions as before, renamed `…_project`, wrapped by functions of
 * their old names that post the same charge (or release) to the hold's other scopes.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { pgDdl } from "./migrations.ts"
import { endUserCapSql, keyCapSql, scopeHoldSql } from "./scopeSql.ts"

const TABLES = [
  `ALTER TABLE api_keys ADD COLUMN budget_credits INTEGER CHECK (budget_credits IS NULL OR budget_credits >= 0)`,
  `ALTER TABLE projects ADD COLUMN end_user_budget_credits INTEGER CHECK (end_user_budget_credits IS NULL OR end_user_budget_credits >= 0)`,
  `CREATE TABLE end_users (
    project_id TEXT NOT NULL REFERENCES projects(id),
    end_user TEXT NOT NULL,
    budget_credits INTEGER CHECK (budget_credits IS NULL OR budget_credits >= 0),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, end_user)
  )`,
  `CREATE TABLE scope_windows (
    scope TEXT NOT NULL,
    period TEXT NOT NULL,
    spent INTEGER NOT NULL DEFAULT 0 CHECK (spent >= 0),
    reserved INTEGER NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    PRIMARY KEY (scope, period)
  )`,
  `ALTER TABLE reservations ADD COLUMN key_id TEXT`,
  `ALTER TABLE reservations ADD COLUMN end_user TEXT`
]

export const FIGURES = `o_outcome TEXT, o_cap BIGINT, o_spent BIGINT, o_reserved BIGINT, o_fingerprint TEXT, o_request_id TEXT,
    o_state TEXT, o_status BIGINT, o_content_type TEXT, o_body BYTEA, o_expires_at BIGINT,
    o_scope TEXT, o_key_cap BIGINT, o_key_spent BIGINT, o_key_reserved BIGINT, o_eu_cap BIGINT, o_eu_spent BIGINT, o_eu_reserved BIGINT`

const NO_SCOPES = "NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT"

const pg = [
  `DROP FUNCTION tollgate_reserve_bounded(INTEGER, JSONB)`,
  `DROP FUNCTION tollgate_reserve_many(JSONB)`,
  `DROP FUNCTION tollgate_reserve(BIGINT, BIGINT, INTEGER, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, BIGINT,
     TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT)`,
  // As migration 0008's, plus: the hold in the key's and the end user's windows (all or none), the
  // reservation row naming them, and on refusal every scope's figures and the scope that refused.
  `CREATE FUNCTION tollgate_reserve(
    p_now BIGINT, p_epoch BIGINT, p_fence INTEGER,
    c_project TEXT, c_environment TEXT, c_key TEXT, c_fingerprint TEXT,
    r_id TEXT, r_project TEXT, r_environment TEXT, r_key_id TEXT, r_endpoint TEXT, r_model TEXT, r_route TEXT,
    r_stream BIGINT, r_idempotency_key TEXT, r_rate_card_version TEXT, r_created_at BIGINT,
    h_reservation TEXT, h_request TEXT, h_project TEXT, h_period TEXT, h_deadline BIGINT,
    p_amount BIGINT, h_key TEXT, h_end_user TEXT)
  RETURNS TABLE (${FIGURES})
  LANGUAGE plpgsql AS $fn$
DECLARE
  v_round INTEGER;
  v_claimed BOOLEAN := FALSE;
  v_live RECORD;
  v_held BOOLEAN := FALSE;
  v_scope TEXT := NULL;
  v_key TEXT := CASE WHEN h_key IS NULL THEN NULL ELSE 'key:' || h_key END;
  v_eu TEXT := CASE WHEN h_end_user IS NULL THEN NULL ELSE 'end_user:' || h_project || '/' || h_end_user END;
BEGIN
  PERFORM pg_advisory_xact_lock(p_fence, hashtext(h_reservation));
  IF c_key IS NOT NULL THEN
    FOR v_round IN 1..3 LOOP
      INSERT INTO idempotency (project_id, environment, key, fingerprint, request_id, state, created_at, expires_at, epoch)
        VALUES (c_project, c_environment, c_key, c_fingerprint, r_id, 'in_flight', p_now, h_deadline, p_epoch)
        ON CONFLICT DO NOTHING;
      IF FOUND THEN v_claimed := TRUE; EXIT; END IF;
      DELETE FROM idempotency i WHERE i.project_id = c_project AND i.environment = c_environment AND i.key = c_key AND i.expires_at <= p_now;
      IF FOUND THEN
        INSERT INTO idempotency (project_id, environment, key, fingerprint, request_id, state, created_at, expires_at, epoch)
          VALUES (c_project, c_environment, c_key, c_fingerprint, r_id, 'in_flight', p_now, h_deadline, p_epoch)
          ON CONFLICT DO NOTHING;
        IF FOUND THEN v_claimed := TRUE; EXIT; END IF;
      END IF;
      SELECT i.fingerprint, i.request_id, i.state, i.status, i.content_type, i.body, i.expires_at INTO v_live
        FROM idempotency i WHERE i.project_id = c_project AND i.environment = c_environment AND i.key = c_key AND i.expires_at > p_now;
      IF FOUND THEN
        RETURN QUERY SELECT 'claim'::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, v_live.fingerprint::TEXT, v_live.request_id::TEXT,
          v_live.state::TEXT, v_live.status::BIGINT, v_live.content_type::TEXT, v_live.body::BYTEA, v_live.expires_at::BIGINT, ${NO_SCOPES};
        RETURN;
      END IF;
    END LOOP;
    IF NOT v_claimed THEN
      RAISE EXCEPTION 'idempotency key %: claim neither won nor found after 3 rounds', c_key;
    END IF;
  END IF;
  IF p_amount IS NOT NULL THEN
    FOR v_round IN 1..2 LOOP
      UPDATE budget_windows w SET reserved = w.reserved + p_amount
        WHERE w.project_id = h_project AND w.period = h_period
          AND w.spent + w.reserved + p_amount <= (SELECT p.budget_credits FROM projects p WHERE p.id = h_project);
      IF FOUND THEN v_held := TRUE; EXIT; END IF;
      -- The window did not exist yet (first hold of the month): open it and try once more.
      EXIT WHEN v_round = 2 OR EXISTS (SELECT 1 FROM budget_windows w WHERE w.project_id = h_project AND w.period = h_period);
      INSERT INTO budget_windows (project_id, period, spent, reserved) VALUES (h_project, h_period, 0, 0) ON CONFLICT DO NOTHING;
    END LOOP;
    IF NOT v_held THEN
      v_scope := 'project';
    ELSE
      -- The project's window row is locked by this transaction: every other scope of the project waits behind it.
      IF v_key IS NOT NULL THEN
        ${scopeHoldSql("v_key", "h_period", "p_amount", keyCapSql("h_key"))};
        IF NOT FOUND THEN v_scope := 'key'; END IF;
      END IF;
      IF v_scope IS NULL AND v_eu IS NOT NULL THEN
        ${scopeHoldSql("v_eu", "h_period", "p_amount", endUserCapSql("h_project", "h_end_user"))};
        IF NOT FOUND THEN v_scope := 'end_user'; END IF;
      END IF;
      IF v_scope IS NULL THEN
        INSERT INTO requests (id, project_id, environment, key_id, endpoint, model, route, stream, status,
            idempotency_key, rate_card_version, credits_reserved, created_at)
          VALUES (r_id, r_project, r_environment, r_key_id, r_endpoint, r_model, r_route, r_stream, 'pending',
            r_idempotency_key, r_rate_card_version, p_amount, r_created_at);
        INSERT INTO reservations (id, request_id, project_id, period, amount, state, deadline, created_at, epoch, key_id, end_user)
          VALUES (h_reservation, h_request, h_project, h_period, p_amount, 'held', h_deadline, p_now, p_epoch, h_key, h_end_user);
        RETURN QUERY SELECT 'held'::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT, NULL::TEXT,
          NULL::BYTEA, NULL::BIGINT, ${NO_SCOPES};
        RETURN;
      END IF;
      -- All or none: undo what this statement held (its rows are locked by it; nobody saw them).
      UPDATE budget_windows w SET reserved = w.reserved - p_amount WHERE w.project_id = h_project AND w.period = h_period;
      IF v_scope = 'end_user' THEN
        UPDATE scope_windows s SET reserved = s.reserved - p_amount WHERE s.scope = v_key AND s.period = h_period;
      END IF;
    END IF;
  END IF;
  IF v_claimed THEN
    DELETE FROM idempotency i WHERE i.project_id = c_project AND i.environment = c_environment AND i.key = c_key AND i.request_id = r_id;
  END IF;
  RETURN QUERY SELECT 'window'::TEXT, p.budget_credits::BIGINT, w.spent::BIGINT, w.reserved::BIGINT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT, NULL::TEXT,
      NULL::BYTEA, NULL::BIGINT, v_scope,
      CASE WHEN v_key IS NULL THEN NULL ELSE ${keyCapSql("h_key")} END::BIGINT, kw.spent::BIGINT, kw.reserved::BIGINT,
      CASE WHEN v_eu IS NULL THEN NULL ELSE ${endUserCapSql("h_project", "h_end_user")} END::BIGINT, ew.spent::BIGINT, ew.reserved::BIGINT
    FROM (SELECT 1) AS one
    LEFT JOIN projects p ON p.id = h_project
    LEFT JOIN budget_windows w ON w.project_id = h_project AND w.period = h_period
    LEFT JOIN scope_windows kw ON kw.scope = v_key AND kw.period = h_period
    LEFT JOIN scope_windows ew ON ew.scope = v_eu AND ew.period = h_period;
END
$fn$`,
  // As migration 0010's, passing the scopes.
  `CREATE FUNCTION tollgate_reserve_many(p_batch JSONB)
  RETURNS TABLE (o_i INTEGER, ${FIGURES})
  LANGUAGE plpgsql AS $fn$
DECLARE
  v_i INTEGER;
  v JSONB;
BEGIN
  FOR v_i, v IN
    SELECT (b.ord - 1)::INTEGER, b.item FROM jsonb_array_elements(p_batch) WITH ORDINALITY AS b(item, ord)
    ORDER BY b.item->>'h_project', b.item->>'h_period', b.ord
  LOOP
    RETURN QUERY SELECT v_i, r.* FROM tollgate_reserve((v->>'now')::BIGINT, (v->>'epoch')::BIGINT, (v->>'fence')::INTEGER,
      v->>'c_project', v->>'c_environment', v->>'c_key', v->>'c_fingerprint',
      v->>'r_id', v->>'r_project', v->>'r_environment', v->>'r_key_id', v->>'r_endpoint', v->>'r_model', v->>'r_route',
      (v->>'r_stream')::BIGINT, v->>'r_idempotency_key', v->>'r_rate_card_version', (v->>'r_created_at')::BIGINT,
      v->>'h_reservation', v->>'h_request', v->>'h_project', v->>'h_period', (v->>'h_deadline')::BIGINT,
      (v->>'amount')::BIGINT, v->>'h_key', v->>'h_end_user') AS r;
  END LOOP;
END
$fn$`,
  // As migration 0013's.
  `CREATE FUNCTION tollgate_reserve_bounded(p_lock_timeout_ms INTEGER, p_batch JSONB)
  RETURNS TABLE (o_i INTEGER, ${FIGURES})
  LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout_ms::TEXT || 'ms', true);
  RETURN QUERY SELECT * FROM tollgate_reserve_many(p_batch);
END
$fn$`,
  // The settlement: the project's (migration 0009's, renamed), then — only when it settled the whole
  // batch, each hold once — the same charges posted to the holds' key and end-user windows.
  `ALTER FUNCTION tollgate_settle(JSONB) RENAME TO tollgate_settle_project`,
  `CREATE FUNCTION tollgate_settle(p_batch JSONB) RETURNS JSONB LANGUAGE plpgsql AS $fn$
DECLARE
  v_answer JSONB;
BEGIN
  v_answer := tollgate_settle_project(p_batch);
  IF v_answer ? 'ok' THEN
    UPDATE scope_windows s SET spent = s.spent + t.charge, reserved = s.reserved - t.amount
      FROM (SELECT x.scope, x.period, SUM(x.charge)::BIGINT AS charge, SUM(x.amount)::BIGINT AS amount
            FROM (SELECT CASE WHEN g.k = 1 THEN 'key:' || r.key_id ELSE 'end_user:' || r.project_id || '/' || r.end_user END AS scope,
                         r.period, r.charge, r.amount
                  FROM reservations r CROSS JOIN (VALUES (1), (2)) AS g(k)
                  WHERE r.id IN (SELECT b.item->>'reservation_id' FROM jsonb_array_elements(p_batch->'items') AS b(item))
                    AND CASE WHEN g.k = 1 THEN r.key_id IS NOT NULL ELSE r.end_user IS NOT NULL END) AS x
            GROUP BY 1, 2 ORDER BY 1, 2) AS t
      WHERE s.scope = t.scope AND s.period = t.period;
  END IF;
  RETURN v_answer;
END
$fn$`,
  // The abandonment: the project's (migration 0008's, renamed), then the hold's other scopes released
  // when it voided the hold now.
  `ALTER FUNCTION tollgate_abandon(BIGINT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER) RENAME TO tollgate_abandon_project`,
  `CREATE FUNCTION tollgate_abandon(
    p_now BIGINT, p_reservation TEXT, p_request TEXT, p_code TEXT, p_message TEXT, p_attempts TEXT,
    c_project TEXT, c_environment TEXT, c_key TEXT, p_fence INTEGER)
  RETURNS TEXT LANGUAGE plpgsql AS $fn$
DECLARE
  v_outcome TEXT;
BEGIN
  v_outcome := tollgate_abandon_project(p_now, p_reservation, p_request, p_code, p_message, p_attempts, c_project, c_environment, c_key, p_fence);
  IF v_outcome = 'voided' THEN
    UPDATE scope_windows s SET reserved = s.reserved - r.amount
      FROM reservations r
      WHERE r.id = p_reservation AND s.period = r.period
        AND (s.scope = 'key:' || r.key_id OR s.scope = 'end_user:' || r.project_id || '/' || r.end_user);
  END IF;
  RETURN v_outcome;
END
$fn$`
]

export const migrationScopes = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () => Effect.forEach([...TABLES.map(pgDdl), ...pg], (s) => sql.unsafe(s), { discard: true }),
    orElse: () => Effect.forEach(TABLES, (s) => sql.unsafe(s), { discard: true })
  })
})
