/**
 * The store's two transaction paths on one connection: `Sqlite.transact` (synchronous bodies,
 * group-committed) and `@effect/sql`'s `withTransaction` (group-committed Effects). Per transaction:
 * atomic, durable before the caller resumes, never interleaved with another.
 */
import { SqlClient } from "@effect/sql"
import Database from "better-sqlite3"
import { Effect, Exit, Fiber, Layer, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeSettings, Settings } from "../../src/domain/config.ts"
import { DatabaseLive, Sqlite } from "../../src/store/Database.ts"

const dir = mkdtempSync(join(tmpdir(), "tollgate-tx-"))
const file = join(dir, "store.db")
const runtime = ManagedRuntime.make(DatabaseLive.pipe(Layer.provide(Layer.succeed(Settings, makeSettings({ databaseUrl: `sqlite:${file}` })))))
const run = <A, E>(effect: Effect.Effect<A, E, Sqlite | SqlClient.SqlClient>) => runtime.runPromise(effect)
const runExit = <A, E>(effect: Effect.Effect<A, E, Sqlite | SqlClient.SqlClient>) => runtime.runPromiseExit(effect)

class Refused {
  readonly _tag = "Refused"
  constructor(readonly n: number) {}
}

const insert = (db: Database.Database, tag: string) => db.prepare("INSERT INTO t (tag) VALUES (?)").run(tag)
const tags = () => run(Effect.map(Sqlite, ({ db }) => (db.prepare("SELECT tag FROM t ORDER BY id").all() as Array<{ tag: string }>).map((r) => r.tag)))

beforeAll(() => run(Effect.map(Sqlite, ({ db }) => db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, tag TEXT NOT NULL)"))))
afterAll(async () => {
  await runtime.dispose()
  rmSync(dir, { recursive: true, force: true })
})

describe("Sqlite.transact (synchronous, group-committed)", () => {
  it("commits a batch of concurrent transactions; an aborted one and a throwing one leave no trace and fail alone", async () => {
    await run(Effect.map(Sqlite, ({ db }) => db.exec("DELETE FROM t")))
    const exits = await run(
      Effect.flatMap(Sqlite, ({ db, transact }) =>
        Effect.all(
          Array.from({ length: 12 }, (_, n) =>
            Effect.exit(
              transact<number, Refused>((abort) => {
                insert(db, `a${n}`)
                insert(db, `b${n}`)
                if (n === 3) abort(new Refused(n))
                if (n === 7) throw new Error("boom")
                return n
              })
            )
          ),
          { concurrency: "unbounded" }
        )
      )
    )
    expect(exits.filter(Exit.isSuccess).map((e) => e.value)).toEqual([0, 1, 2, 4, 5, 6, 8, 9, 10, 11])
    expect(exits[3]).toStrictEqual(Exit.fail(new Refused(3)))
    expect(Exit.isFailure(exits[7]!) && exits[7].cause._tag === "Die").toBe(true)
    const rows = await tags()
    // Whole transactions only: both rows of every committed body, none of 3 or 7.
    expect(rows.length).toBe(20)
    for (const n of [0, 1, 2, 4, 5, 6, 8, 9, 10, 11]) expect(rows).toEqual(expect.arrayContaining([`a${n}`, `b${n}`]))
    expect(rows.some((t) => t.endsWith("3") && t.length === 2)).toBe(false)
    expect(rows.some((t) => t.endsWith("7"))).toBe(false)
  })

  it("is committed when it returns: a second connection to the file sees the rows (the fsync itself is SQLite's, with synchronous=FULL)", async () => {
    const mode = await run(Effect.flatMap(Sqlite, ({ db, transact }) => Effect.as(transact(() => insert(db, "durable")), [db.pragma("journal_mode", { simple: true }), db.pragma("synchronous", { simple: true })])))
    expect(mode).toEqual(["wal", 2]) // WAL, synchronous=FULL: every COMMIT fsyncs the log
    const other = new Database(file, { readonly: true })
    try {
      expect(other.prepare("SELECT COUNT(*) AS n FROM t WHERE tag = 'durable'").get()).toEqual({ n: 1 })
    } finally {
      other.close()
    }
  })

  it("waits while an @effect/sql transaction spans event-loop turns, and is not rolled back with it", async () => {
    await run(Effect.map(Sqlite, ({ db }) => db.exec("DELETE FROM t")))
    const result = await run(
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { db, transact } = yield* Sqlite
        const long = yield* Effect.fork(
          Effect.exit(
            sql.withTransaction(
              Effect.gen(function* () {
                yield* sql`INSERT INTO t (tag) VALUES ('effect-1')`
                yield* Effect.sleep("30 millis")
                yield* sql`INSERT INTO t (tag) VALUES ('effect-2')`
                return yield* Effect.fail("roll back")
              })
            )
          )
        )
        yield* Effect.sleep("5 millis")
        // The effect transaction is open now; this one must not join it.
        const inside = db.inTransaction
        yield* transact(() => insert(db, "sync"))
        const longExit = yield* Fiber.join(long)
        return { inside, longFailed: Exit.isFailure(longExit) }
      })
    )
    expect(result).toEqual({ inside: true, longFailed: true })
    expect(await tags()).toEqual(["sync"])
  })

  it("inside an @effect/sql transaction runs at once as a savepoint of it: rolled back with it", async () => {
    await run(Effect.map(Sqlite, ({ db }) => db.exec("DELETE FROM t")))
    const exit = await runExit(
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { db, transact } = yield* Sqlite
        return yield* sql.withTransaction(
          Effect.gen(function* () {
            yield* transact(() => insert(db, "nested"))
            const seen = (db.prepare("SELECT COUNT(*) AS n FROM t").get() as { n: number }).n
            return yield* Effect.fail(`saw ${seen}`)
          })
        )
      })
    )
    expect(exit).toStrictEqual(Exit.fail("saw 1"))
    expect(await tags()).toEqual([])
  })
})

describe("sql.withTransaction (group-committed Effects)", () => {
  it("commits concurrent transactions together; a failing one rolls back alone", async () => {
    await run(Effect.map(Sqlite, ({ db }) => db.exec("DELETE FROM t")))
    const exits = await run(
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        Effect.all(
          Array.from({ length: 8 }, (_, n) =>
            Effect.exit(
              sql.withTransaction(
                Effect.gen(function* () {
                  yield* sql`INSERT INTO t (tag) VALUES (${`e${n}`})`
                  if (n === 5) return yield* Effect.fail(new Refused(n))
                  return n
                })
              )
            )
          ),
          { concurrency: "unbounded" }
        )
      )
    )
    expect(exits.filter(Exit.isSuccess).map((e) => e.value)).toEqual([0, 1, 2, 3, 4, 6, 7])
    expect(exits[5]).toStrictEqual(Exit.fail(new Refused(5)))
    expect((await tags()).sort()).toEqual(["e0", "e1", "e2", "e3", "e4", "e6", "e7"])
  })
})
