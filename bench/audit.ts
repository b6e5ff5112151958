/**
 * `npx tsx bench/audit.ts [--receipts 200000] [--projects 20] [--runs 3] [--keep]`: receipts audited per second.
 *
 * Builds a synthetic SQLite store of validly sealed receipts by direct SQL (test/audit/synthetic.ts:
 * the real migrations, Ed25519 signatures, consistent requests, reservations, windows, chain heads and
 * one idempotency record per ten requests, over two months), then runs the same audit as
 * `tollgate audit` on it, `--runs` times, and reports the median throughput and the peak memory.
 * Every receipt is fully checked: JSON parse, RFC 8785 canonical form, SHA-256, Ed25519 verify,
 * chain link, BigInt charge recomputation, request/reservation cross-checks, window sums.
 * The store is audited as found on disk (page cache warm after the first run).
 */
import { mkdtempSync, rmSync, statSync } from "node:fs"
import { cpus, tmpdir } from "node:os"
import { join } from "node:path"
import { auditStore } from "../src/cli/audit.ts"
import { buildSyntheticStore } from "../test/audit/synthetic.ts"
import { flag, numArg } from "./lib/args.ts"

const receipts = numArg("--receipts", 200_000)
const projects = numArg("--projects", 20)
const runs = numArg("--runs", 3)

const dir = mkdtempSync(join(tmpdir(), "tollgate-bench-audit-"))
const path = join(dir, "synthetic.db")
const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MiB`

const t0 = performance.now()
await buildSyntheticStore(path, { receipts, projects, periods: ["2026-01", "2026-02"] })
const buildS = (performance.now() - t0) / 1000
const size = statSync(path).size
process.stdout.write(`built ${receipts} receipts over ${projects} projects in ${buildS.toFixed(1)} s (${mb(size)} on disk)\n`)

// Peak memory while auditing: sampled on every progress tick and at the end.
global.gc?.()
const rssBefore = process.memoryUsage().rss
let peakRss = rssBefore
let peakHeap = 0
const sample = () => {
  const m = process.memoryUsage()
  peakRss = Math.max(peakRss, m.rss)
  peakHeap = Math.max(peakHeap, m.heapUsed)
}
const rates: Array<number> = []
for (let i = 0; i < runs; i++) {
  const result = auditStore({
    database: `sqlite:${path}`,
    onProgress: ({ receipts: done, total }) => {
      sample()
      if (i === 0) process.stderr.write(`  run 1: ${done}/${total} receipts\n`)
    }
  })
  sample()
  if (!result.summary.clean) throw new Error(`the synthetic store should audit clean: ${JSON.stringify(result.summary.byKind)}`)
  if (result.summary.stats.receipts !== receipts) throw new Error(`audited ${result.summary.stats.receipts} of ${receipts} receipts`)
  rates.push(result.receiptsPerSecond)
  process.stdout.write(`run ${i + 1}: ${receipts} receipts in ${(result.durationMs / 1000).toFixed(2)} s = ${result.receiptsPerSecond} receipts/s\n`)
}
const sorted = [...rates].sort((a, b) => a - b)
const medianRate = sorted[Math.floor(sorted.length / 2)]!
process.stdout.write(
  `\naudit throughput: ${medianRate} receipts/s (median of ${runs}; ${cpus()[0]?.model ?? "cpu"}, one thread, Node ${process.version})\n` +
    `memory: rss ${mb(rssBefore)} before, peak ${mb(peakRss)} during (+${mb(peakRss - rssBefore)}); peak heap ${mb(peakHeap)}\n`
)
if (!flag("--keep")) rmSync(dir, { recursive: true, force: true })
else process.stdout.write(`store kept at ${path}\n`)
