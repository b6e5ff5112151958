/**
 * `npx tsx bench/walFrames.ts [--calls N] [--rounds R] [--batch 1,32] [--sync NORMAL|FULL]`: what the
 * store worker writes for one governed call. Runs the worker's own transaction bodies
 * (src/store/chatTransactions.ts: a reservation with an idempotency claim, then a settlement with a
 * signed receipt and a stored ≈ 1 KiB reply) on fresh SQLite files, `--batch` calls per COMMIT (1: an
 * idle gateway, each call commits alone; 32: a busy one, group commit), by default under
 * synchronous=NORMAL so the disk's fsync stays out of the figures (`--sync FULL` puts it in: every
 * COMMIT then waits for one), and reports per call:
 *
 * - WAL frames (one 4 KiB page each, written by the committing thread): counted from the WAL's
 *   growth with auto-checkpoints off, so the figure is exact and the same on every machine;
 * - CPU time of the thread running the transactions (statements, COMMIT, Ed25519, SHA-256), and
 *   wall time.
 *
 * Each schema the migrations have produced is measured in the same run, interleaved per round
 * (`0002`: before migration 0003, `latest`: all of them), so the CPU ratio holds on a noisy box.
 */
import { generateKeyPairSync } from "node:crypto"
import { mkdtempSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { sealReceipt } from "../src/services/ReceiptSigner.ts"
import { makeChatTransactions } from "../src/store/chatTransactions.ts"
import type { migrationSteps } from "../src/store/migrations.ts"
import { arg, numArg } from "./lib/args.ts"
import { callArgs, openStore, refuse } from "./lib/governedCalls.ts"
import { median } from "./lib/stats.ts"

const CALLS = numArg("--calls", 2000)
const ROUNDS = numArg("--rounds", 3)
const BATCHES = (arg("--batch") ?? "1,32").split(",").map(Number)
/** `--sync FULL`: every COMMIT waits for its fsync, as a settlement's does; wall time then shows the disk. */
const SYNC = arg("--sync") ?? "NORMAL"
const FRAME_BYTES = 4096 + 24

const schemas: ReadonlyArray<{ readonly name: string; readonly upTo: keyof typeof migrationSteps | undefined }> = [
  { name: "0002", upTo: "0002_receipt_usage_columns" },
  { name: "latest", upTo: undefined }
]

const { privateKey } = generateKeyPairSync("ed25519")

/** `calls` calls, `batch` per COMMIT: the reservations of a batch commit, then their settlements. */
const measure = async (upTo: keyof typeof migrationSteps | undefined, batch: number, calls: number) => {
  const dir = mkdtempSync(join(tmpdir(), "tg-wal-"))
  const { db, wal } = await openStore(dir, upTo, SYNC)
  db.pragma("wal_autocheckpoint = 0")
  const ops = makeChatTransactions(db, { keyId: "key_bench", seal: (unsigned) => sealReceipt(privateKey, unsigned) })
  const commit = (bodies: ReadonlyArray<() => void>) => {
    db.exec("BEGIN IMMEDIATE")
    for (const body of bodies) body()
    db.exec("COMMIT")
  }
  const run = (n: number) => {
    for (let i = 0; i < n; i += batch) {
      const now = Date.now()
      const batchCalls = Array.from({ length: Math.min(batch, n - i) }, (_, j) => callArgs(i + j, now))
      const amounts: Array<number> = []
      commit(batchCalls.map((c) => () => void amounts.push(ops.reserve(c.reserve, refuse).reservation)))
      commit(batchCalls.map((c, j) => () => ops.settle(c.settle(amounts[j]!))))
    }
  }
  run(200) // warm-up: statements prepared and JIT-compiled, the B-trees past their first pages
  db.pragma("wal_checkpoint(TRUNCATE)")
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  run(calls)
  const wallMicros = ((performance.now() - t0) * 1000) / calls
  const cpu = process.cpuUsage(cpu0)
  const frames = statSync(wal).size / FRAME_BYTES / calls
  db.close()
  rmSync(dir, { recursive: true, force: true })
  return { frames, cpuMicros: (cpu.user + cpu.system) / calls, wallMicros }
}

const results = new Map<string, Array<{ frames: number; cpuMicros: number; wallMicros: number }>>()
for (let round = 0; round < ROUNDS; round++) {
  for (const batch of BATCHES) {
    // Rotate the order each round so neither schema always runs first.
    const order = round % 2 === 0 ? schemas : [...schemas].reverse()
    for (const s of order) {
      const key = `${batch}|${s.name}`
      const r = await measure(s.upTo, batch, CALLS)
      results.set(key, [...(results.get(key) ?? []), r])
    }
  }
}

console.log(`\n${CALLS} governed calls per schema and round, ${ROUNDS} rounds, synchronous=${SYNC}, medians over rounds\n`)
console.log("| calls per COMMIT | schema | WAL frames per call | CPU µs per call | CPU vs 0002 | wall µs per call | wall vs 0002 |")
console.log("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
for (const batch of BATCHES) {
  const base = median(results.get(`${batch}|0002`)!.map((r) => r.cpuMicros))
  const baseWall = median(results.get(`${batch}|0002`)!.map((r) => r.wallMicros))
  for (const s of schemas) {
    const rs = results.get(`${batch}|${s.name}`)!
    const cpu = median(rs.map((r) => r.cpuMicros))
    const wall = median(rs.map((r) => r.wallMicros))
    console.log(
      `| ${batch} | ${s.name} | ${median(rs.map((r) => r.frames)).toFixed(2)} | ${cpu.toFixed(0)} | ${((cpu / base) * 100).toFixed(0)}% | ${wall.toFixed(0)} | ${((wall / baseWall) * 100).toFixed(0)}% |`
    )
  }
}
