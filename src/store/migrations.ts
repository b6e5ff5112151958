/**
 * Versioned schema migrations, one list for both engines. Each entry runs once, in key order,
 * recorded in `effect_sql_migrations`. Never edit a migration that has shipped: add a new one.
 *
 * Money columns are INTEGER Credits; times are INTEGER milliseconds since the epoch (UTC). The DDL is
 * written once, in SQLite's words; on PostgreSQL (`ddl` below) INTEGER becomes BIGINT (64-bit like
 * SQLite's, and epoch milliseconds do not fit in 32 bits) and BLOB becomes BYTEA. Nothing else differs.
 */
import { Migrator, SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { MAX_BUDGET_CREDITS, MAX_BURST, MAX_REQUESTS_PER_MINUTE } from "../domain/adminFields.ts"
import { migrationBoundedWaits } from "./migrationsBoundedWaits.ts"
import { migrationReserveOnePass } from "./migrationsReserveOnePass.ts"
import { migrationChainWriter } from "./migrationsChainWriter.ts"
import { migrationThresholdFastPath } from "./migrationsThresholdFastPath.ts"
import { migrationReserveCapOnce } from "./migrationsReserveCapOnce.ts"
import { migrationLaneTurn } from "./migrationsLaneTurn.ts"
import { migrationScopes } from "./migrationsScopes.ts"
import { migrationScopeThresholds } from "./migrationsScopeThresholds.ts"
import { migrationBudgetPeriods } from "./migrationsBudgetPeriods.ts"
import { migrationKeyBudgetChanged } from "./migrationsKeyBudgetChanged.ts"
import { migrationKeyedSettle } from "./migrationsKeyedSettle.ts"
import { migrationEndUserLimits } from "./migrationsEndUserLimits.ts"
import { migrationLimits } from "./migrationsLimits.ts"
import { migrationEvents } from "./migrationsEvents.ts"
import { migrationReceiptLog } from "./migrationsReceiptLog.ts"

/** PostgreSQL's words for the two SQLite column types the schema uses. */
export const pgDdl = (text: string): string => text.replace(/\bINTEGER\b/g, "BIGINT").replace(/\bBLOB\b/g, "BYTEA")

/** One DDL statement, as the connected engine spells it. */
const ddl = (strings: TemplateStringsArray) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const text = strings.join("")
    return sql.onDialectOrElse({ pg: () => sql.unsafe(pgDdl(text)), orElse: () => sql.unsafe(text) })
  })

const init = Effect.gen(function* () {
  // Server-wide settings: the admin token's hash, never a secret in clear.
  yield* ddl`CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)`
  yield* ddl`CREATE TABLE projects (
    id TEXT PRIMARY KEY,
    organization TEXT NOT NULL,
    name TEXT NOT NULL,
    budget_credits INTEGER NOT NULL CHECK (budget_credits >= 0),
    requests_per_minute INTEGER NOT NULL CHECK (requests_per_minute > 0),
    burst INTEGER NOT NULL CHECK (burst > 0),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  )`
  yield* ddl`CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects(id),
    environment TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER,
    replaces TEXT,
    replaced_by TEXT
  )`
  yield* ddl`CREATE INDEX api_keys_project ON api_keys(project_id)`
  // One row per project and settlement window. Invariant: spent + reserved <= the project's cap.
  yield* ddl`CREATE TABLE budget_windows (
    project_id TEXT NOT NULL REFERENCES projects(id),
    period TEXT NOT NULL,
    spent INTEGER NOT NULL DEFAULT 0 CHECK (spent >= 0),
    reserved INTEGER NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    PRIMARY KEY (project_id, period)
  )`
  yield* ddl`CREATE TABLE requests (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    key_id TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    model TEXT NOT NULL,
    route TEXT,
    stream INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL CHECK (status IN ('pending', 'completed', 'failed')),
    idempotency_key TEXT,
    rate_card_version TEXT,
    credits_reserved INTEGER NOT NULL DEFAULT 0,
    credits_charged INTEGER,
    receipt_id TEXT,
    verification TEXT,
    attempts TEXT,
    error_code TEXT,
    error_message TEXT,
    created_at INTEGER NOT NULL,
    completed_at INTEGER
  )`
  yield* ddl`CREATE INDEX requests_scope ON requests(project_id, environment, created_at)`
  // Two-phase budget holds: held -> settled | voided, exactly once (guarded by state in the UPDATE).
  yield* ddl`CREATE TABLE reservations (
    id TEXT PRIMARY KEY,
    request_id TEXT NOT NULL UNIQUE,
    project_id TEXT NOT NULL,
    period TEXT NOT NULL,
    amount INTEGER NOT NULL CHECK (amount >= 0),
    state TEXT NOT NULL CHECK (state IN ('held', 'settled', 'voided')),
    charge INTEGER,
    deadline INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    resolved_at INTEGER
  )`
  yield* ddl`CREATE INDEX reservations_held ON reservations(state, deadline)`
  // Receipts: JSON body (canonical JSON of the whole receipt since 8cf01f3; older rows in JSON.stringify
  // order) plus a per-project hash chain (seq, prev_hash, hash) and signature.
  yield* ddl`CREATE TABLE receipts (
    id TEXT PRIMARY KEY,
    request_id TEXT NOT NULL UNIQUE,
    project_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    period TEXT NOT NULL,
    seq INTEGER NOT NULL,
    credits_charged INTEGER NOT NULL,
    rate_card_version TEXT NOT NULL,
    body TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    signature TEXT NOT NULL,
    signing_key_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (project_id, seq)
  )`
  yield* ddl`CREATE INDEX receipts_window ON receipts(project_id, period)`
  yield* ddl`CREATE TABLE chain_heads (project_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL)`
  // The claim is the INSERT on this primary key: never check-then-insert.
  yield* ddl`CREATE TABLE idempotency (
    project_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    request_id TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('in_flight', 'finished')),
    status INTEGER,
    content_type TEXT,
    body BLOB,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, environment, key)
  )`
  // Every rate card ever used, frozen: a version's prices can never change after the fact.
  yield* ddl`CREATE TABLE rate_cards (
    version TEXT PRIMARY KEY,
    effective_from TEXT NOT NULL,
    prices TEXT NOT NULL,
    created_at INTEGER NOT NULL
  )`
  // Public halves of receipt signing keys, old ones kept so old receipts still verify.
  yield* ddl`CREATE TABLE receipt_keys (
    id TEXT PRIMARY KEY,
    public_key TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    retired_at INTEGER
  )`
})

// Token counts and route as columns, so usage sums are plain SQL over the window's receipts.
const receiptUsageColumns = Effect.gen(function* () {
  yield* ddl`ALTER TABLE receipts ADD COLUMN route TEXT NOT NULL DEFAULT ''`
  yield* ddl`ALTER TABLE receipts ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0`
  yield* ddl`ALTER TABLE receipts ADD COLUMN cached_input_tokens INTEGER NOT NULL DEFAULT 0`
  yield* ddl`ALTER TABLE receipts ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0`
  yield* ddl`ALTER TABLE receipts ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0`
  yield* ddl`CREATE INDEX receipts_scope_window ON receipts(project_id, environment, period)`
})

/**
 * Fewer B-trees written per governed call (bench/README.md, item 30): each index an INSERT or a state
 * change touches is one more page in the commit's WAL frames, and the store worker writes every frame.
 * - `requests_scope` served no query (a request is read by its id): dropped.
 * - The two receipt window indexes become one, on (project, period, environment): the usage sums use
 *   all three columns, the audit's per-project and per-window reads its first two.
 * - The hold index keeps only what the recovery sweep and the audit look for, holds still `held`: a
 *   settled or voided reservation leaves it instead of moving to another part of it, and the index
 *   stays as small as the holds in flight.
 */
const leanerWriteIndexes = Effect.gen(function* () {
  yield* ddl`DROP INDEX requests_scope`
  yield* ddl`DROP INDEX receipts_window`
  yield* ddl`DROP INDEX receipts_scope_window`
  yield* ddl`CREATE INDEX receipts_window ON receipts(project_id, period, environment)`
  yield* ddl`DROP INDEX reservations_held`
  yield* ddl`CREATE INDEX reservations_held ON reservations(deadline) WHERE state = 'held'`
})

/**
 * Instance epochs (docs/contract.md §4, issue 19 finding 5): every process that opens the store takes a new
 * epoch (a row of `instances`, with its stable instance id and a heartbeat) and marks the holds and
 * idempotency claims it makes with it. On start, a process resolves at once the holds and claims of
 * the epochs known dead — its own earlier epochs, and any whose heartbeat stopped — instead of
 * waiting for their deadline. A stream's hold carries the durable progress mark its heartbeat writes
 * (route, rate card and the tokens delivered so far), from which a hold of a dead epoch is charged.
 * Rows made before this migration have no epoch: only the deadline sweep resolves them.
 */
const instanceEpochs = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const columns = `instance_id TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    stopped_at INTEGER`
  // The same table on both engines; the epoch is the engine's own increasing key.
  yield* sql.onDialectOrElse({
    pg: () => sql.unsafe(pgDdl(`CREATE TABLE instances (\n    epoch BIGSERIAL PRIMARY KEY,\n    ${columns}\n  )`)),
    orElse: () => sql.unsafe(`CREATE TABLE instances (\n    epoch INTEGER PRIMARY KEY AUTOINCREMENT,\n    ${columns}\n  )`)
  })
  yield* ddl`ALTER TABLE reservations ADD COLUMN epoch INTEGER`
  yield* ddl`ALTER TABLE reservations ADD COLUMN progress TEXT`
  yield* ddl`ALTER TABLE idempotency ADD COLUMN epoch INTEGER`
})

/**
 * The rate limit shared by several instances (src/services/RateLimiter.ts): `rate_limits`, each
 * project's GCRA state (its theoretical arrival time, µs) when PostgreSQL keeps it (no REDIS_URL).
 * UNLOGGED on PostgreSQL: no WAL, no fsync per admission; a crash forgets the state, which only
 * refills the buckets once. How many instances share the limit when its store is unreachable is read
 * from migration 0004's `instances` (the live epochs), not from a table of its own.
 */
const sharedRateLimit = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const table = "TABLE rate_limits (project_id TEXT PRIMARY KEY, tat INTEGER NOT NULL)"
  yield* sql.onDialectOrElse({ pg: () => sql.unsafe(`CREATE UNLOGGED ${pgDdl(table)}`), orElse: () => sql.unsafe(`CREATE ${table}`) })
})

/**
 * The admin lists' order, indexed (issue 38; src/store/adminLists.ts): projects and a project's keys
 * are paged oldest first by keyset on (created_at, id), so a page reads only its rows. The keys'
 * index replaces `api_keys_project`, its prefix (a key is written once and rarely: one B-tree either way).
 */
const adminListIndexes = Effect.gen(function* () {
  yield* ddl`CREATE INDEX projects_created ON projects(created_at, id)`
  yield* ddl`CREATE INDEX api_keys_listed ON api_keys(project_id, created_at, id)`
  yield* ddl`DROP INDEX api_keys_project`
})

/**
 * What an earlier version let an admin store past the bounds decoded today (issue 38, finding 2;
 * src/domain/adminFields.ts): a key rotated with a far-future `grace_seconds` holds an expiry past
 * the last instant a date can hold, which PostgreSQL's reads refuse (above 2^53) — it becomes that
 * last instant (8.64e15 ms), which reads, lists and revokes like any other; a project's rate and
 * burst past their bounds (whose product the rate limiter's clock must hold exactly) and a cap past
 * 2^53 − 1 come down to the bounds — lower, never higher, so no window can overspend.
 */
const clampStoredBounds = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`UPDATE api_keys SET expires_at = 8640000000000000 WHERE expires_at > 8640000000000000`
  yield* sql`UPDATE projects SET requests_per_minute = ${MAX_REQUESTS_PER_MINUTE} WHERE requests_per_minute > ${MAX_REQUESTS_PER_MINUTE}`
  yield* sql`UPDATE projects SET burst = ${MAX_BURST} WHERE burst > ${MAX_BURST}`
  yield* sql`UPDATE projects SET budget_credits = ${MAX_BUDGET_CREDITS} WHERE budget_credits > ${MAX_BUDGET_CREDITS}`
})

/**
 * One round trip per governed transaction on PostgreSQL (issue 40, item 1; docs/decisions/0043): the
 * reservation, the settlement, the abandonment as server-side functions, each called as ONE statement
 * in its own implicit transaction (no BEGIN, no COMMIT round trips), each guard still evaluated by
 * PostgreSQL on the locked row. src/store/pgChatStore.ts calls them; SQLite has nothing to install
 * (its transactions run in-process, src/store/chatTransactions.ts). Functions resolve their tables on
 * the caller's search_path, as the statements they replace did.
 */
const pgGovernedFunctions = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    orElse: () => Effect.void,
    pg: () =>
      Effect.gen(function* () {
        // The reservation: the fence (held to the end of the statement's transaction, for a void after
        // a lost connection), the idempotency claim (the INSERT on its primary key; an expired claim
        // deleted; a live one answered), and — when an amount is named — the guarded UPDATE of the
        // window (opened when it did not exist), the pending request and the hold, only if it held.
        // Refused or not sized: the claim taken here is undone, and the window's figures answered, on
        // which the caller sizes and asks again.
        yield* sql.unsafe(`CREATE FUNCTION tollgate_reserve(
    p_now BIGINT, p_epoch BIGINT, p_fence INTEGER,
    c_project TEXT, c_environment TEXT, c_key TEXT, c_fingerprint TEXT,
    r_id TEXT, r_project TEXT, r_environment TEXT, r_key_id TEXT, r_endpoint TEXT, r_model TEXT, r_route TEXT,
    r_stream BIGINT, r_idempotency_key TEXT, r_rate_card_version TEXT, r_created_at BIGINT,
    h_reservation TEXT, h_request TEXT, h_project TEXT, h_period TEXT, h_deadline BIGINT,
    p_amount BIGINT)
  RETURNS TABLE (o_outcome TEXT, o_cap BIGINT, o_spent BIGINT, o_reserved BIGINT, o_fingerprint TEXT, o_request_id TEXT,
    o_state TEXT, o_status BIGINT, o_content_type TEXT, o_body BYTEA, o_expires_at BIGINT)
  LANGUAGE plpgsql AS $fn$
DECLARE
  v_round INTEGER;
  v_claimed BOOLEAN := FALSE;
  v_live RECORD;
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
          v_live.state::TEXT, v_live.status::BIGINT, v_live.content_type::TEXT, v_live.body::BYTEA, v_live.expires_at::BIGINT;
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
      IF FOUND THEN
        INSERT INTO requests (id, project_id, environment, key_id, endpoint, model, route, stream, status,
            idempotency_key, rate_card_version, credits_reserved, created_at)
          VALUES (r_id, r_project, r_environment, r_key_id, r_endpoint, r_model, r_route, r_stream, 'pending',
            r_idempotency_key, r_rate_card_version, p_amount, r_created_at);
        INSERT INTO reservations (id, request_id, project_id, period, amount, state, deadline, created_at, epoch)
          VALUES (h_reservation, h_request, h_project, h_period, p_amount, 'held', h_deadline, p_now, p_epoch);
        RETURN QUERY SELECT 'held'::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT, NULL::TEXT, NULL::BYTEA, NULL::BIGINT;
        RETURN;
      END IF;
      -- The window did not exist yet (first hold of the month): open it and try once more.
      EXIT WHEN v_round = 2 OR EXISTS (SELECT 1 FROM budget_windows w WHERE w.project_id = h_project AND w.period = h_period);
      INSERT INTO budget_windows (project_id, period, spent, reserved) VALUES (h_project, h_period, 0, 0) ON CONFLICT DO NOTHING;
    END LOOP;
  END IF;
  IF v_claimed THEN
    DELETE FROM idempotency i WHERE i.project_id = c_project AND i.environment = c_environment AND i.key = c_key AND i.request_id = r_id;
  END IF;
  RETURN QUERY SELECT 'window'::TEXT, p.budget_credits::BIGINT, w.spent::BIGINT, w.reserved::BIGINT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT, NULL::TEXT, NULL::BYTEA, NULL::BIGINT
    FROM (SELECT 1) AS one
    LEFT JOIN projects p ON p.id = h_project
    LEFT JOIN budget_windows w ON w.project_id = h_project AND w.period = h_period;
END
$fn$`)
        // The settlement of a batch (one or more calls, in order), all or nothing. Its holds are locked
        // first, in id order: one not held (resolved by this batch's own earlier commit: "done"; by
        // another: "gone") or not as the caller knows it ("mismatch") — or a chain head that is not the
        // one the caller sealed on — answers with what it found and writes nothing. Otherwise the holds
        // move held → settled, the requests complete, the idempotent results are stored, the charges
        // posted to the windows (locked in (project, period) order), and the receipts appended to the
        // chains (heads locked in project order), each receipt checked to extend its chain: seq one
        // more, prev_hash the hash before it. A head moved between the first read and its lock raises
        // SQLSTATE TG001 (everything rolled back): the caller reads the head again.
        yield* sql.unsafe(`CREATE FUNCTION tollgate_settle(p_batch JSONB) RETURNS JSONB LANGUAGE plpgsql AS $fn$
DECLARE
  v_genesis CONSTANT TEXT := repeat('0', 64);
  v_row RECORD;
  v_found JSONB := '[]'::JSONB;
  v_chain JSONB := '{}'::JSONB;
  v_moved JSONB := '[]'::JSONB;
  v_expected JSONB;
  v_head RECORD;
  v_item JSONB;
  v_receipt JSONB;
  v_link JSONB;
  v_groups INTEGER;
  v_posted INTEGER;
BEGIN
  PERFORM 1 FROM reservations r
    WHERE r.id IN (SELECT b.item->>'reservation_id' FROM jsonb_array_elements(p_batch->'items') AS b(item))
    ORDER BY r.id FOR UPDATE;
  FOR v_row IN
    SELECT (b.ord - 1)::INTEGER AS i, b.item, r.state, r.amount, r.project_id, r.period, q.status AS request_status, q.receipt_id AS request_receipt
    FROM jsonb_array_elements(p_batch->'items') WITH ORDINALITY AS b(item, ord)
    LEFT JOIN reservations r ON r.id = b.item->>'reservation_id'
    LEFT JOIN requests q ON q.id = b.item->>'request_id'
  LOOP
    IF v_row.state IS DISTINCT FROM 'held' THEN
      v_found := v_found || jsonb_build_object('i', v_row.i, 'outcome',
        CASE WHEN v_row.request_status = 'completed' AND v_row.request_receipt = v_row.item->>'receipt_id' THEN 'done' ELSE 'gone' END);
    ELSIF v_row.amount <> (v_row.item->>'amount')::BIGINT OR v_row.project_id <> v_row.item->>'project_id' OR v_row.period <> v_row.item->>'period'
      OR (v_row.item->>'charge')::BIGINT < 0 OR (v_row.item->>'charge')::BIGINT > v_row.amount THEN
      v_found := v_found || jsonb_build_object('i', v_row.i, 'outcome', 'mismatch');
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

  UPDATE reservations r SET state = 'settled', resolved_at = (b.item->>'now')::BIGINT, charge = (b.item->>'charge')::BIGINT
    FROM jsonb_array_elements(p_batch->'items') AS b(item)
    WHERE r.id = b.item->>'reservation_id' AND r.state = 'held';
  UPDATE requests q SET status = 'completed', route = b.item->>'route', credits_charged = (b.item->>'charge')::BIGINT,
      receipt_id = b.item->>'receipt_id', verification = b.item->>'verification', attempts = b.item->>'attempts', completed_at = (b.item->>'now')::BIGINT
    FROM jsonb_array_elements(p_batch->'items') AS b(item)
    WHERE q.id = b.item->>'request_id' AND q.status = 'pending';
  UPDATE idempotency i SET state = 'finished', status = (b.item->'idem'->>'status')::BIGINT, content_type = b.item->'idem'->>'content_type',
      body = decode(b.item->'idem'->>'body', 'base64'), expires_at = (b.item->'idem'->>'expires_at')::BIGINT
    FROM jsonb_array_elements(p_batch->'items') AS b(item)
    WHERE jsonb_typeof(b.item->'idem') = 'object' AND i.project_id = b.item->'idem'->>'project_id'
      AND i.environment = b.item->'idem'->>'environment' AND i.key = b.item->'idem'->>'key'
      AND i.request_id = b.item->>'request_id' AND i.state = 'in_flight' AND i.expires_at > (b.item->>'now')::BIGINT;

  PERFORM 1 FROM budget_windows w
    WHERE (w.project_id, w.period) IN (SELECT b.item->>'project_id', b.item->>'period' FROM jsonb_array_elements(p_batch->'items') AS b(item))
    ORDER BY w.project_id, w.period FOR UPDATE;
  SELECT COUNT(*) INTO v_groups FROM (SELECT DISTINCT b.item->>'project_id', b.item->>'period' FROM jsonb_array_elements(p_batch->'items') AS b(item)) AS g;
  UPDATE budget_windows w SET spent = w.spent + t.charge, reserved = w.reserved - t.amount
    FROM (SELECT b.item->>'project_id' AS project_id, b.item->>'period' AS period,
            SUM((b.item->>'charge')::BIGINT)::BIGINT AS charge, SUM((b.item->>'amount')::BIGINT)::BIGINT AS amount
          FROM jsonb_array_elements(p_batch->'items') AS b(item) GROUP BY 1, 2) AS t
    WHERE w.project_id = t.project_id AND w.period = t.period;
  GET DIAGNOSTICS v_posted = ROW_COUNT;
  IF v_posted <> v_groups THEN
    RAISE EXCEPTION 'tollgate_settle: a budget window of the batch does not exist';
  END IF;

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
  FOR v_item IN SELECT b.item FROM jsonb_array_elements(p_batch->'items') WITH ORDINALITY AS b(item, ord) ORDER BY b.ord LOOP
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
  UPDATE chain_heads h SET seq = (c.value->>'seq')::BIGINT, hash = c.value->>'hash'
    FROM jsonb_each(v_chain) AS c WHERE h.project_id = c.key;
  RETURN jsonb_build_object('ok', TRUE, 'heads', v_chain);
END
$fn$`)
        // The settlement's locks, taken in the order every writer takes them (holds, windows, heads)
        // at the start of a transaction, and the heads they locked: what a settlement seals on when
        // another instance keeps moving its project's head (src/store/pgChatStore.ts, the locked path).
        yield* sql.unsafe(`CREATE FUNCTION tollgate_settle_lock(p_batch JSONB) RETURNS JSONB LANGUAGE plpgsql AS $fn$
DECLARE
  v_genesis CONSTANT TEXT := repeat('0', 64);
  v_project TEXT;
  v_head RECORD;
  v_chain JSONB := '{}'::JSONB;
BEGIN
  PERFORM 1 FROM reservations r
    WHERE r.id IN (SELECT b.item->>'reservation_id' FROM jsonb_array_elements(p_batch->'items') AS b(item))
    ORDER BY r.id FOR UPDATE;
  PERFORM 1 FROM budget_windows w
    WHERE (w.project_id, w.period) IN (SELECT b.item->>'project_id', b.item->>'period' FROM jsonb_array_elements(p_batch->'items') AS b(item))
    ORDER BY w.project_id, w.period FOR UPDATE;
  FOR v_project IN SELECT DISTINCT b.item->>'project_id' FROM jsonb_array_elements(p_batch->'items') AS b(item) ORDER BY 1 LOOP
    INSERT INTO chain_heads (project_id, seq, hash) VALUES (v_project, 0, v_genesis) ON CONFLICT DO NOTHING;
    SELECT h.seq, h.hash INTO v_head FROM chain_heads h WHERE h.project_id = v_project FOR UPDATE;
    v_chain := v_chain || jsonb_build_object(v_project, jsonb_build_object('seq', v_head.seq, 'hash', v_head.hash));
  END LOOP;
  RETURN v_chain;
END
$fn$`)
        // The abandonment: the hold voided once, its request failed, its claim freed, the window's
        // reservation released — fenced (after a lost reservation) only once that reservation's fence
        // is free, else "fenced" and nothing written.
        yield* sql.unsafe(`CREATE FUNCTION tollgate_abandon(
    p_now BIGINT, p_reservation TEXT, p_request TEXT, p_code TEXT, p_message TEXT, p_attempts TEXT,
    c_project TEXT, c_environment TEXT, c_key TEXT, p_fence INTEGER)
  RETURNS TEXT LANGUAGE plpgsql AS $fn$
DECLARE
  v_hold RECORD;
BEGIN
  IF p_fence IS NOT NULL AND NOT pg_try_advisory_xact_lock(p_fence, hashtext(p_reservation)) THEN
    RETURN 'fenced';
  END IF;
  UPDATE reservations r SET state = 'voided', charge = 0, resolved_at = p_now
    WHERE r.id = p_reservation AND r.state = 'held' RETURNING r.amount, r.project_id, r.period INTO v_hold;
  UPDATE requests q SET status = 'failed', credits_charged = 0, error_code = p_code, error_message = p_message,
      attempts = p_attempts, completed_at = p_now
    WHERE q.id = p_request AND q.status = 'pending';
  IF c_key IS NOT NULL THEN
    DELETE FROM idempotency i WHERE i.project_id = c_project AND i.environment = c_environment
      AND i.key = c_key AND i.request_id = p_request AND i.state = 'in_flight';
  END IF;
  IF v_hold.project_id IS NULL THEN RETURN 'none'; END IF;
  UPDATE budget_windows w SET reserved = w.reserved - v_hold.amount WHERE w.project_id = v_hold.project_id AND w.period = v_hold.period;
  RETURN 'voided';
END
$fn$`)
      })
  })
})

/**
 * Group commit on PostgreSQL (issue 40, item 2; docs/decisions/0043): `tollgate_settle` takes batches
 * of several calls, and the same hold may come twice in one (its settlement sent again while the first
 * was queued). Both would pass the hold's check, and the window would be posted the charge twice: the
 * later one is now answered "again" (nothing written), and goes in the next batch, which finds the
 * first's outcome. Otherwise as migration 0008's.
 */
const pgSettleOnceABatch = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    orElse: () => Effect.void,
    pg: () =>
      Effect.gen(function* () {
        yield* sql.unsafe(`CREATE OR REPLACE FUNCTION tollgate_settle(p_batch JSONB) RETURNS JSONB LANGUAGE plpgsql AS $fn$
DECLARE
  v_genesis CONSTANT TEXT := repeat('0', 64);
  v_row RECORD;
  v_found JSONB := '[]'::JSONB;
  v_chain JSONB := '{}'::JSONB;
  v_moved JSONB := '[]'::JSONB;
  v_expected JSONB;
  v_head RECORD;
  v_item JSONB;
  v_receipt JSONB;
  v_link JSONB;
  v_groups INTEGER;
  v_posted INTEGER;
  v_seen TEXT[] := '{}';
BEGIN
  PERFORM 1 FROM reservations r
    WHERE r.id IN (SELECT b.item->>'reservation_id' FROM jsonb_array_elements(p_batch->'items') AS b(item))
    ORDER BY r.id FOR UPDATE;
  FOR v_row IN
    SELECT (b.ord - 1)::INTEGER AS i, b.item, r.state, r.amount, r.project_id, r.period, q.status AS request_status, q.receipt_id AS request_receipt
    FROM jsonb_array_elements(p_batch->'items') WITH ORDINALITY AS b(item, ord)
    LEFT JOIN reservations r ON r.id = b.item->>'reservation_id'
    LEFT JOIN requests q ON q.id = b.item->>'request_id'
    ORDER BY b.ord
  LOOP
    IF (v_row.item->>'reservation_id') = ANY (v_seen) THEN
      v_found := v_found || jsonb_build_object('i', v_row.i, 'outcome', 'again');
      CONTINUE;
    END IF;
    v_seen := v_seen || (v_row.item->>'reservation_id');
    IF v_row.state IS DISTINCT FROM 'held' THEN
      v_found := v_found || jsonb_build_object('i', v_row.i, 'outcome',
        CASE WHEN v_row.request_status = 'completed' AND v_row.request_receipt = v_row.item->>'receipt_id' THEN 'done' ELSE 'gone' END);
    ELSIF v_row.amount <> (v_row.item->>'amount')::BIGINT OR v_row.project_id <> v_row.item->>'project_id' OR v_row.period <> v_row.item->>'period'
      OR (v_row.item->>'charge')::BIGINT < 0 OR (v_row.item->>'charge')::BIGINT > v_row.amount THEN
      v_found := v_found || jsonb_build_object('i', v_row.i, 'outcome', 'mismatch');
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

  UPDATE reservations r SET state = 'settled', resolved_at = (b.item->>'now')::BIGINT, charge = (b.item->>'charge')::BIGINT
    FROM jsonb_array_elements(p_batch->'items') AS b(item)
    WHERE r.id = b.item->>'reservation_id' AND r.state = 'held';
  UPDATE requests q SET status = 'completed', route = b.item->>'route', credits_charged = (b.item->>'charge')::BIGINT,
      receipt_id = b.item->>'receipt_id', verification = b.item->>'verification', attempts = b.item->>'attempts', completed_at = (b.item->>'now')::BIGINT
    FROM jsonb_array_elements(p_batch->'items') AS b(item)
    WHERE q.id = b.item->>'request_id' AND q.status = 'pending';
  UPDATE idempotency i SET state = 'finished', status = (b.item->'idem'->>'status')::BIGINT, content_type = b.item->'idem'->>'content_type',
      body = decode(b.item->'idem'->>'body', 'base64'), expires_at = (b.item->'idem'->>'expires_at')::BIGINT
    FROM jsonb_array_elements(p_batch->'items') AS b(item)
    WHERE jsonb_typeof(b.item->'idem') = 'object' AND i.project_id = b.item->'idem'->>'project_id'
      AND i.environment = b.item->'idem'->>'environment' AND i.key = b.item->'idem'->>'key'
      AND i.request_id = b.item->>'request_id' AND i.state = 'in_flight' AND i.expires_at > (b.item->>'now')::BIGINT;

  PERFORM 1 FROM budget_windows w
    WHERE (w.project_id, w.period) IN (SELECT b.item->>'project_id', b.item->>'period' FROM jsonb_array_elements(p_batch->'items') AS b(item))
    ORDER BY w.project_id, w.period FOR UPDATE;
  SELECT COUNT(*) INTO v_groups FROM (SELECT DISTINCT b.item->>'project_id', b.item->>'period' FROM jsonb_array_elements(p_batch->'items') AS b(item)) AS g;
  UPDATE budget_windows w SET spent = w.spent + t.charge, reserved = w.reserved - t.amount
    FROM (SELECT b.item->>'project_id' AS project_id, b.item->>'period' AS period,
            SUM((b.item->>'charge')::BIGINT)::BIGINT AS charge, SUM((b.item->>'amount')::BIGINT)::BIGINT AS amount
          FROM jsonb_array_elements(p_batch->'items') AS b(item) GROUP BY 1, 2) AS t
    WHERE w.project_id = t.project_id AND w.period = t.period;
  GET DIAGNOSTICS v_posted = ROW_COUNT;
  IF v_posted <> v_groups THEN
    RAISE EXCEPTION 'tollgate_settle: a budget window of the batch does not exist';
  END IF;

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
  FOR v_item IN SELECT b.item FROM jsonb_array_elements(p_batch->'items') WITH ORDINALITY AS b(item, ord) ORDER BY b.ord LOOP
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
  UPDATE chain_heads h SET seq = (c.value->>'seq')::BIGINT, hash = c.value->>'hash'
    FROM jsonb_each(v_chain) AS c WHERE h.project_id = c.key;
  RETURN jsonb_build_object('ok', TRUE, 'heads', v_chain);
END
$fn$`)
      })
  })
})

/**
 * Group commit of reservations on PostgreSQL (issue 40, item 2; docs/decisions/0043): several calls'
 * `tollgate_reserve` in one statement, one transaction, one WAL flush, each answered on its own row
 * (held, a claim met, or the window's figures). In (project, period) order, each project's in arrival
 * order, so two batches lock their windows in one order.
 */
const pgReserveMany = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    orElse: () => Effect.void,
    pg: () =>
      sql.unsafe(`CREATE FUNCTION tollgate_reserve_many(p_batch JSONB)
  RETURNS TABLE (o_i INTEGER, o_outcome TEXT, o_cap BIGINT, o_spent BIGINT, o_reserved BIGINT, o_fingerprint TEXT, o_request_id TEXT,
    o_state TEXT, o_status BIGINT, o_content_type TEXT, o_body BYTEA, o_expires_at BIGINT)
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
      (v->>'amount')::BIGINT) AS r;
  END LOOP;
END
$fn$`)
  })
})

/** The migrations by id, in order (a test replays a prefix of them to build an older store). */
export const migrationSteps = {
  "0001_init": init,
  "0002_receipt_usage_columns": receiptUsageColumns,
  "0003_leaner_write_indexes": leanerWriteIndexes,
  "0004_instance_epochs": instanceEpochs,
  "0005_shared_rate_limit": sharedRateLimit,
  "0006_admin_list_indexes": adminListIndexes,
  "0007_clamp_stored_bounds": clampStoredBounds,
  "0008_pg_governed_functions": pgGovernedFunctions,
  "0009_pg_settle_once_a_batch": pgSettleOnceABatch,
  "0010_pg_reserve_many": pgReserveMany,
  "0011_receipt_log": migrationReceiptLog,
  "0012_events_outbox": migrationEvents,
  "0013_pg_bounded_waits": migrationBoundedWaits,
  "0014_budget_scopes": migrationScopes,
  "0015_upstream_limits": migrationLimits,
  "0018_scope_thresholds": migrationScopeThresholds,
  "0019_budget_periods": migrationBudgetPeriods,
  "0020_key_budget_changed": migrationKeyBudgetChanged,
  "0022_end_user_limits": migrationEndUserLimits,
  "0023_pg_keyed_settle": migrationKeyedSettle,
  "0024_pg_reserve_one_pass": migrationReserveOnePass,
  "0025_pg_lane_turn": migrationLaneTurn,
  "0026_pg_chain_writer": migrationChainWriter,
  "0027_pg_threshold_fast_path": migrationThresholdFastPath,
  "0028_pg_reserve_cap_once": migrationReserveCapOnce
}

export const migrations = Migrator.fromRecord(migrationSteps)

export const runMigrations = Migrator.make({})({ loader: migrations })

/** The migrations up to and including `last`: a store as an older release left it (tests, bench). */
export const runMigrationsUpTo = (last: keyof typeof migrationSteps) => {
  const steps = Object.entries(migrationSteps)
  const upTo = steps.slice(0, steps.findIndex(([id]) => id === last) + 1)
  return Migrator.make({})({ loader: Migrator.fromRecord(Object.fromEntries(upTo)) })
}
