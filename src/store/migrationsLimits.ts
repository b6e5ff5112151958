/**
 * Migration 0015_upstream_limits — issue 41, item 3: the limits that protect the upstream. A project
 * and a key may each carry `tokens_per_minute` (a token bucket taken at admission on the call's
 * estimate, corrected at settlement) and `max_concurrent` (calls in flight); NULL means no such limit,
 * and a call with none of them set never touches the limiter's new state. Without Redis the shared
 * state lives in PostgreSQL: `token_buckets` (one row per limited scope: the level in token·ms per
 * minute units and when it was last refilled, on the database's clock) and `concurrency_leases` (one
 * row per call in flight, with the expiry its instance renews while the call lives). Nothing else
 * changes on SQLite, which is one instance (its limits live in that instance's memory).
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { pgDdl } from "./migrations.ts"

export const migrationLimits = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const ddl = (text: string) => sql.onDialectOrElse({ pg: () => sql.unsafe(pgDdl(text)), orElse: () => sql.unsafe(text) })
  yield* ddl(`ALTER TABLE projects ADD COLUMN tokens_per_minute INTEGER CHECK (tokens_per_minute IS NULL OR tokens_per_minute > 0)`)
  yield* ddl(`ALTER TABLE projects ADD COLUMN max_concurrent INTEGER CHECK (max_concurrent IS NULL OR max_concurrent > 0)`)
  yield* ddl(`ALTER TABLE api_keys ADD COLUMN tokens_per_minute INTEGER CHECK (tokens_per_minute IS NULL OR tokens_per_minute > 0)`)
  yield* ddl(`ALTER TABLE api_keys ADD COLUMN max_concurrent INTEGER CHECK (max_concurrent IS NULL OR max_concurrent > 0)`)
  yield* sql.onDialectOrElse({
    orElse: () => Effect.void,
    pg: () =>
      Effect.zipRight(
        sql.unsafe(`CREATE TABLE token_buckets (scope TEXT PRIMARY KEY, level BIGINT NOT NULL CHECK (level >= 0), at_us BIGINT NOT NULL)`),
        Effect.zipRight(
          sql.unsafe(`CREATE TABLE concurrency_leases (scope TEXT NOT NULL, call_id TEXT NOT NULL, expires_us BIGINT NOT NULL, PRIMARY KEY (scope, call_id))`),
          sql.unsafe(`CREATE INDEX concurrency_leases_expiry ON concurrency_leases (scope, expires_us)`)
        )
      )
  })
})
