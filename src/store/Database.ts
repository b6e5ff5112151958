/**
 * The SQL store behind every service. `DATABASE_URL=sqlite:<path>` (default) opens an embedded
 * SQLite file through @effect/sql-sqlite-node with WAL and synchronous=FULL, so a settled charge is
 * on disk before its response leaves. Migrations run at start-up.
 */
import { SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Effect, Layer } from "effect"
import { mkdirSync } from "node:fs"
import { dirname } from "node:path"
import { Settings } from "../domain/config.ts"
import { installGroupCommit } from "./groupCommit.ts"
import { sqliteFilename } from "./databaseUrl.ts"
import { runMigrations } from "./migrations.ts"

export { sqliteFilename }

const pragmas = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.unsafe("PRAGMA synchronous = FULL")
  yield* sql.unsafe("PRAGMA busy_timeout = 5000")
  yield* sql.unsafe("PRAGMA foreign_keys = ON")
})

/** SqlClient for the configured DATABASE_URL, migrated and tuned. */
export const DatabaseLive = Layer.unwrapEffect(
  Effect.gen(function* () {
    const settings = yield* Settings
    const filename = sqliteFilename(settings.databaseUrl)
    if (filename !== ":memory:") mkdirSync(dirname(filename), { recursive: true })
    const client = SqliteClient.layer({ filename })
    // Group commit (src/store/groupCommit.ts): one fsync per batch of transactions, same guarantees.
    const setup = Layer.effectDiscard(
      Effect.zipRight(pragmas, runMigrations).pipe(Effect.zipRight(Effect.flatMap(SqlClient.SqlClient, installGroupCommit)), Effect.orDie)
    )
    return Layer.provideMerge(setup, client)
  })
)
