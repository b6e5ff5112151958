/**
 * The SQL store behind every service. `DATABASE_URL=sqlite:<path>` (default) opens an embedded
 * SQLite file through @effect/sql-sqlite-node with WAL and synchronous=FULL, so a settled charge is
 * on disk before its response leaves. Migrations run at start-up.
 *
 * Two ways in, one connection that this module opens and owns (src/store/sqliteClient.ts): `SqlClient`
 * (@effect/sql, built with its public constructors) for everything, and `Sqlite` — the same
 * better-sqlite3 connection with synchronous group-committed transactions (src/store/syncTransactions.ts).
 * The chat path's writes go through `ChatStore` (src/store/ChatStore.ts), which for a file store runs
 * them on a second connection, in a worker thread.
 */
import { SqlClient } from "@effect/sql"
import type BetterSqlite3 from "better-sqlite3"
import { Context, Effect, Layer } from "effect"
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from "node:fs"
import { dirname } from "node:path"
import { Settings } from "../domain/config.ts"
import { isPostgresUrl, sqliteFilename } from "../domain/databaseUrl.ts"
import { runMigrations } from "./migrations.ts"
import { PostgresLive } from "./Postgres.ts"
import { makeSqliteClient } from "./sqliteClient.ts"
import { makeSyncTransactions, type SyncTransactions } from "./syncTransactions.ts"

export { sqliteFilename }

/** The store's better-sqlite3 connection (the one SqlClient uses) and its synchronous transactions. */
export class Sqlite extends Context.Tag("tollgate/Sqlite")<Sqlite, SyncTransactions & { readonly db: BetterSqlite3.Database }>() {}

const pragmas = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.unsafe("PRAGMA synchronous = FULL")
  yield* sql.unsafe("PRAGMA busy_timeout = 5000")
  yield* sql.unsafe("PRAGMA foreign_keys = ON")
  // Savepoints' sub-journals in memory (src/store/storeWorker.ts says why).
  yield* sql.unsafe("PRAGMA temp_store = MEMORY")
})

/**
 * The store holds every project's spend and the hashes of its keys: its files are the owner's only
 * (0600), whatever the process umask. The database file is created 0600 before SQLite opens it;
 * SQLite creates its -wal and -shm files with the database file's permissions, and files left by an
 * earlier version are tightened to 0600 too.
 */
export const createPrivateStoreFiles = (filename: string): void => {
  mkdirSync(dirname(filename), { recursive: true, mode: 0o700 })
  closeSync(openSync(filename, "a", 0o600))
  for (const file of [filename, `${filename}-wal`, `${filename}-shm`]) if (existsSync(file)) chmodSync(file, 0o600)
}

/** SqlClient and Sqlite for the configured DATABASE_URL, migrated and tuned. */
export const DatabaseLive: Layer.Layer<SqlClient.SqlClient | Sqlite, never, Settings> = Layer.scopedContext(
  Effect.gen(function* () {
    const settings = yield* Settings
    const filename = sqliteFilename(settings.databaseUrl)
    if (filename !== ":memory:") createPrivateStoreFiles(filename)
    // One owner of the main connection: opened here, the SqlClient built over it (src/store/sqliteClient.ts).
    const { sql, db } = yield* makeSqliteClient(filename)
    yield* pragmas.pipe(
      Effect.zipRight(runMigrations),
      Effect.provideService(SqlClient.SqlClient, sql),
      Effect.orDie
    )
    return Context.make(SqlClient.SqlClient, sql).pipe(Context.add(Sqlite, { db, ...makeSyncTransactions(db) }))
  })
)

/**
 * The store DATABASE_URL names: the embedded SQLite file (`DatabaseLive`, which also provides
 * `Sqlite`), or PostgreSQL (src/store/Postgres.ts). Services that have a faster synchronous read on
 * SQLite look `Sqlite` up as an option and read through `SqlClient` without it.
 */
export const StoreDatabaseLive: Layer.Layer<SqlClient.SqlClient, never, Settings> = Layer.unwrapEffect(
  Effect.map(Settings, (settings): Layer.Layer<SqlClient.SqlClient, never, Settings> => (isPostgresUrl(settings.databaseUrl) ? PostgresLive : DatabaseLive))
)
