/**
 * Migration 0024_pg_reserve_one_pass — a batch of reservations on PostgreSQL holds its project's
 * budget window for the guard alone (issue 40; docs/decisions/0053).
 *
 * `tollgate_reserve_many` (migrations 0010 and 0014) called `tollgate_reserve` once a reservation:
 * the first one's guarded UPDATE locked the project's window row, and every later one's call — its
 * fence, its claim, its 26 arguments taken out of the batch's JSON, its request and hold rows — ran
 * with that row locked, as did the commit. One hot project's settlements wait for that row, so what a
 * reservation batch does under it sets the project's pace. Now, in one pass each:
 *
 * 1. every reservation's fence and idempotency claim (`tollgate_claim`; a live claim answered `claim`
 *    at once), before any window is locked — a claim is never waited for under a window lock, so two
 *    batches can no longer deadlock on a claim and a window. A key an earlier call of the same batch
 *    claimed is claimed again at the call's turn (that call may be refused and free it), as it was;
 * 2. per (project, period), in that order: the window locked once (`FOR UPDATE`, opened when absent —
 *    only once a reservation of it is sized), each reservation's guard `spent + reserved + amount ≤ cap`
 *    decided on the locked row's figures and the batch's earlier holds (the cap read for each, as the
 *    guarded UPDATE read it; migration 0028 reads it once a window, `reserveManyFunction("window")`), then its key and end-user holds (the same guarded upserts, immediate, all
 *    or none), its request and hold rows; the window written ONCE with the batch's holds;
 * 3. a refused or unsized reservation answers the figures it was judged on (the window's, with the
 *    batch's earlier holds, and its scopes'), and its claim is released.
 *
 * The answers, the rows written and the invariant (spent + reserved ≤ cap in every scope, all or none)
 * are the ones `tollgate_reserve` gave; `tollgate_reserve_bounded` (the lock bound) calls this one, and
 * `tollgate_reserve`, no longer called, is dropped.
 */
import { statementsByDialect } from "./migrationStatements.ts"
import { FIGURES } from "./migrationsScopes.ts"
import { endUserCapSql, keyCapSql, scopeHoldSql } from "./scopeSql.ts"

/** The project's cap, as `tollgate_reserve_many` reads it into `v_cap`. */
const CAP_READ = "    SELECT p.budget_credits INTO v_cap FROM projects p WHERE p.id = v_project;\n"

/**
 * `tollgate_reserve_many`'s text: the cap read for each reservation (`each`, this migration's), or once
 * for each (project, period) of the batch, when its window's turn comes (`window`, migration 0028).
 */
export const reserveManyFunction = (capRead: "each" | "window"): string =>
`CREATE OR REPLACE FUNCTION tollgate_reserve_many(p_batch JSONB)
  RETURNS TABLE (o_i INTEGER, ${FIGURES})
  LANGUAGE plpgsql AS $fn$
DECLARE
  v_order INTEGER[] := ARRAY(SELECT (b.ord - 1)::INTEGER FROM jsonb_array_elements(p_batch) WITH ORDINALITY AS b(item, ord)
    ORDER BY b.item->>'h_project', b.item->>'h_period', b.ord);
  v_claimed BOOLEAN[] := array_fill(FALSE, ARRAY[jsonb_array_length(p_batch)]);
  v_done BOOLEAN[] := array_fill(FALSE, ARRAY[jsonb_array_length(p_batch)]);
  v_deferred BOOLEAN[] := array_fill(FALSE, ARRAY[jsonb_array_length(p_batch)]);
  v_mine TEXT[] := '{}';
  v_i INTEGER;
  v JSONB;
  v_live idempotency;
  v_project TEXT := NULL;
  v_period TEXT := NULL;
  v_locked BOOLEAN := FALSE;
  v_spent BIGINT;
  v_reserved BIGINT;
  v_held BIGINT := 0;
  v_cap BIGINT;
  v_amount BIGINT;
  v_scope TEXT;
  v_key TEXT;
  v_eu TEXT;
BEGIN
  -- 1. Fences and claims, before any window is locked.
  FOREACH v_i IN ARRAY v_order LOOP
    v := p_batch->v_i;
    PERFORM pg_advisory_xact_lock((v->>'fence')::INTEGER, hashtext(v->>'h_reservation'));
    CONTINUE WHEN v->>'c_key' IS NULL;
    v_live := tollgate_claim(v);
    IF v_live.request_id IS NULL THEN
      v_claimed[v_i + 1] := TRUE;
      v_mine := v_mine || (v->>'r_id');
    ELSIF v_live.request_id = ANY (v_mine) THEN
      -- The key was claimed by an earlier call of this batch, which may yet be refused and free it:
      -- this one claims at its turn, as it would have one call after the other.
      v_deferred[v_i + 1] := TRUE;
    ELSE
      v_done[v_i + 1] := TRUE;
      RETURN QUERY SELECT v_i, 'claim'::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, v_live.fingerprint::TEXT, v_live.request_id::TEXT,
        v_live.state::TEXT, v_live.status::BIGINT, v_live.content_type::TEXT, v_live.body::BYTEA, v_live.expires_at::BIGINT,
        NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT;
    END IF;
  END LOOP;

  -- 2. The holds, a window at a time; 3. the refusals' figures.
  FOREACH v_i IN ARRAY v_order LOOP
    CONTINUE WHEN v_done[v_i + 1];
    v := p_batch->v_i;
    IF v_deferred[v_i + 1] THEN
      v_live := tollgate_claim(v);
      IF v_live.request_id IS NOT NULL THEN
        RETURN QUERY SELECT v_i, 'claim'::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, v_live.fingerprint::TEXT, v_live.request_id::TEXT,
          v_live.state::TEXT, v_live.status::BIGINT, v_live.content_type::TEXT, v_live.body::BYTEA, v_live.expires_at::BIGINT,
          NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT;
        CONTINUE;
      END IF;
      v_claimed[v_i + 1] := TRUE;
    END IF;
    IF v_project IS DISTINCT FROM v->>'h_project' OR v_period IS DISTINCT FROM v->>'h_period' THEN
      IF v_locked AND v_held <> 0 THEN
        UPDATE budget_windows w SET reserved = w.reserved + v_held WHERE w.project_id = v_project AND w.period = v_period;
      END IF;
      v_project := v->>'h_project';
      v_period := v->>'h_period';
      v_locked := FALSE;
      v_held := 0;
${capRead === "window" ? `  ${CAP_READ}` : ""}    END IF;
    v_amount := (v->>'amount')::BIGINT;
    v_scope := NULL;
    v_key := CASE WHEN v->>'h_key' IS NULL THEN NULL ELSE 'key:' || (v->>'h_key') END;
    v_eu := CASE WHEN v->>'h_end_user' IS NULL THEN NULL ELSE 'end_user:' || v_project || '/' || (v->>'h_end_user') END;
${capRead === "each" ? CAP_READ : ""}    IF v_amount IS NOT NULL AND NOT v_locked THEN
      SELECT w.spent, w.reserved INTO v_spent, v_reserved FROM budget_windows w WHERE w.project_id = v_project AND w.period = v_period FOR UPDATE;
      IF NOT FOUND THEN
        -- The window did not exist yet (first hold of the period): open it.
        INSERT INTO budget_windows (project_id, period, spent, reserved) VALUES (v_project, v_period, 0, 0) ON CONFLICT DO NOTHING;
        SELECT w.spent, w.reserved INTO v_spent, v_reserved FROM budget_windows w WHERE w.project_id = v_project AND w.period = v_period FOR UPDATE;
      END IF;
      v_locked := TRUE;
    END IF;
    IF v_amount IS NOT NULL THEN
      IF v_cap IS NULL OR v_spent + v_reserved + v_held + v_amount > v_cap THEN
        v_scope := 'project';
      ELSE
        -- The project's window row is locked by this transaction: every other scope of the project waits behind it.
        IF v_key IS NOT NULL THEN
          ${scopeHoldSql("v_key", "v_period", "v_amount", keyCapSql("(v->>'h_key')"))};
          IF NOT FOUND THEN v_scope := 'key'; END IF;
        END IF;
        IF v_scope IS NULL AND v_eu IS NOT NULL THEN
          ${scopeHoldSql("v_eu", "v_period", "v_amount", endUserCapSql("v_project", "(v->>'h_end_user')"))};
          IF NOT FOUND THEN
            v_scope := 'end_user';
            -- All or none: undo the key's hold (its row is locked by this statement; nobody saw it).
            IF v_key IS NOT NULL THEN
              UPDATE scope_windows s SET reserved = s.reserved - v_amount WHERE s.scope = v_key AND s.period = v_period;
            END IF;
          END IF;
        END IF;
        IF v_scope IS NULL THEN
          v_held := v_held + v_amount;
          INSERT INTO requests (id, project_id, environment, key_id, endpoint, model, route, stream, status,
              idempotency_key, rate_card_version, credits_reserved, created_at)
            VALUES (v->>'r_id', v->>'r_project', v->>'r_environment', v->>'r_key_id', v->>'r_endpoint', v->>'r_model', v->>'r_route',
              (v->>'r_stream')::BIGINT, 'pending', v->>'r_idempotency_key', v->>'r_rate_card_version', v_amount, (v->>'r_created_at')::BIGINT);
          INSERT INTO reservations (id, request_id, project_id, period, amount, state, deadline, created_at, epoch, key_id, end_user)
            VALUES (v->>'h_reservation', v->>'h_request', v_project, v_period, v_amount, 'held', (v->>'h_deadline')::BIGINT,
              (v->>'now')::BIGINT, (v->>'epoch')::BIGINT, v->>'h_key', v->>'h_end_user');
          RETURN QUERY SELECT v_i, 'held'::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT,
            NULL::TEXT, NULL::BYTEA, NULL::BIGINT, NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT;
          CONTINUE;
        END IF;
      END IF;
    END IF;
    IF v_claimed[v_i + 1] THEN
      DELETE FROM idempotency i WHERE i.project_id = v->>'c_project' AND i.environment = v->>'c_environment' AND i.key = v->>'c_key'
        AND i.request_id = v->>'r_id';
    END IF;
    IF NOT v_locked THEN
      -- Unsized, its window not locked by this batch: the figures as they are.
      SELECT w.spent, w.reserved INTO v_spent, v_reserved FROM budget_windows w WHERE w.project_id = v_project AND w.period = v_period;
    END IF;
    RETURN QUERY SELECT v_i, 'window'::TEXT, v_cap, v_spent, v_reserved + CASE WHEN v_locked THEN v_held ELSE 0 END,
        NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT, NULL::TEXT, NULL::BYTEA, NULL::BIGINT, v_scope,
        CASE WHEN v_key IS NULL THEN NULL ELSE ${keyCapSql("(v->>'h_key')")} END::BIGINT, kw.spent::BIGINT, kw.reserved::BIGINT,
        CASE WHEN v_eu IS NULL THEN NULL ELSE ${endUserCapSql("v_project", "(v->>'h_end_user')")} END::BIGINT, ew.spent::BIGINT, ew.reserved::BIGINT
      FROM (SELECT 1) AS one
      LEFT JOIN scope_windows kw ON kw.scope = v_key AND kw.period = v_period
      LEFT JOIN scope_windows ew ON ew.scope = v_eu AND ew.period = v_period;
  END LOOP;
  IF v_locked AND v_held <> 0 THEN
    UPDATE budget_windows w SET reserved = w.reserved + v_held WHERE w.project_id = v_project AND w.period = v_period;
  END IF;
END
$fn$`

const pg = [
  // One idempotency claim (migration 0008's three rounds): NULL when this call won the key, else the
  // live claim it met. A claim expired in place is taken over.
  `CREATE FUNCTION tollgate_claim(v JSONB) RETURNS idempotency LANGUAGE plpgsql AS $fn$
DECLARE
  v_round INTEGER;
  v_live idempotency;
BEGIN
  FOR v_round IN 1..3 LOOP
    INSERT INTO idempotency (project_id, environment, key, fingerprint, request_id, state, created_at, expires_at, epoch)
      VALUES (v->>'c_project', v->>'c_environment', v->>'c_key', v->>'c_fingerprint', v->>'r_id', 'in_flight', (v->>'now')::BIGINT,
        (v->>'h_deadline')::BIGINT, (v->>'epoch')::BIGINT)
      ON CONFLICT DO NOTHING;
    IF FOUND THEN RETURN NULL; END IF;
    DELETE FROM idempotency i WHERE i.project_id = v->>'c_project' AND i.environment = v->>'c_environment' AND i.key = v->>'c_key'
      AND i.expires_at <= (v->>'now')::BIGINT;
    IF FOUND THEN
      INSERT INTO idempotency (project_id, environment, key, fingerprint, request_id, state, created_at, expires_at, epoch)
        VALUES (v->>'c_project', v->>'c_environment', v->>'c_key', v->>'c_fingerprint', v->>'r_id', 'in_flight', (v->>'now')::BIGINT,
          (v->>'h_deadline')::BIGINT, (v->>'epoch')::BIGINT)
        ON CONFLICT DO NOTHING;
      IF FOUND THEN RETURN NULL; END IF;
    END IF;
    SELECT i.* INTO v_live FROM idempotency i
      WHERE i.project_id = v->>'c_project' AND i.environment = v->>'c_environment' AND i.key = v->>'c_key' AND i.expires_at > (v->>'now')::BIGINT;
    IF FOUND THEN RETURN v_live; END IF;
  END LOOP;
  RAISE EXCEPTION 'idempotency key %: claim neither won nor found after 3 rounds', v->>'c_key';
END
$fn$`,
  reserveManyFunction("each"),
  `DROP FUNCTION tollgate_reserve(BIGINT, BIGINT, INTEGER, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, BIGINT,
     TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, TEXT, TEXT)`
]

export const migrationReserveOnePass = statementsByDialect({ pg })
