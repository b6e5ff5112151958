/**
 * `npx tsx bench/receiptLogRound.ts [--receipts 200000] [--per-round 2000]`
 *
 * Issue 43: what the receipt log's background round (src/services/ReceiptLog.ts `extendAll`) costs,
 * in isolation: a SQLite store (migrated, in a temp folder) holds one project's receipts (random
 * hashes, written by SQL); its chain head is moved forward `per-round` receipts at a time, as calls
 * would, and a round runs after each move — the log extended, a checkpoint signed. Prints the main
 * thread's CPU µs a receipt and a round's CPU µs (its median and p90), and checks the last
 * checkpoint's root against spec/merkle.ts's tree head of every receipt. `node --cpu-prof` on it
 * (with `--import tsx`) shows where the time goes. Printed; the root check throws when it differs.
 */
import Database from "better-sqlite3"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect, Layer, Option } from "effect"
import { receiptLeafHash, treeHead } from "../spec/merkle.ts"
import { Pricing } from "../src/services/Pricing.ts"
import { ReceiptLog } from "../src/services/ReceiptLog.ts"
import { ReceiptSigner } from "../src/services/ReceiptSigner.ts"
import { StoreDatabaseLive } from "../src/store/Database.ts"
import { testRuntime } from "../test/support/runtime.ts"
import { numArg } from "./lib/args.ts"
import { median } from "./lib/stats.ts"

process.env.TOLLGATE_CHECKPOINT_INTERVAL_MS = "0"
const n = numArg("--receipts", 200_000)
const perRound = numArg("--per-round", 2_000)
const dir = mkdtempSync(join(tmpdir(), "tollgate-log-round-"))
const file = join(dir, "store.db")
const project = "proj_logbench"

const runtime = testRuntime(ReceiptLog.Default.pipe(Layer.provideMerge(Layer.merge(ReceiptSigner.Default, Pricing.Default)), Layer.provideMerge(StoreDatabaseLive)), {
  databaseUrl: `sqlite:${file}`,
  receiptKeyFile: Option.some(join(dir, "receipt-signing-key.pem"))
})
try {
  const log = await runtime.runPromise(ReceiptLog)
  const db = new Database(file)
  db.pragma("busy_timeout = 5000")
  db.prepare(`INSERT INTO projects (id, organization, name, budget_credits, requests_per_minute, burst, created_at, updated_at) VALUES (?, 'org_bench', 'bench', 1000000, 60, 10, 0, 0)`).run(project)
  const insert = db.prepare(`INSERT INTO receipts (id, request_id, project_id, environment, period, seq, credits_charged, rate_card_version, body, prev_hash, hash, signature, signing_key_id, created_at)
    VALUES (?, ?, ?, 'development', '2026-10', ?, 3, 'rc_2020-01', '{}', '', ?, '', 'rk_bench', 0)`)
  const hashes: Array<string> = []
  db.transaction(() => {
    for (let seq = 1; seq <= n; seq++) {
      const hash = randomBytes(32).toString("hex")
      hashes.push(hash)
      insert.run(`rcpt_${seq}`, `req_${seq}`, project, seq, hash)
    }
  })()
  const head = db.prepare(`INSERT INTO chain_heads (project_id, seq, hash) VALUES (?, ?, ?) ON CONFLICT (project_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash`)

  const perRoundCpu: Array<number> = []
  let totalCpu = 0
  const wall = performance.now()
  for (let to = Math.min(perRound, n); ; to = Math.min(to + perRound, n)) {
    head.run(project, to, hashes[to - 1])
    const cpu = process.cpuUsage()
    await runtime.runPromise(log.extendAll)
    const used = process.cpuUsage(cpu)
    perRoundCpu.push(used.user + used.system)
    totalCpu += used.user + used.system
    if (to === n) break
  }
  const wallMs = performance.now() - wall
  const cp = await runtime.runPromise(Effect.orDie(log.checkpoint(project, undefined)))
  const expected = Buffer.from(treeHead(hashes.map(receiptLeafHash))).toString("base64")
  if (cp.tree_size !== n || cp.root !== expected) throw new Error(`the log's checkpoint (${cp.tree_size}, ${cp.root}) is not the tree head of the ${n} receipts (${expected})`)
  const sorted = [...perRoundCpu].sort((a, b) => a - b)
  console.log(
    `${n} receipts, ${perRoundCpu.length} rounds of ${perRound}: ${(totalCpu / n).toFixed(2)} µs CPU a receipt (main thread), ` +
      `a round ${(median(perRoundCpu) / 1000).toFixed(2)} ms median, ${(sorted[Math.floor(sorted.length * 0.9)]! / 1000).toFixed(2)} ms p90; ${(wallMs / 1000).toFixed(2)} s wall; root checked`
  )
  db.close()
} finally {
  await runtime.dispose()
  rmSync(dir, { recursive: true, force: true })
}
