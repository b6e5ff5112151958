/**
 * Migration 0012_events_outbox — issue 42 (docs/contract.md, "Webhooks"): the events outbox, webhook
 * endpoints and their deliveries, and the triggers that write the budget events.
 *
 * - `events`: the outbox. `seq` is the engine's increasing key (the order events are listed and
 *   delivered in), `id` the public `evt_…`, `cause` a unique key for events that must be emitted once
 *   per cause (a threshold once per project, window, scope and percent; a key's expiry once): the
 *   writer inserts with INSERT OR IGNORE / ON CONFLICT DO NOTHING, so a second writer of the same
 *   cause writes nothing.
 * - `webhook_endpoints`: `events` a JSON array of types (or ["*"]); `project_id` / `organization`
 *   narrow it (NULL: every project); `secret` the signing secret ENCRYPTED (AES-256-GCM under the
 *   server's webhook key, src/services/WebhookSecrets.ts), never in clear.
 * - `webhook_deliveries`: one row per (event, endpoint) attempt series; `seq` its order; claimed by an
 *   instance until `claimed_until` (a claim of a dead instance expires).
 * - `projects.alert_thresholds_percent`: a JSON array of whole percents of the cap, default [50,80,100].
 *
 * Fan-out is a trigger on `events` (AFTER INSERT: one delivery per matching endpoint, in the same
 * transaction as the event, hence as its cause). Budget thresholds are a trigger on `budget_windows`
 * (AFTER UPDATE OF spent, only when spent grew): the governed path's statements are not changed, and
 * on PostgreSQL the trigger fires inside `tollgate_settle` like any UPDATE. The event's time is the
 * database's clock there (no Effect Clock reaches a trigger).
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { pgDdl } from "./migrations.ts"

/** Epoch milliseconds, as each engine's clock says. */
export const SQLITE_NOW = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
export const PG_NOW = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT"

/** The tables, in SQLite's words (pgDdl converts); `{SERIAL}` is each engine's increasing key. */
const TABLES = [
  `CREATE TABLE events (
    seq {SERIAL},
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    project_id TEXT,
    organization TEXT,
    data TEXT NOT NULL,
    cause TEXT UNIQUE,
    created_at INTEGER NOT NULL
  )`,
  `CREATE INDEX events_created ON events(created_at)`,
  `CREATE TABLE webhook_endpoints (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    events TEXT NOT NULL,
    project_id TEXT,
    organization TEXT,
    description TEXT,
    secret TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  )`,
  `CREATE INDEX webhook_endpoints_created ON webhook_endpoints(created_at, id)`,
  `CREATE TABLE webhook_deliveries (
    seq {SERIAL},
    endpoint_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    last_status INTEGER,
    last_error TEXT,
    last_latency_ms INTEGER,
    last_attempt_at INTEGER,
    next_attempt_at INTEGER NOT NULL,
    delivered_at INTEGER,
    claimed_by TEXT,
    claimed_until INTEGER,
    created_at INTEGER NOT NULL
  )`,
  `CREATE INDEX webhook_deliveries_log ON webhook_deliveries(endpoint_id, seq)`,
  `CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_at) WHERE status = 'pending'`,
  `ALTER TABLE projects ADD COLUMN alert_thresholds_percent TEXT NOT NULL DEFAULT '[50,80,100]'`
]

/** The threshold rule (spec/events.ts `crossedThresholds`) in SQL: percent t of cap c crossed from o to n. */
export const crossed = (o: string, n: string, t: string, c: string) => `${c} > 0 AND ${n} * 100 >= ${t} * ${c} AND ${o} * 100 < ${t} * ${c}`

/**
 * spec/events.ts `wholePercentPassed` in SQL, negated: no whole percent of cap c passed from o to n, so
 * no threshold can have been crossed (integer division is the floor: spent is never negative).
 */
export const noWholePercentPassed = (o: string, n: string, c: string) => `${c} IS NULL OR ${c} <= 0 OR (${n} * 100) / ${c} = (${o} * 100) / ${c}`

const thresholdData = (t: string) =>
  `'scope', 'project', 'scope_id', p.id, 'threshold_percent', ${t}, 'cap', p.budget_credits, 'spent', NEW.spent, 'reserved', NEW.reserved, 'period', NEW.period`

const thresholdCause = (t: string) => `'budget.threshold_reached:' || p.id || ':' || NEW.period || ':project:' || ${t}`

const sqlite = [
  `CREATE TRIGGER events_budget_threshold AFTER UPDATE OF spent ON budget_windows
  WHEN NEW.spent > OLD.spent AND EXISTS (SELECT 1 FROM projects p, json_each(p.alert_thresholds_percent) t
    WHERE p.id = NEW.project_id AND ${crossed("OLD.spent", "NEW.spent", "t.value", "p.budget_credits")})
BEGIN
  INSERT OR IGNORE INTO events (id, type, project_id, organization, data, cause, created_at)
    SELECT 'evt_' || lower(hex(randomblob(12))), 'budget.threshold_reached', p.id, p.organization,
      json_object(${thresholdData("t.value")}), ${thresholdCause("t.value")}, ${SQLITE_NOW}
    FROM projects p, json_each(p.alert_thresholds_percent) t
    WHERE p.id = NEW.project_id AND ${crossed("OLD.spent", "NEW.spent", "t.value", "p.budget_credits")}
    ORDER BY t.value;
END`,
  `CREATE TRIGGER events_fan_out AFTER INSERT ON events
BEGIN
  INSERT INTO webhook_deliveries (endpoint_id, event_id, status, next_attempt_at, created_at)
    SELECT e.id, NEW.id, 'pending', NEW.created_at, NEW.created_at FROM webhook_endpoints e
    WHERE e.enabled = 1 AND (e.project_id IS NULL OR e.project_id = NEW.project_id)
      AND (e.organization IS NULL OR e.organization = NEW.organization)
      AND EXISTS (SELECT 1 FROM json_each(e.events) j WHERE j.value IN ('*', NEW.type))
    ORDER BY e.id;
END`
]

/** The project window's threshold events as the PostgreSQL trigger writes them (`NEW`/`OLD`: the updated `budget_windows` row). */
export const pgBudgetThresholdInsert = `INSERT INTO events (id, type, project_id, organization, data, cause, created_at)
    SELECT 'evt_' || substr(replace(gen_random_uuid()::TEXT, '-', ''), 1, 24), 'budget.threshold_reached', p.id, p.organization,
      json_build_object(${thresholdData("t.v")})::TEXT, ${thresholdCause("t.v")}, ${PG_NOW}
    FROM projects p, LATERAL (SELECT value::BIGINT AS v FROM jsonb_array_elements_text(p.alert_thresholds_percent::JSONB)) t
    WHERE p.id = NEW.project_id AND ${crossed("OLD.spent", "NEW.spent", "t.v", "p.budget_credits")}
    ORDER BY t.v
    ON CONFLICT DO NOTHING;`

const pg = [
  `CREATE FUNCTION tollgate_events_budget_threshold() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  ${pgBudgetThresholdInsert}
  RETURN NULL;
END
$fn$`,
  `CREATE TRIGGER events_budget_threshold AFTER UPDATE OF spent ON budget_windows
  FOR EACH ROW WHEN (NEW.spent > OLD.spent) EXECUTE FUNCTION tollgate_events_budget_threshold()`,
  `CREATE FUNCTION tollgate_events_fan_out() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO webhook_deliveries (endpoint_id, event_id, status, next_attempt_at, created_at)
    SELECT e.id, NEW.id, 'pending', NEW.created_at, NEW.created_at FROM webhook_endpoints e
    WHERE e.enabled = 1 AND (e.project_id IS NULL OR e.project_id = NEW.project_id)
      AND (e.organization IS NULL OR e.organization = NEW.organization)
      AND e.events::JSONB ?| ARRAY['*', NEW.type]
    ORDER BY e.id;
  RETURN NULL;
END
$fn$`,
  `CREATE TRIGGER events_fan_out AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION tollgate_events_fan_out()`
]

export const migrationEvents = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () =>
      Effect.forEach([...TABLES.map((t) => pgDdl(t.replace(/\{SERIAL\}/g, "BIGSERIAL PRIMARY KEY"))), ...pg], (s) => sql.unsafe(s), { discard: true }),
    orElse: () =>
      Effect.forEach([...TABLES.map((t) => t.replace(/\{SERIAL\}/g, "INTEGER PRIMARY KEY AUTOINCREMENT")), ...sqlite], (s) => sql.unsafe(s), { discard: true })
  })
})
