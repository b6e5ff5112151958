/**
 * The audit port's promise on both engines (src/store/auditSource.ts): one snapshot for the whole
 * walk — a write committed by another connection after the walk began is not seen by it, however
 * many queries follow — and no writes through it. SQLite: a WAL file and a second connection;
 * PostgreSQL: a fresh schema of the test server and a second client (skipped, saying so, without one).
 */
import Database from "better-sqlite3"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { describe, expect, it } from "vitest"
import { allRows } from "../../src/store/auditSource.ts"
import { openAuditSource } from "../../src/store/auditReader.ts"
import { freshSchema, pgReachable, TEST_PG_URL } from "../support/pg.ts"

interface Store {
  readonly url: string
  /** Run one statement on a separate connection, committed when it returns. */
  readonly write: (sql: string) => Promise<void>
  readonly close: () => Promise<void>
}

const sqliteStore = async (): Promise<Store> => {
  const file = join(mkdtempSync(join(tmpdir(), "tollgate-audit-snapshot-")), "s.db")
  const db = new Database(file)
  db.pragma("journal_mode = WAL")
  return { url: `sqlite:${file}`, write: async (sql) => void db.exec(sql), close: async () => void db.close() }
}

const pgStore = async (): Promise<Store> => {
  const schema = freshSchema()
  const client = new pg.Client({ connectionString: schema.url })
  await client.connect()
  return {
    url: schema.url,
    write: async (sql) => void (await client.query(sql)),
    close: async () => {
      await client.end()
      schema.drop()
    }
  }
}

const pgUp = pgReachable()
// A statement that writes, in a form each engine lets a query return rows from.
const engines = [
  { label: "SQLite", make: sqliteStore, skip: false, write: `DELETE FROM t RETURNING n` },
  {
    label: pgUp ? "PostgreSQL" : `PostgreSQL (skipped: no server at ${TEST_PG_URL})`,
    make: pgStore,
    skip: !pgUp,
    write: `SELECT nextval('s') AS n`
  }
]

for (const { label, make, skip, write } of engines) {
  describe.skipIf(skip)(`the audit's snapshot on ${label}`, () => {
    it("sees the store as it was when the walk began, through every query, and writes nothing", async () => {
      const store = await make()
      try {
        await store.write(`CREATE TABLE t (n INTEGER NOT NULL)`)
        await store.write(`INSERT INTO t (n) VALUES (1), (2), (3)`)
        if (label.startsWith("PostgreSQL")) await store.write(`CREATE SEQUENCE s`)
        const { source } = await openAuditSource(store.url)
        const count = async () => (await allRows<{ c: number }>(source, { sql: `SELECT COUNT(*) AS c FROM t`, params: {} }))[0]!.c
        try {
          expect(await count()).toBe(3)
          await store.write(`INSERT INTO t (n) VALUES (4)`)
          await store.write(`DELETE FROM t WHERE n = 1`)
          expect(await count()).toBe(3) // committed elsewhere, after the snapshot: not seen
          const sum = await allRows<{ s: number }>(source, { sql: `SELECT SUM(n) AS s FROM t WHERE n >= @lo`, params: { lo: 0 } })
          expect(sum[0]!.s).toBe(6)
          await expect(allRows(source, { sql: write, params: {} })).rejects.toThrow(/read-?only/i)
        } finally {
          await source.close()
        }
        const { source: later } = await openAuditSource(store.url)
        try {
          expect((await allRows<{ c: number }>(later, { sql: `SELECT COUNT(*) AS c FROM t`, params: {} }))[0]!.c).toBe(3) // 2, 3, 4
          expect((await allRows<{ s: number }>(later, { sql: `SELECT SUM(n) AS s FROM t`, params: {} }))[0]!.s).toBe(9)
        } finally {
          await later.close()
        }
      } finally {
        await store.close()
      }
    })
  })
}
