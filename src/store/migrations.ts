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

/** The migrations by id, in order (a test replays a prefix of them to build an older store). */
export const migrationSteps = {
  "0001_init": init,
  "0002_receipt_usage_columns": receiptUsageColumns,
  "0003_leaner_write_indexes": leanerWriteIndexes,
  "0004_instance_epochs": instanceEpochs,
  "0005_shared_rate_limit": sharedRateLimit,
  "0006_admin_list_indexes": adminListIndexes,
  "0007_clamp_stored_bounds": clampStoredBounds
}

export const migrations = Migrator.fromRecord(migrationSteps)

export const runMigrations = Migrator.make({})({ loader: migrations })

/** The migrations up to and including `last`: a store as an older release left it (tests, bench). */
export const runMigrationsUpTo = (last: keyof typeof migrationSteps) => {
  const steps = Object.entries(migrationSteps)
  const upTo = steps.slice(0, steps.findIndex(([id]) => id === last) + 1)
  return Migrator.make({})({ loader: Migrator.fromRecord(Object.fromEntries(upTo)) })
}
