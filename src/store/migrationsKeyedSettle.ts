/**
 * Migration 0023_pg_keyed_settle — the settlement on PostgreSQL reaches every row by its key, whatever
 * the planner believes of the tables (issue 40; docs/decisions/0053).
 *
 * `tollgate_settle` (migrations 0009 and 0014) and `tollgate_settle_lock` (0008) joined the batch — a
 * `jsonb_array_elements`, which the planner takes for 100 rows — to `reservations`, `requests`,
 * `budget_windows` and `chain_heads`. PL/pgSQL plans a statement once and keeps it; planned while a
 * table was young (never analyzed: the planner assumes a few pages), the join is a hash join over a
 * sequential scan of the whole table, and stays one as the table grows — until autovacuum's ANALYZE
 * happens to invalidate the plan. Measured on the port alone (bench/pgHotProject.ts, one hot project):
 * each settlement statement scanned `reservations` three times and `requests` twice, and cost more the
 * longer the run. Turning sequential scans off is not enough: the planner then walks the primary key's
 * whole index instead.
 *
 * Here every row a settlement touches is reached by an equality on its key, one row at a time, in a
 * loop over the batch — a plan with one possible shape. What it does, in what order, and what it
 * answers are unchanged:
 *
 * - the holds locked in id order (`tollgate_lock_holds`), each checked (`again`, `done`, `gone`,
 *   `mismatch`: the whole batch answered, nothing written), the heads checked;
 * - the holds settled, the requests completed, the idempotent replies stored;
 * - the project windows posted each its batch's sums, each locked by its own UPDATE in (project,
 *   period) order (0009 locked them all first, then posted them in one joined UPDATE whose order it
 *   could not choose), a missing one an error; the chains extended; the heads written;
 * - the key and end-user windows posted the same charges (what 0014's wrapper did — now in the same
 *   function, the hold's scopes read by the UPDATE that settles it), in (scope, period) order, after the
 *   project's window (a scope's row is only written under its project's window lock: no new cycle).
 *
 * `tollgate_settle_lock` takes the same locks up front (`tollgate_lock_holds`, `tollgate_lock_windows`).
 * `tollgate_settle_project` (0014's name for the project part) is dropped: `tollgate_settle` is whole again.
 */
import { statementsByDialect } from "./migrationStatements.ts"

const pg = [
  // The holds of a batch, locked in id order (every writer's first lock), each by its key.
  `CREATE FUNCTION tollgate_lock_holds(p_items JSONB) RETURNS VOID LANGUAGE plpgsql AS $fn$
DECLARE
  v_id TEXT;
BEGIN
  FOR v_id IN SELECT DISTINCT b.item->>'reservation_id' FROM jsonb_array_elements(p_items) AS b(item) ORDER BY 1 LOOP
    PERFORM 1 FROM reservations r WHERE r.id = v_id FOR UPDATE;
  END LOOP;
END
$fn$`,
  // The project windows of a batch, locked in (project, period) order (the second lock), each by its key.
  `CREATE FUNCTION tollgate_lock_windows(p_items JSONB) RETURNS VOID LANGUAGE plpgsql AS $fn$
DECLARE
  v_w RECORD;
BEGIN
  FOR v_w IN SELECT DISTINCT b.item->>'project_id' AS project_id, b.item->>'period' AS period
      FROM jsonb_array_elements(p_items) AS b(item) ORDER BY 1, 2 LOOP
    PERFORM 1 FROM budget_windows w WHERE w.project_id = v_w.project_id AND w.period = v_w.period FOR UPDATE;
  END LOOP;
END
$fn$`,
  `DROP FUNCTION tollgate_settle(JSONB)`,
  `DROP FUNCTION tollgate_settle_project(JSONB)`,
  `CREATE FUNCTION tollgate_settle(p_batch JSONB) RETURNS JSONB LANGUAGE plpgsql AS $fn$
DECLARE
  v_genesis CONSTANT TEXT := repeat('0', 64);
  v_items CONSTANT JSONB := p_batch->'items';
  v_n CONSTANT INTEGER := jsonb_array_length(p_batch->'items');
  v_i INTEGER;
  v_item JSONB;
  v_hold RECORD;
  v_request RECORD;
  v_found JSONB := '[]'::JSONB;
  v_chain JSONB := '{}'::JSONB;
  v_moved JSONB := '[]'::JSONB;
  v_scopes JSONB := '[]'::JSONB;
  v_expected JSONB;
  v_head RECORD;
  v_receipt JSONB;
  v_link JSONB;
  v_sum RECORD;
  v_key_id TEXT;
  v_end_user TEXT;
  v_seen TEXT[] := '{}';
BEGIN
  PERFORM tollgate_lock_holds(v_items);
  FOR v_i IN 0 .. v_n - 1 LOOP
    v_item := v_items->v_i;
    IF (v_item->>'reservation_id') = ANY (v_seen) THEN
      v_found := v_found || jsonb_build_object('i', v_i, 'outcome', 'again');
      CONTINUE;
    END IF;
    v_seen := v_seen || (v_item->>'reservation_id');
    SELECT r.state, r.amount, r.project_id, r.period INTO v_hold FROM reservations r WHERE r.id = v_item->>'reservation_id';
    IF v_hold.state IS DISTINCT FROM 'held' THEN
      SELECT q.status, q.receipt_id INTO v_request FROM requests q WHERE q.id = v_item->>'request_id';
      v_found := v_found || jsonb_build_object('i', v_i, 'outcome',
        CASE WHEN v_request.status = 'completed' AND v_request.receipt_id = v_item->>'receipt_id' THEN 'done' ELSE 'gone' END);
    ELSIF v_hold.amount <> (v_item->>'amount')::BIGINT OR v_hold.project_id <> v_item->>'project_id' OR v_hold.period <> v_item->>'period'
      OR (v_item->>'charge')::BIGINT < 0 OR (v_item->>'charge')::BIGINT > v_hold.amount THEN
      v_found := v_found || jsonb_build_object('i', v_i, 'outcome', 'mismatch');
    END IF;
  END LOOP;
  IF jsonb_array_length(v_found) > 0 THEN RETURN jsonb_build_object('items', v_found); END IF;
  FOR v_expected IN SELECT value FROM jsonb_array_elements(p_batch->'heads') LOOP
    SELECT h.seq, h.hash INTO v_head FROM chain_heads h WHERE h.project_id = v_expected->>'project_id';
    IF COALESCE(v_head.seq, 0) <> (v_expected->>'seq')::BIGINT OR COALESCE(v_head.hash, v_genesis) <> v_expected->>'hash' THEN
      v_moved := v_moved || jsonb_build_object('project_id', v_expected->>'project_id', 'seq', COALESCE(v_head.seq, 0), 'hash', COALESCE(v_head.hash, v_genesis));
    END IF;
  END LOOP;
  IF jsonb_array_length(v_moved) > 0 THEN RETURN jsonb_build_object('heads', v_moved); END IF;

  FOR v_i IN 0 .. v_n - 1 LOOP
    v_item := v_items->v_i;
    UPDATE reservations r SET state = 'settled', resolved_at = (v_item->>'now')::BIGINT, charge = (v_item->>'charge')::BIGINT
      WHERE r.id = v_item->>'reservation_id' AND r.state = 'held'
      RETURNING r.key_id, r.end_user INTO v_key_id, v_end_user;
    IF v_key_id IS NOT NULL THEN
      v_scopes := v_scopes || jsonb_build_object('scope', 'key:' || v_key_id, 'period', v_item->>'period', 'charge', (v_item->>'charge')::BIGINT, 'amount', (v_item->>'amount')::BIGINT);
    END IF;
    IF v_end_user IS NOT NULL THEN
      v_scopes := v_scopes || jsonb_build_object('scope', 'end_user:' || (v_item->>'project_id') || '/' || v_end_user, 'period', v_item->>'period',
        'charge', (v_item->>'charge')::BIGINT, 'amount', (v_item->>'amount')::BIGINT);
    END IF;
    UPDATE requests q SET status = 'completed', route = v_item->>'route', credits_charged = (v_item->>'charge')::BIGINT,
        receipt_id = v_item->>'receipt_id', verification = v_item->>'verification', attempts = v_item->>'attempts', completed_at = (v_item->>'now')::BIGINT
      WHERE q.id = v_item->>'request_id' AND q.status = 'pending';
    IF jsonb_typeof(v_item->'idem') = 'object' THEN
      UPDATE idempotency i SET state = 'finished', status = (v_item->'idem'->>'status')::BIGINT, content_type = v_item->'idem'->>'content_type',
          body = decode(v_item->'idem'->>'body', 'base64'), expires_at = (v_item->'idem'->>'expires_at')::BIGINT
        WHERE i.project_id = v_item->'idem'->>'project_id' AND i.environment = v_item->'idem'->>'environment' AND i.key = v_item->'idem'->>'key'
          AND i.request_id = v_item->>'request_id' AND i.state = 'in_flight' AND i.expires_at > (v_item->>'now')::BIGINT;
    END IF;
  END LOOP;

  -- Each window locked by its own UPDATE, in (project, period) order: the order every writer locks them in.
  FOR v_sum IN SELECT b.item->>'project_id' AS project_id, b.item->>'period' AS period,
        SUM((b.item->>'charge')::BIGINT)::BIGINT AS charge, SUM((b.item->>'amount')::BIGINT)::BIGINT AS amount
      FROM jsonb_array_elements(v_items) AS b(item) GROUP BY 1, 2 ORDER BY 1, 2 LOOP
    UPDATE budget_windows w SET spent = w.spent + v_sum.charge, reserved = w.reserved - v_sum.amount
      WHERE w.project_id = v_sum.project_id AND w.period = v_sum.period;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'tollgate_settle: a budget window of the batch does not exist';
    END IF;
  END LOOP;

  FOR v_expected IN SELECT value FROM jsonb_array_elements(p_batch->'heads') ORDER BY value->>'project_id' LOOP
    IF (v_expected->>'seq')::BIGINT = 0 THEN
      INSERT INTO chain_heads (project_id, seq, hash) VALUES (v_expected->>'project_id', 0, v_genesis) ON CONFLICT DO NOTHING;
    END IF;
    SELECT h.seq, h.hash INTO v_head FROM chain_heads h WHERE h.project_id = v_expected->>'project_id' FOR UPDATE;
    IF v_head.seq IS DISTINCT FROM (v_expected->>'seq')::BIGINT OR v_head.hash IS DISTINCT FROM v_expected->>'hash' THEN
      RAISE EXCEPTION 'tollgate_settle: the chain head of % moved', v_expected->>'project_id' USING ERRCODE = 'TG001';
    END IF;
    v_chain := v_chain || jsonb_build_object(v_expected->>'project_id', jsonb_build_object('seq', v_head.seq, 'hash', v_head.hash));
  END LOOP;
  FOR v_i IN 0 .. v_n - 1 LOOP
    v_item := v_items->v_i;
    v_receipt := v_item->'receipt';
    v_link := v_chain->(v_item->>'project_id');
    IF v_link IS NULL OR (v_receipt->>'seq')::BIGINT <> (v_link->>'seq')::BIGINT + 1 OR v_receipt->>'prev_hash' <> v_link->>'hash' THEN
      RAISE EXCEPTION 'tollgate_settle: receipt % (seq %, prev_hash %) does not extend its chain at seq %, hash %',
        v_receipt->>'id', v_receipt->>'seq', v_receipt->>'prev_hash', v_link->>'seq', v_link->>'hash';
    END IF;
    INSERT INTO receipts (id, request_id, project_id, environment, period, seq, credits_charged, rate_card_version,
        body, prev_hash, hash, signature, signing_key_id, created_at, route, input_tokens, cached_input_tokens, output_tokens, reasoning_tokens)
      VALUES (v_receipt->>'id', v_item->>'request_id', v_item->>'project_id', v_receipt->>'environment', v_item->>'period',
        (v_receipt->>'seq')::BIGINT, (v_item->>'charge')::BIGINT, v_receipt->>'rate_card_version', v_receipt->>'body',
        v_receipt->>'prev_hash', v_receipt->>'hash', v_receipt->>'signature', v_receipt->>'signing_key_id', (v_item->>'now')::BIGINT,
        v_item->>'route', (v_receipt->>'input_tokens')::BIGINT, (v_receipt->>'cached_input_tokens')::BIGINT,
        (v_receipt->>'output_tokens')::BIGINT, (v_receipt->>'reasoning_tokens')::BIGINT);
    v_chain := v_chain || jsonb_build_object(v_item->>'project_id', jsonb_build_object('seq', (v_receipt->>'seq')::BIGINT, 'hash', v_receipt->>'hash'));
  END LOOP;
  FOR v_expected IN SELECT jsonb_build_object('project_id', c.key, 'seq', c.value->'seq', 'hash', c.value->'hash') FROM jsonb_each(v_chain) AS c LOOP
    UPDATE chain_heads h SET seq = (v_expected->>'seq')::BIGINT, hash = v_expected->>'hash' WHERE h.project_id = v_expected->>'project_id';
  END LOOP;

  -- The key and end-user windows: the same charges, once, in (scope, period) order.
  FOR v_sum IN SELECT s.scope, s.period, SUM(s.charge)::BIGINT AS charge, SUM(s.amount)::BIGINT AS amount
      FROM jsonb_to_recordset(v_scopes) AS s(scope TEXT, period TEXT, charge BIGINT, amount BIGINT) GROUP BY 1, 2 ORDER BY 1, 2 LOOP
    UPDATE scope_windows w SET spent = w.spent + v_sum.charge, reserved = w.reserved - v_sum.amount
      WHERE w.scope = v_sum.scope AND w.period = v_sum.period;
  END LOOP;
  RETURN jsonb_build_object('ok', TRUE, 'heads', v_chain);
END
$fn$`,
  `CREATE OR REPLACE FUNCTION tollgate_settle_lock(p_batch JSONB) RETURNS JSONB LANGUAGE plpgsql AS $fn$
DECLARE
  v_genesis CONSTANT TEXT := repeat('0', 64);
  v_project TEXT;
  v_head RECORD;
  v_chain JSONB := '{}'::JSONB;
BEGIN
  PERFORM tollgate_lock_holds(p_batch->'items');
  PERFORM tollgate_lock_windows(p_batch->'items');
  FOR v_project IN SELECT DISTINCT b.item->>'project_id' FROM jsonb_array_elements(p_batch->'items') AS b(item) ORDER BY 1 LOOP
    INSERT INTO chain_heads (project_id, seq, hash) VALUES (v_project, 0, v_genesis) ON CONFLICT DO NOTHING;
    SELECT h.seq, h.hash INTO v_head FROM chain_heads h WHERE h.project_id = v_project FOR UPDATE;
    v_chain := v_chain || jsonb_build_object(v_project, jsonb_build_object('seq', v_head.seq, 'hash', v_head.hash));
  END LOOP;
  RETURN v_chain;
END
$fn$`
]

export const migrationKeyedSettle = statementsByDialect({ pg })
