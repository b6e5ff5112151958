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
 * The schema is the migrations' latest: the transactions of this tree only run on the schema they
 * were written for (the migration 0003 before/after it once measured is in docs/decisions/0009).
 * bench/storeCost.ts splits the same CPU per statement.
 */
import { generateKeyPairSync } from "node:crypto"
import { mkdtempSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { sealReceipt } from "../src/services/ReceiptSigner.ts"
import { makeChatTransactions } from "../src/store/chatTransactions.ts"
import { arg, numArg } from "./lib/args.ts"
import { callArgs, openStore, refuse } from "./lib/governedCalls.ts"
import { median } from "./lib/stats.ts"

const CALLS = numArg("--calls", 2000)
const ROUNDS = numArg("--rounds", 3)
const BATCHES = (arg("--batch") ?? "1,32").split(",").map(Number)
/** `--sync FULL`: every COMMIT waits for its fsync, as a settlement's does; wall time then shows the disk. */
const SYNC = arg("--sync") ?? "NORMAL"
const FRAME_BYTES = 4096 + 24


const { privateKey } = generateKeyPairSync("ed25519")

/** `calls` calls, `batch` per COMMIT: the reservations of a batch commit, then their settlements. */
const measure = async (batch: number, calls: number) => {
  const dir = mkdtempSync(join(tmpdir(), "tg-wal-"))
  const { db, wal } = await openStore(dir, undefined, SYNC)
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

const results = new Map<number, Array<{ frames: number; cpuMicros: number; wallMicros: number }>>()
for (let round = 0; round < ROUNDS; round++) {
  for (const batch of BATCHES) results.set(batch, [...(results.get(batch) ?? []), await measure(batch, CALLS)])
}

console.log(`\n${CALLS} governed calls per batch size and round, ${ROUNDS} rounds, synchronous=${SYNC}, medians over rounds\n`)
console.log("| calls per COMMIT | WAL frames per call | CPU µs per call | wall µs per call |")
console.log("| ---: | ---: | ---: | ---: |")
for (const batch of BATCHES) {
  const rs = results.get(batch)!
  const med = (pick: (r: (typeof rs)[number]) => number) => median(rs.map(pick))
  console.log(`| ${batch} | ${med((r) => r.frames).toFixed(2)} | ${med((r) => r.cpuMicros).toFixed(0)} | ${med((r) => r.wallMicros).toFixed(0)} |`)
}
