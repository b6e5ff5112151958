/**
 * The scale-out store's connection: `DATABASE_URL=postgres://…` opens a pool of
 * `TOLLGATE_PG_POOL_SIZE` connections (src/store/pgPool.ts) through @effect/sql-pg (node-postgres), providing the same
 * `SqlClient` every service reads and writes through, and runs the one migration list
 * (src/store/migrations.ts) under an advisory lock, so several instances starting together on an
 * empty database migrate it once.
 *
 * Integers: every money, count and time column is BIGINT. node-postgres returns BIGINT (and the
 * NUMERIC of a SUM) as strings; here they are parsed to numbers, and a value outside the safe
 * integer range fails loudly instead of being rounded.
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer } from "effect"
import pg from "pg"
import { Settings } from "../domain/config.ts"
import { runMigrations } from "./migrations.ts"
import { openPool, PgConnectionsTracker } from "./pgPool.ts"

const INT8_OID = 20
const NUMERIC_OID = 1700

/** A BIGINT or an integral NUMERIC as a number; never a silently rounded one. */
export const parseSafeInteger = (text: string): number => {
  const n = Number(text)
  if (!Number.isSafeInteger(n)) throw new RangeError(`PostgreSQL returned ${text}, outside the safe integer range`)
  return n
}

const types = {
  getTypeParser: ((oid: number, format?: "text" | "binary") => {
    if (format !== "binary" && (oid === INT8_OID || oid === NUMERIC_OID)) return parseSafeInteger
    return pg.types.getTypeParser(oid, format as "text")
  }) as typeof pg.types.getTypeParser
}

/** The advisory lock key of the migrator (any fixed 64-bit number; "tollgate" in ASCII). */
const MIGRATION_LOCK = "7308332472174814579"

/**
 * Migrate once however many instances start at the same time: the first takes the transaction-scoped
 * advisory lock and migrates; the others wait on it, then find nothing left to do.
 */
export const migrateOnce = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.withTransaction(
    Effect.gen(function* () {
      yield* sql`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK}::bigint)`
      // The migrator probes for its table with a statement that fails when it is missing, which
      // would abort this transaction: create it first, as the migrator does for PostgreSQL.
      yield* sql`CREATE TABLE IF NOT EXISTS effect_sql_migrations (
        migration_id integer primary key,
        created_at timestamp with time zone not null default now(),
        name text not null
      )`
      yield* runMigrations
    })
  )
})

/**
 * A pool on `url`, not migrated (tests create and drop schemas with it), fitted to what PostgreSQL
 * allows this role (src/store/pgPool.ts); its tracker provided for the store's transactions and /readyz.
 */
export const pgClientLayer = (url: string, poolSize: number, acquireTimeoutMs = 5000) =>
  Layer.unwrapScoped(
    Effect.map(openPool({ url, size: poolSize, acquireTimeoutMs, applicationName: "tollgate", types }), ({ pool, connections }) =>
      Layer.merge(
        PgClient.layerFromPool({ acquire: Effect.succeed(pool), applicationName: "tollgate", types }),
        Layer.succeed(PgConnectionsTracker, connections)
      )
    )
  )

/** An error that is its message only: what the operator reads when the gateway cannot start, no stack. */
const operatorMessage = (message: string): Error => {
  const e = new Error(message)
  e.stack = message
  return e
}

/** SqlClient (and PgClient) on DATABASE_URL, migrated; a start that cannot connect names why and the setting. */
export const PostgresLive: Layer.Layer<SqlClient.SqlClient | PgClient.PgClient, never, Settings> = Layer.unwrapEffect(
  Effect.map(Settings, (settings) =>
    Layer.tap(pgClientLayer(settings.databaseUrl, settings.pgPoolSize, settings.pgAcquireTimeoutMs), (context) =>
      migrateOnce.pipe(Effect.provide(context))
    ).pipe(
      // A start that cannot connect dies with the operator's message (pgPool.ts `startFailure`), not a stack.
      Layer.catchAll((e) => Layer.die(operatorMessage(e.message))),
      Layer.orDie
    )
  )
)
