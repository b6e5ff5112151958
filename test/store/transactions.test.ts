/**
 * The store's two transaction paths on one connection: `Sqlite.transact` (synchronous bodies,
 * group-committed by `makeGroupCommit`, the one group commit) and `@effect/sql`'s plain
 * `withTransaction` (the admin's rare writes). Per transaction: atomic, durable before the caller
 * resumes, never interleaved with another.
 */
import { SqlClient } from "@effect/sql"
import Database from "better-sqlite3"
import { Deferred, Effect, Exit, Fiber } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mustSync } from "../../src/store/chatTransactions.ts"
import { DatabaseLive, Sqlite } from "../../src/store/Database.ts"
import { makeGroupCommit } from "../../src/store/syncTransactions.ts"
import { testRuntime } from "../support/runtime.ts"

const dir = mkdtempSync(join(tmpdir(), "tollgate-tx-"))
const file = join(dir, "store.db")
const runtime = testRuntime(DatabaseLive, { databaseUrl: `sqlite:${file}` }, afterAll)
const run = <A, E>(effect: Effect.Effect<A, E, Sqlite | SqlClient.SqlClient>) => runtime.runPromise(effect)
const runExit = <A, E>(effect: Effect.Effect<A, E, Sqlite | SqlClient.SqlClient>) => runtime.runPromiseExit(effect)

class Refused {
  readonly _tag = "Refused"
  constructor(readonly n: number) {}
}

const insert = (db: Database.Database, tag: string) => db.prepare("INSERT INTO t (tag) VALUES (?)").run(tag)
const tags = () => run(Effect.map(Sqlite, ({ db }) => (db.prepare("SELECT tag FROM t ORDER BY id").all() as Array<{ tag: string }>).map((r) => r.tag)))

beforeAll(() => run(Effect.map(Sqlite, ({ db }) => db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, tag TEXT NOT NULL)"))))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

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
        // Gates and event-loop turns, not timers: the effect transaction stays open until the sync
        // one has been offered and its group commit's turn has passed.
        const opened = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const long = yield* Effect.fork(
          Effect.exit(
            sql.withTransaction(
              Effect.gen(function* () {
                yield* sql`INSERT INTO t (tag) VALUES ('effect-1')`
                yield* Deferred.succeed(opened, undefined)
                yield* Deferred.await(release)
                yield* sql`INSERT INTO t (tag) VALUES ('effect-2')`
                return yield* Effect.fail("roll back")
              })
            )
          )
        )
        yield* Deferred.await(opened)
        // The effect transaction is open now; this one must not join it.
        const inside = db.inTransaction
        const sync = yield* Effect.fork(transact(() => insert(db, "sync")))
        // Let it reach the group commit (its submit schedules the drain on the next turn), then let
        // that turn pass, twice over: the drain has met the open transaction before it is released.
        yield* Effect.yieldNow()
        for (let turn = 0; turn < 2; turn++) yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(sync)
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

describe("sql.withTransaction (plain @effect/sql, for admin writes)", () => {
  it("commits concurrent transactions one by one; a failing one rolls back alone", async () => {
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

describe("makeGroupCommit: which COMMITs wait for the disk", () => {
  /** A WAL file store at `level`, the way the store worker opens one. */
  const openStore = (level: "FULL" | "OFF") => {
    const db = new Database(join(dir, `group-${level}-${Math.random().toString(36).slice(2)}.db`))
    db.pragma("journal_mode = WAL")
    db.pragma(`synchronous = ${level}`)
    db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, tag TEXT NOT NULL)")
    return db
  }
  const levelOf = (db: Database.Database) => db.pragma("synchronous", { simple: true }) as number

  /** Submit `[tag, sync]` bodies in one turn; each body records the level its COMMIT will run at. */
  const turn = (db: Database.Database, bodies: ReadonlyArray<readonly [string, boolean]>) =>
    new Promise<Array<string>>((resolve) => {
      const events: Array<string> = []
      let left = bodies.length
      const group = makeGroupCommit(db, { afterBatch: () => events.push("commit") })
      for (const [tag, sync] of bodies) {
        group.submit(
          (abort) => {
            insert(db, tag)
            events.push(`${tag}@${levelOf(db)}`)
            if (tag.startsWith("x")) abort("refused")
            return tag
          },
          (outcome) => {
            events.push(`${tag}:${outcome._tag}`)
            if (--left === 0) resolve(events)
          },
          sync
        )
      }
    })

  it("flush runs the queued bodies now, in the batches the turn would have made, and the turn's own drain then finds nothing", async () => {
    const db = openStore("FULL")
    try {
      const events: Array<string> = []
      const group = makeGroupCommit(db, { afterBatch: () => events.push("commit") })
      for (const [tag, sync] of [["s1", true], ["u1", false], ["s2", true]] as const) {
        group.submit(() => insert(db, tag), (outcome) => events.push(`${tag}:${outcome._tag}`), sync)
      }
      group.flush()
      // Synchronously: nothing waited for a turn.
      expect(events).toEqual(["u1:Committed", "commit", "s1:Committed", "s2:Committed", "commit"])
      await new Promise((r) => setImmediate(r))
      expect(events).toHaveLength(5)
      expect(db.prepare("SELECT tag FROM t ORDER BY id").pluck().all()).toEqual(["u1", "s1", "s2"])
    } finally {
      db.close()
    }
  })

  it("commits a turn's unsynced bodies first, as their own batch at synchronous=NORMAL, then the synced ones at the connection's FULL, which it keeps", async () => {
    const db = openStore("FULL")
    try {
      const events = await turn(db, [["s1", true], ["u1", false], ["s2", true], ["x1", false], ["u2", false]])
      expect(events).toEqual([
        "u1@1", "x1@1", "u2@1", "u1:Committed", "x1:Aborted", "u2:Committed", "commit",
        "s1@2", "s2@2", "s1:Committed", "s2:Committed", "commit"
      ])
      expect(levelOf(db)).toBe(2)
      const other = new Database(db.name, { readonly: true })
      try {
        expect((other.prepare("SELECT tag FROM t ORDER BY id").all() as Array<{ tag: string }>).map((r) => r.tag)).toEqual(["u1", "u2", "s1", "s2"])
      } finally {
        other.close()
      }
    } finally {
      db.close()
    }
  })

  it("runs a turn of synced bodies as one batch at FULL, and a lone unsynced body at NORMAL", async () => {
    const db = openStore("FULL")
    try {
      expect(await turn(db, [["s1", true], ["s2", true]])).toEqual(["s1@2", "s2@2", "s1:Committed", "s2:Committed", "commit"])
      expect(await turn(db, [["u1", false]])).toEqual(["u1@1", "u1:Committed", "commit"])
      expect(levelOf(db)).toBe(2)
    } finally {
      db.close()
    }
  })

  it("fails every later batch, instead of committing it unsynced, when the connection's level cannot be put back", async () => {
    const db = openStore("FULL")
    const exec = db.exec.bind(db)
    let broken = false
    db.exec = (source: string) => {
      if (broken && source === "PRAGMA synchronous = 2") throw new Error("cannot restore")
      return exec(source)
    }
    try {
      // The same group throughout, as in the worker.
      const events: Array<string> = []
      const group = makeGroupCommit(db)
      const submit = (tag: string, sync: boolean) =>
        new Promise<void>((resolve) =>
          group.submit(
            () => insert(db, tag),
            (outcome) => {
              events.push(`${tag}:${outcome._tag}`)
              resolve()
            },
            sync
          )
        )
      await submit("u0", false)
      broken = true
      await Promise.all([submit("u1", false), submit("s1", true)])
      await submit("s2", true)
      // u1 committed (at NORMAL) before the level failed to come back; nothing after it committed.
      expect(events).toEqual(["u0:Committed", "u1:Committed", "s1:Died", "s2:Died"])
      expect((db.prepare("SELECT tag FROM t ORDER BY id").all() as Array<{ tag: string }>).map((r) => r.tag)).toEqual(["u0", "u1"])
    } finally {
      db.close()
    }
  })

  it("never raises a connection's level: on a store at synchronous=OFF an unsynced body commits at OFF", async () => {
    const db = openStore("OFF")
    try {
      expect(await turn(db, [["u1", false], ["s1", true]])).toEqual(["u1@0", "u1:Committed", "commit", "s1@0", "s1:Committed", "commit"])
      expect(levelOf(db)).toBe(0)
    } finally {
      db.close()
    }
  })
})

describe("mustSync: a commit reaches the disk before anything it wrote is seen outside", () => {
  const reserve = (stream: boolean) => ({ request: { stream } })
  it.each([
    ["reserve", reserve(false), false, "a non-streamed call's reservation: nobody outside sees it before its settlement's fsync"],
    ["reserve", reserve(true), true, "a stream's reservation: its headers carry the request id"],
    ["settle", {}, true, "a settlement: its response follows"],
    ["abandon", {}, true, "an abandonment: its error reply follows"],
    ["extend", {}, true, "a stream's extension"]
  ] as const)("%s %j → %s (%s)", (op, args, expected, _why) => {
    expect(mustSync(op, args)).toBe(expected)
  })
})
