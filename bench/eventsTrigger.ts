/**
 * `npx tsx bench/eventsTrigger.ts [--n 50000] [--rounds 6]` (issue 42): what the budget threshold
 * trigger (migration 0012) adds to a settlement's UPDATE of its budget window on SQLite, the one
 * statement of the governed path it touches. Two stores migrated alike, one with the trigger dropped;
 * the settlement's UPDATE (spent grows, reserved shrinks, no threshold crossed) timed in CPU µs a
 * statement, the stores interleaved round by round. A benchmark: printed, never asserted.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { runMigrations } from "../src/store/migrations.ts"
import { numArg } from "./lib/args.ts"

const n = numArg("--n", 50_000)
const rounds = numArg("--rounds", 6)

const store = async (name: string, trigger: boolean) => {
  const filename = join(mkdtempSync(join(tmpdir(), "tollgate-trigger-")), `${name}.db`)
  await Effect.runPromise(runMigrations.pipe(Effect.provide(SqliteClient.layer({ filename })), Effect.orDie))
  const db = new BetterSqlite3(filename)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = OFF") // CPU, not the disk
  db.prepare(`INSERT INTO projects (id, organization, name, budget_credits, requests_per_minute, burst, created_at, updated_at) VALUES ('prj_b', 'org_b', 'b', 9000000000000000, 60, 10, 0, 0)`).run()
  db.prepare(`INSERT INTO budget_windows (project_id, period, spent, reserved) VALUES ('prj_b', '2026-11', 0, ${n * rounds * 2})`).run()
  if (!trigger) db.exec("DROP TRIGGER events_budget_threshold")
  const settle = db.prepare("UPDATE budget_windows SET spent = spent + ?, reserved = reserved - ? WHERE project_id = ? AND period = ?")
  const run = db.transaction((k: number) => {
    for (let i = 0; i < k; i++) settle.run(1, 1, "prj_b", "2026-11")
  })
  return { name, run: () => run(n) }
}

const stores = [await store("with trigger", true), await store("without trigger", false)]
const cpu = new Map<string, number>()
for (let r = 0; r < rounds; r++) {
  for (const s of r % 2 === 0 ? stores : [...stores].reverse()) {
    const before = process.cpuUsage()
    s.run()
    const used = process.cpuUsage(before)
    cpu.set(s.name, (cpu.get(s.name) ?? 0) + used.user + used.system)
  }
}
console.log(`| settlement UPDATE of budget_windows, SQLite (${rounds} × ${n}) | CPU µs a statement |`)
console.log("| --- | ---: |")
for (const s of stores) console.log(`| ${s.name} | ${((cpu.get(s.name) ?? 0) / (rounds * n)).toFixed(2)} |`)
