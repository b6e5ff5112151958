/**
 * Migration 0022_end_user_limits — an end user's own upstream limits (DESIGN §9: an override is
 * `{budget_credits, rate_limit?}`): `rate_limit.tokens_per_minute` and `rate_limit.max_concurrent` on its
 * `end_users` row, as a key has them (migration 0015). NULL: none. Only an end user with a row of its
 * own has them; there is no project-wide default for them.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export const migrationEndUserLimits = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.unsafe(`ALTER TABLE end_users ADD COLUMN tokens_per_minute INTEGER CHECK (tokens_per_minute IS NULL OR tokens_per_minute > 0)`)
  yield* sql.unsafe(`ALTER TABLE end_users ADD COLUMN max_concurrent INTEGER CHECK (max_concurrent IS NULL OR max_concurrent > 0)`)
})
