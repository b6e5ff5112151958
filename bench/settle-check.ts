/**
 * `npx tsx bench/settle-check.ts`: overload, then check the books. Starts the bench mock and a
 * Tollgate child, offers 1,000 streams/s for 5 s and then 1,000 calls/s for 3 s with clients that give
 * up after 1.5 s (so many hang up mid-stream or before the headers), waits for the stragglers, and
 * checks what a user of the store would: no request left pending, no Credits left reserved, spent =
 * the sum of the receipts, every settled hold has its receipt and its finished idempotency record, and
 * `tollgate audit` over a copy of the store finds nothing. Exits 1 when any check fails.
 */
import Database from "better-sqlite3"
import { execFileSync } from "node:child_process"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { openLoad } from "./lib/load.ts"
import { startChild } from "./lib/procs.ts"

const root = process.cwd()
const mock = await startChild<{ port: number }>("mock", process.execPath, ["--import", "tsx", "bench/targets/mock.ts", "--delay", "20"], { cwd: root })
const tollgate = await startChild<{ port: number; key: string; dbPath: string }>(
  "tollgate",
  process.execPath,
  ["--import", "tsx", "bench/targets/tollgate.ts", "--upstream", `http://127.0.0.1:${mock.ready.port}`],
  { cwd: root, timeoutMs: 60_000 }
)
let n = 0
const body = (stream: boolean) => () =>
  JSON.stringify({
    model: "gpt-4o-mini",
    stream,
    stream_options: stream ? { include_usage: true } : undefined,
    messages: [{ role: "user", content: "Where is my order 48213-CX?" }],
    max_tokens: 400,
    metadata: { idempotency_key: `settle-${Date.now()}-${n++}` }
  })
const endpoint = { name: "tollgate", origin: `http://127.0.0.1:${tollgate.ready.port}`, path: "/v1/chat/completions", headers: { authorization: `Bearer ${tollgate.ready.key}` } }
const streams = await openLoad(endpoint, { rate: 1000, durationMs: 5000, stream: true, body: body(true), timeoutMs: 1500, drainMs: 500 })
const calls = await openLoad(endpoint, { rate: 1000, durationMs: 3000, stream: false, body: body(false), timeoutMs: 1500, drainMs: 500 })
console.log(`offered: streams ${streams.ok} answered, ${streams.errors} given up; calls ${calls.ok} answered, ${calls.errors} given up`)
await new Promise((resolve) => setTimeout(resolve, 8000))

const copy = join(mkdtempSync(join(tmpdir(), "tollgate-settle-")), "store.db")
const db = new Database(tollgate.ready.dbPath, { readonly: true })
const one = <T>(sql: string) => db.prepare(sql).get() as T
const checks: Array<[string, boolean, unknown]> = []
const check = (name: string, ok: boolean, detail: unknown) => checks.push([name, ok, detail])
const byStatus = db.prepare("SELECT status, COUNT(*) AS n FROM requests GROUP BY status").all()
check("no request pending", one<{ n: number }>("SELECT COUNT(*) AS n FROM requests WHERE status = 'pending'").n === 0, byStatus)
check("no hold left", one<{ n: number }>("SELECT COUNT(*) AS n FROM reservations WHERE state = 'held'").n === 0, db.prepare("SELECT state, COUNT(*) AS n FROM reservations GROUP BY state").all())
const window = one<{ spent: number; reserved: number }>("SELECT SUM(spent) AS spent, SUM(reserved) AS reserved FROM budget_windows")
const receipts = one<{ n: number; credits: number | null }>("SELECT COUNT(*) AS n, SUM(credits_charged) AS credits FROM receipts")
check("nothing reserved", window.reserved === 0, window)
check("spent = Σ receipts", window.spent === (receipts.credits ?? 0), { spent: window.spent, receipts })
check(
  "every settled hold has its receipt and finished idempotency record",
  one<{ n: number }>(`SELECT COUNT(*) AS n FROM reservations r WHERE r.state = 'settled' AND (
     NOT EXISTS (SELECT 1 FROM receipts x WHERE x.request_id = r.request_id) OR
     NOT EXISTS (SELECT 1 FROM idempotency i WHERE i.request_id = r.request_id AND i.state = 'finished'))`).n === 0,
  { settled: one<{ n: number }>("SELECT COUNT(*) AS n FROM reservations WHERE state = 'settled'").n }
)
await db.backup(copy)
db.close()
await tollgate.stop()
await mock.stop()
let audit = ""
let auditOk = true
try {
  audit = execFileSync(process.execPath, ["bin/tollgate.mjs", "audit", "--database", `sqlite:${copy}`], { cwd: root, encoding: "utf8" })
} catch (e) {
  auditOk = false
  audit = String((e as { stdout?: unknown }).stdout ?? e)
}
check("tollgate audit is clean", auditOk, audit.trim().split("\n").at(-1))
for (const [name, ok, detail] of checks) console.log(`${ok ? "ok  " : "FAIL"} ${name}: ${JSON.stringify(detail)}`)
process.exit(checks.every(([, ok]) => ok) ? 0 : 1)
