/**
 * The IdempotencyStore service's read (src/services/IdempotencyStore.ts): what a claim would meet.
 * Synchronous on SQLite's own connection when there is one, through SqlClient otherwise
 * (PostgreSQL). The writes are the store port's (src/store/ChatStore.ts over
 * src/store/idempotencyStatements.ts).
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Option } from "effect"
import { Sqlite } from "./Database.ts"
import { type ClaimOutcome, type IdempotencyRow, makeIdempotencyStatements, outcomeOf, type Scope } from "./idempotencyStatements.ts"

/** The read, a defect on a store failure. */
export const makeIdempotencyRepo = (sql: SqlClient.SqlClient, sqlite: Option.Option<Context.Tag.Service<typeof Sqlite>>) => ({
  /** Read-only look at `now`: what a claim of `key` with `fingerprint` would meet. */
  peekAt: Option.match(sqlite, {
    onSome: ({ db }) => {
      const statements = makeIdempotencyStatements(db)
      return (scope: Scope, key: string, fingerprint: string, now: number): Effect.Effect<ClaimOutcome> =>
        Effect.sync(() => statements.peekAt(scope, key, fingerprint, now))
    },
    onNone: () => (scope: Scope, key: string, fingerprint: string, now: number): Effect.Effect<ClaimOutcome> =>
      Effect.map(
        sql<IdempotencyRow>`SELECT fingerprint, request_id, state, status, content_type, body, expires_at FROM idempotency
          WHERE project_id = ${scope.projectId} AND environment = ${scope.environment} AND key = ${key} AND expires_at > ${now}`.pipe(Effect.orDie),
        ([row]): ClaimOutcome => (row === undefined ? { _tag: "Claimed" } : outcomeOf(row, fingerprint))
      )
  })
})

export class IdempotencyRepo extends Effect.Service<IdempotencyRepo>()("tollgate/IdempotencyRepo", {
  effect: Effect.zipWith(SqlClient.SqlClient, Effect.serviceOption(Sqlite), makeIdempotencyRepo)
}) {}
