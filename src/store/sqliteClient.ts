/**
 * The main thread's SQLite connection and the `SqlClient` over it: one owner. We open the
 * better-sqlite3 connection ourselves and build the client with @effect/sql's public constructors
 * (`SqlClient.make`, `Statement.makeCompilerSqlite`), as @effect/sql-sqlite-node does inside its own
 * `make` — which keeps its connection private. So the synchronous transactions (Sqlite.transact, the
 * inline store port) and the Effect queries share one connection without reaching into the driver
 * (docs/decisions/0006-sqlite-connection-owner.md; upstream, `SqliteClient` could expose its
 * connection, e.g. `withConnection(db => …)`, or accept one in its config).
 *
 * Semantics kept from @effect/sql-sqlite-node 0.53: one connection behind a semaphore of 1 (queries
 * and transactions serialize), prepared statements cached (LRU, 200), WAL.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import { SqlClient } from "@effect/sql"
import type { Connection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import * as Statement from "@effect/sql/Statement"
import BetterSqlite3 from "better-sqlite3"
import { Context, Effect, Scope } from "effect"

const PREPARED_CACHE = 200

/** Open `filename` (WAL) and build the SqlClient over it; the connection closes with the scope. */
export const makeSqliteClient = (filename: string): Effect.Effect<{ readonly sql: SqlClient.SqlClient; readonly db: BetterSqlite3.Database }, never, Scope.Scope> =>
  Effect.gen(function* () {
    const db = new BetterSqlite3(filename)
    yield* Effect.addFinalizer(() => Effect.sync(() => db.close()))
    db.pragma("journal_mode = WAL")

    // Prepared statements by SQL text, least recently used first out.
    const prepared = new Map<string, BetterSqlite3.Statement>()
    const prepare = (text: string): BetterSqlite3.Statement => {
      const hit = prepared.get(text)
      if (hit !== undefined) {
        prepared.delete(text)
        prepared.set(text, hit)
        return hit
      }
      const statement = db.prepare(text)
      prepared.set(text, statement)
      if (prepared.size > PREPARED_CACHE) prepared.delete(prepared.keys().next().value!)
      return statement
    }

    const runStatement = (statement: () => BetterSqlite3.Statement, params: ReadonlyArray<unknown>, raw: boolean) =>
      Effect.withFiberRuntime<ReadonlyArray<any>, SqlError>((fiber) => {
        try {
          const s = statement()
          if (Context.get(fiber.currentContext, SqlClient.SafeIntegers)) s.safeIntegers(true)
          if (s.reader) return Effect.succeed(s.all(...params))
          const result = s.run(...params)
          return Effect.succeed(raw ? (result as unknown as ReadonlyArray<any>) : [])
        } catch (cause) {
          return Effect.fail(new SqlError({ cause, message: "Failed to execute statement" }))
        }
      })

    const connection: Connection = {
      execute: (text, params, transformRows) => {
        const rows = runStatement(() => prepare(text), params, false)
        return transformRows ? Effect.map(rows, transformRows) : rows
      },
      executeRaw: (text, params) => runStatement(() => prepare(text), params, true),
      executeValues: (text, params) =>
        Effect.try({
          try: () => {
            const s = prepare(text)
            if (!s.reader) {
              s.run(...params)
              return []
            }
            s.raw(true)
            try {
              return s.all(...params) as ReadonlyArray<ReadonlyArray<unknown>>
            } finally {
              s.raw(false)
            }
          },
          catch: (cause) => new SqlError({ cause, message: "Failed to execute statement" })
        }),
      executeUnprepared: (text, params, transformRows) => {
        const rows = runStatement(() => db.prepare(text), params ?? [], false)
        return transformRows ? Effect.map(rows, transformRows) : rows
      },
      executeStream: () => Effect.dieMessage("executeStream is not implemented for SQLite") as never
    }

    const semaphore = yield* Effect.makeSemaphore(1)
    const acquirer = semaphore.withPermits(1)(Effect.succeed(connection))
    const transactionAcquirer = Effect.uninterruptibleMask((restore) =>
      Effect.as(
        Effect.zipRight(
          restore(semaphore.take(1)),
          Effect.tap(Effect.scope, (scope) => Scope.addFinalizer(scope, semaphore.release(1)))
        ),
        connection
      )
    )
    const sql = yield* SqlClient.make({
      acquirer,
      compiler: Statement.makeCompilerSqlite(),
      transactionAcquirer,
      // The write lock at BEGIN, waiting busy_timeout for it: a deferred transaction that reads first
      // and then writes (read the row, write it and its event) fails at once with "database is locked"
      // when the store worker committed in between, since its snapshot is stale; an immediate one waits.
      beginTransaction: "BEGIN IMMEDIATE",
      spanAttributes: [["db.system.name", "sqlite"]]
    }).pipe(Effect.provide(Reactivity.layer))
    return { sql, db }
  })
