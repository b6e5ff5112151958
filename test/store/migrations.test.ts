/**
 * Migration 0003 (fewer indexes written per governed call) on a store made by the migrations before
 * it: nothing is lost, and the reads that need an index still get one.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { makeAdminLists } from "../../src/store/adminLists.ts"
import { type migrationSteps, runMigrationsUpTo } from "../../src/store/migrations.ts"
import { migrate } from "../audit/synthetic.ts"

/** A store as the migrations up to and including `last` left it. */
const migrateUpTo = (filename: string, last: keyof typeof migrationSteps) =>
  Effect.runPromise(runMigrationsUpTo(last).pipe(Effect.provide(SqliteClient.layer({ filename })), Effect.orDie))

const seed = (db: BetterSqlite3.Database) => {
  db.prepare(`INSERT INTO projects VALUES ('prj_a', 'org_a', 'a', 1000, 60, 10, 0, 0)`).run()
  db.prepare(`INSERT INTO budget_windows VALUES ('prj_a', '2026-11', 20, 50)`).run()
  const request = db.prepare(`INSERT INTO requests (id, project_id, environment, key_id, endpoint, model, status, created_at) VALUES (?, 'prj_a', 'development', 'key_a', '/v1/chat/completions', 'auto', ?, ?)`)
  request.run("req_1", "completed", 1)
  request.run("req_2", "pending", 2)
  const hold = db.prepare(`INSERT INTO reservations (id, request_id, project_id, period, amount, state, charge, deadline, created_at) VALUES (?, ?, 'prj_a', '2026-11', ?, ?, ?, ?, ?)`)
  hold.run("rsv_1", "req_1", 40, "settled", 20, 100, 1)
  hold.run("rsv_2", "req_2", 50, "held", null, 200, 2)
  db.prepare(
    `INSERT INTO receipts (id, request_id, project_id, environment, period, seq, credits_charged, rate_card_version, body, prev_hash, hash, signature, signing_key_id, created_at, route, output_tokens)
     VALUES ('rcp_1', 'req_1', 'prj_a', 'development', '2026-11', 1, 20, 'rc_2026-11', '{}', 'p', 'h', 's', 'k', 1, 'demo', 7)`
  ).run()
}

const planOf = (db: BetterSqlite3.Database, query: string, params: ReadonlyArray<unknown> = []) =>
  (db.prepare(`EXPLAIN QUERY PLAN ${query}`).all(...params) as Array<{ detail: string }>).map((r) => r.detail).join(" | ")

/** A store file as the migrations up to `last` left it, seeded, and an open handle on it. */
const seededStoreAt = async (last: keyof typeof migrationSteps) => {
  const filename = join(mkdtempSync(join(tmpdir(), "tg-migrate-")), "t.db")
  await migrateUpTo(filename, last)
  const before = new BetterSqlite3(filename)
  seed(before)
  return { filename, before }
}

describe("migration 0003: leaner write indexes", () => {
  it("keeps every row of a store made before it, and the reads that need an index still use one", async () => {
    const { filename, before } = await seededStoreAt("0002_receipt_usage_columns")
    const rowsOf = (db: BetterSqlite3.Database) =>
      ["projects", "budget_windows", "requests", "reservations", "receipts"].map((t) => db.prepare(`SELECT * FROM ${t} ORDER BY 1`).all())
    const rows = rowsOf(before)
    before.close()

    await migrate(filename)
    const db = new BetterSqlite3(filename, { readonly: true })
    // Later migrations add columns (0004: epoch, progress): every row keeps every value it had.
    expect(rowsOf(db)).toMatchObject(rows)

    // The tables of migration 0003's time (0012's outbox and webhooks have indexes of their own).
    const indexes = db.prepare(`SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name NOT IN ('events', 'webhook_endpoints', 'webhook_deliveries') ORDER BY name`).all()
    expect(indexes).toEqual([
      { name: "api_keys_listed", sql: "CREATE INDEX api_keys_listed ON api_keys(project_id, created_at, id)" },
      { name: "projects_created", sql: "CREATE INDEX projects_created ON projects(created_at, id)" },
      { name: "receipts_window", sql: "CREATE INDEX receipts_window ON receipts(project_id, period, environment)" },
      { name: "reservations_held", sql: "CREATE INDEX reservations_held ON reservations(deadline) WHERE state = 'held'" }
    ])

    // The recovery sweep (Ledger.expiredHolds) and the audit's open holds: only held rows, by index.
    expect(planOf(db, `SELECT id, request_id FROM reservations WHERE state = 'held' AND deadline <= 150`)).toContain("USING INDEX reservations_held")
    expect(db.prepare(`SELECT id FROM reservations WHERE state = 'held' AND deadline <= 250`).all()).toEqual([{ id: "rsv_2" }])
    // GET /v1/usage's sums (Ledger.usage) and the audit's per-project window reads.
    expect(planOf(db, `SELECT route FROM receipts WHERE project_id = 'prj_a' AND environment = 'development' AND period = '2026-11'`)).toContain(
      "USING INDEX receipts_window (project_id=? AND period=? AND environment=?)"
    )
    expect(planOf(db, `SELECT COUNT(*) FROM receipts WHERE project_id = 'prj_a' AND period = '2026-11'`)).toContain("receipts_window (project_id=? AND period=?)")
    db.close()
  })
})

describe("migration 0004: instance epochs", () => {
  it("adds the instances table and the epoch and progress columns; rows made before keep their values, with no epoch", async () => {
    const { filename, before } = await seededStoreAt("0003_leaner_write_indexes")
    before.prepare(`INSERT INTO idempotency (project_id, environment, key, fingerprint, request_id, state, created_at, expires_at) VALUES ('prj_a', 'development', 'k', 'f', 'req_2', 'in_flight', 2, 200)`).run()
    const tables = ["reservations", "idempotency"]
    const rows = tables.map((t) => before.prepare(`SELECT * FROM ${t} ORDER BY 1`).all())
    before.close()

    await migrate(filename)
    const db = new BetterSqlite3(filename)
    const after = tables.map((t) => db.prepare(`SELECT * FROM ${t} ORDER BY 1`).all() as Array<Record<string, unknown>>)
    expect(after).toMatchObject(rows)
    expect(after[0]!.map((r) => [r.epoch, r.progress])).toEqual([[null, null], [null, null]])
    expect(after[1]!.map((r) => r.epoch)).toEqual([null])
    // Epochs count up from 1, one per process that opens the store.
    const insert = db.prepare(`INSERT INTO instances (instance_id, started_at, heartbeat_at) VALUES ('host', 0, 0) RETURNING epoch`)
    expect([insert.get(), insert.get()]).toEqual([{ epoch: 1 }, { epoch: 2 }])
    db.close()
  })
})

describe("migration 0006: the admin lists' indexes", () => {
  it("a page of projects or keys is read by keyset on an index, never by scanning or sorting the table", async () => {
    const { filename, before } = await seededStoreAt("0005_shared_rate_limit")
    before.prepare(`INSERT INTO api_keys (id, project_id, environment, secret_sha256, created_at) VALUES ('key_a', 'prj_a', 'development', 'h', 1)`).run()
    before.close()
    await migrate(filename)

    // The statements the services run (src/store/adminLists.ts), compiled by the SQLite client.
    const lists = await Effect.runPromise(Effect.map(SqlClient.SqlClient, makeAdminLists).pipe(Effect.provide(SqliteClient.layer({ filename }))))
    const db = new BetterSqlite3(filename, { readonly: true })
    const plan = (statement: Statement.Statement<unknown>) => planOf(db, ...statement.compile())
    const position = { created_at: 0, id: "prj_a" }
    for (const [statement, index] of [
      [lists.projects("2026-11", undefined, 26, undefined), "projects_created"],
      [lists.projects("2026-11", position, 26, undefined), "projects_created ((created_at,id)>(?,?))"],
      [lists.keys("prj_a", undefined, undefined, 26), "api_keys_listed (project_id=?)"],
      [lists.keys("prj_a", "development", { created_at: 0, id: "key_a" }, 26), "api_keys_listed (project_id=? AND (created_at,id)>(?,?))"]
    ] as const) {
      expect(plan(statement)).toContain(`USING INDEX ${index}`)
      expect(plan(statement)).not.toContain("TEMP B-TREE")
    }
    // Each project's window: by its primary key, once per row of the page.
    expect(plan(lists.projects("2026-11", undefined, 26, undefined))).toContain("sqlite_autoindex_budget_windows_1 (project_id=? AND period=?)")
    // The rows made before it are listed through the new index.
    const [text, params] = lists.keys("prj_a", undefined, undefined, 26).compile()
    expect(db.prepare(text).all(...params)).toMatchObject([{ id: "key_a" }])
    db.close()
  })
})

describe("migration 0007: what an earlier version stored past today's bounds", () => {
  it("a key's expiry past 8.64e15 ms (grace_seconds 1e13) becomes that last instant; a rate, burst or cap past its bound comes down to it; others stay", async () => {
    const { filename, before } = await seededStoreAt("0006_admin_list_indexes")
    const key = before.prepare(`INSERT INTO api_keys (id, project_id, environment, secret_sha256, created_at, expires_at) VALUES (?, 'prj_a', 'development', 'h', 1, ?)`)
    key.run("key_far", 1_764_000_000_000 + 10_000_000_000_000_000)
    key.run("key_near", 1_764_000_000_000)
    before.prepare(`INSERT INTO projects VALUES ('prj_huge', 'org_a', 'huge', 9000000000000000000, 900000000000, 900000000000, 0, 0)`).run()
    before.close()
    await migrate(filename)
    const db = new BetterSqlite3(filename, { readonly: true })
    expect(db.prepare(`SELECT id, expires_at FROM api_keys ORDER BY id`).all()).toEqual([
      { id: "key_far", expires_at: 8_640_000_000_000_000 },
      { id: "key_near", expires_at: 1_764_000_000_000 }
    ])
    expect(db.prepare(`SELECT id, budget_credits, requests_per_minute, burst FROM projects ORDER BY id`).all()).toEqual([
      { id: "prj_a", budget_credits: 1000, requests_per_minute: 60, burst: 10 },
      { id: "prj_huge", budget_credits: Number.MAX_SAFE_INTEGER, requests_per_minute: 60_000_000, burst: 10_000_000 }
    ])
    db.close()
  })
})
